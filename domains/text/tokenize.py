"""Tokenisers trained offline from the training corpus with the `tokenizers` library.

- ``word``: a WordLevel model (whitespace and punctuation pre-tokeniser, optional lowercasing) for the GRU
  encoders; the ``vocab_size - 2`` most frequent words plus ``[PAD]`` (id 0) and ``[UNK]`` (id 1).
- ``wordpiece``: a WordPiece model with BERT's normaliser and pre-tokeniser and ``[CLS] ... [SEP]`` around
  each sentence, for the BERT-style encoders.
Training truncates to ``max_len`` tokens (special tokens included); evaluation may not (a GRU has no
position limit). Nothing is downloaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from domains.base import require

PAD, UNK, CLS, SEP, MASK = "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"
Kind = Literal["word", "wordpiece"]


class SentenceTokenizer:
    """A trained `tokenizers.Tokenizer` and the padding to id tensors."""

    def __init__(self, tokenizer, kind: Kind, max_len: int):
        self.tokenizer = tokenizer
        self.kind = kind
        self.max_len = max_len
        self.pad_id = tokenizer.token_to_id(PAD)
        self.unk_id = tokenizer.token_to_id(UNK)
        tokenizer.no_padding()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def vocab(self) -> dict[str, int]:
        return self.tokenizer.get_vocab()

    def ids(self, sentences: Sequence[str], truncate: bool = True) -> list[list[int]]:
        """Token ids per sentence, at most ``max_len`` of them when ``truncate``."""
        if truncate:
            self.tokenizer.enable_truncation(max_length=self.max_len)
        else:
            self.tokenizer.no_truncation()
        # An empty sentence (SentEval keeps blank lines as samples) becomes one [UNK], so every row has a length.
        return [e.ids or [self.unk_id] for e in self.tokenizer.encode_batch(list(sentences))]

    def batch(self, sentences: Sequence[str], truncate: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """``(ids [B, L] padded with pad_id, lengths [B])`` with L the longest sentence of the batch."""
        return pad(self.ids(sentences, truncate), self.pad_id)

    def to_str(self) -> str:
        return self.tokenizer.to_str()

    @classmethod
    def from_str(cls, text: str, kind: Kind, max_len: int) -> SentenceTokenizer:
        tokenizers = require("tokenizers", "text")
        return cls(tokenizers.Tokenizer.from_str(text), kind, max_len)


def pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of token ids -> ``(ids [B, L] padded with pad_id, lengths [B])``, L the longest row."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    ids = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return ids, lengths


def train_tokenizer(sentences: Sequence[str], kind: Kind, vocab_size: int, max_len: int, lowercase: bool = True,
                    min_frequency: int = 1) -> SentenceTokenizer:
    """Train a ``word`` or ``wordpiece`` tokeniser on ``sentences`` (deterministic for a given corpus)."""
    tokenizers = require("tokenizers", "text")
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    if kind == "word":
        tok = tokenizers.Tokenizer(models.WordLevel(unk_token=UNK))
        steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
        tok.normalizer = normalizers.Sequence(steps)
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=[PAD, UNK], show_progress=False)
    elif kind == "wordpiece":
        tok = tokenizers.Tokenizer(models.WordPiece(unk_token=UNK))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=[PAD, UNK, CLS, SEP, MASK], show_progress=False)
    else:
        raise ValueError(f"kind must be 'word' or 'wordpiece', got {kind!r}")
    tok.train_from_iterator(sentences, trainer=trainer)
    if kind == "wordpiece":
        tok.post_processor = processors.TemplateProcessing(
            single=f"{CLS} $A {SEP}", special_tokens=[(CLS, tok.token_to_id(CLS)), (SEP, tok.token_to_id(SEP))])
        tok.decoder = decoders.WordPiece()
    return SentenceTokenizer(tok, kind, max_len)
