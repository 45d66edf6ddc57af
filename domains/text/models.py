"""Sentence encoders: quick-thought's pair of GRU encoders f and g, a small BERT-style pair trained from
scratch, and wrappers that turn any of them (or a local Hugging Face model) into ``encode(sentences)``.

Quick-thought (Logeswaran & Lee 2018): f (context) and g (target) are separate GRUs over separate word
embeddings, initialised uniformly in [-0.1, 0.1]; a sentence's representation is the GRU's final hidden state
(the two directions concatenated when bidirectional, ``hidden_dim // 2`` each). Sequences are packed with
``pack_padded_sequence`` so padding costs nothing. The evaluation embedding is ``[f(s), g(s)]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from domains.base import require
from domains.errors import UserError
from domains.text.config import TextConfig
from domains.text.tokenize import SentenceTokenizer


def word_vectors_file(path: str | Path) -> Path:
    """The ``word_vectors`` file a config names; UserError naming it where there is none."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise UserError(f"word_vectors file not found: {path}")
    return path


def read_word_vectors(path: str | Path, words: set[str] | None = None) -> dict[str, np.ndarray]:
    """Vectors of a word2vec or GloVe text file (``word v1 ... vD`` per line; word2vec's ``N D`` header line
    is skipped), only for ``words`` when given."""
    path = word_vectors_file(path)
    vectors: dict[str, np.ndarray] = {}
    dim = None
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh):
            parts = line.rstrip().split(" ")
            if number == 0 and len(parts) == 2 and all(p.isdigit() for p in parts):
                continue
            if len(parts) < 2:
                continue
            dim = dim or len(parts) - 1
            if len(parts) - 1 != dim:
                raise UserError(f"{path}:{number + 1}: expected {dim} numbers after the word, got {len(parts) - 1}")
            if words is None or parts[0] in words:
                vectors[parts[0]] = np.asarray(parts[1:], dtype=np.float32)
    if dim is None:
        raise UserError(f"no vectors in {path}")
    return vectors


class GRUEncoder(nn.Module):
    """Word embeddings -> GRU -> final hidden state [B, hidden_dim]."""

    def __init__(self, vocab_size: int, word_dim: int, hidden_dim: int, bidirectional: bool, pad_id: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim, padding_idx=pad_id)
        self.gru = nn.GRU(word_dim, hidden_dim // 2 if bidirectional else hidden_dim, batch_first=True,
                          bidirectional=bidirectional)
        for param in self.parameters():  # quick-thought's uniform initialiser
            nn.init.uniform_(param, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[pad_id].zero_()

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        packed = pack_padded_sequence(self.embed(ids), lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, hidden = self.gru(packed)  # [directions, B, H], in the input order
        return hidden.transpose(0, 1).reshape(ids.shape[0], -1)


class BertEncoder(nn.Module):
    """A BERT-style transformer from a `transformers.BertConfig`, randomly initialised (nothing downloaded);
    the sentence vector is the masked mean of the last layer or its [CLS] position."""

    def __init__(self, vocab_size: int, cfg: TextConfig, pad_id: int):
        super().__init__()
        transformers = require("transformers", "text")
        config = transformers.BertConfig(
            vocab_size=vocab_size, hidden_size=cfg.bert_hidden, num_hidden_layers=cfg.bert_layers,
            num_attention_heads=cfg.bert_heads, intermediate_size=cfg.bert_intermediate,
            max_position_embeddings=cfg.max_len, type_vocab_size=1, pad_token_id=pad_id)
        self.bert = transformers.BertModel(config, add_pooling_layer=False)
        self.pooling = cfg.bert_pooling

    def forward(self, ids: Tensor, lengths: Tensor) -> Tensor:
        mask = (torch.arange(ids.shape[1], device=ids.device)[None, :] < lengths.to(ids.device)[:, None])
        hidden = self.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state
        if self.pooling == "cls":
            return hidden[:, 0]
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1)


class QuickThought(nn.Module):
    """The encoder pair: ``forward`` gives (f(s), g(s)); ``embed`` gives the evaluation vector [f(s), g(s)]."""

    def __init__(self, f: nn.Module, g: nn.Module):
        super().__init__()
        self.f, self.g = f, g

    def forward(self, ids: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.f(ids, lengths), self.g(ids, lengths)

    def embed(self, ids: Tensor, lengths: Tensor) -> Tensor:
        return torch.cat(self(ids, lengths), dim=1)


def no_word_known(path: str | Path, words: int) -> UserError:
    """The error of a ``word_vectors`` file that holds none of the words it is read for."""
    return UserError(f"word_vectors {path} holds none of the {words} words it is read for (another language, or "
                     "words of other case than the sentences': lowercase=true lowers the sentences only)")


def build_model(method: str, cfg: TextConfig, tokenizer: SentenceTokenizer) -> tuple[QuickThought, dict]:
    """The encoder pair of ``method`` and what to record about it (word-vector coverage)."""
    vocab, pad = tokenizer.vocab_size, tokenizer.pad_id
    if method == "quickthought-bert":
        return QuickThought(BertEncoder(vocab, cfg, pad), BertEncoder(vocab, cfg, pad)), {}
    encoders = [GRUEncoder(vocab, cfg.word_dim, cfg.hidden_dim, cfg.bidirectional, pad) for _ in range(2)]
    info: dict = {}
    if cfg.word_vectors:
        vocab_map = tokenizer.vocab()
        vectors = read_word_vectors(cfg.word_vectors, set(vocab_map))
        found = {w: v for w, v in vectors.items() if w in vocab_map}
        if not found:  # the run would start from random embeddings under the id of one that read them
            raise no_word_known(cfg.word_vectors, vocab)
        dim = len(next(iter(vectors.values()))) if vectors else cfg.word_dim
        if dim != cfg.word_dim:
            raise UserError(f"word_vectors have {dim} dimensions but word_dim={cfg.word_dim}; "
                            f"add --set word_dim={dim}")
        rows = torch.tensor([vocab_map[w] for w in found], dtype=torch.long)
        values = torch.from_numpy(np.stack(list(found.values()))) if found else None
        for enc in encoders:
            if values is not None:
                with torch.no_grad():
                    enc.embed.weight[rows] = values
        info["word_vectors_coverage"] = len(found) / vocab
    return QuickThought(*encoders), info


def _in_length_order(sentences: Sequence[str], batch_size: int, encode_batch) -> np.ndarray:
    """Encode in batches of similar length (less padding) and return rows in the input order."""
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out: np.ndarray | None = None
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        vectors = encode_batch([sentences[i] for i in idx])
        if out is None:
            out = np.empty((len(sentences), vectors.shape[1]), dtype=np.float32)
        out[idx] = vectors
    return out if out is not None else np.zeros((0, 0), dtype=np.float32)


class QuickThoughtEncoder:
    """A trained (or untrained) encoder pair as a SentEval encoder: ``encode(sentences) -> [N, 2·d]``."""

    def __init__(self, model: QuickThought, tokenizer: SentenceTokenizer, device: torch.device, batch_size: int,
                 truncate: bool):
        self.model, self.tokenizer, self.device, self.batch_size = model, tokenizer, device, batch_size
        self.truncate = truncate  # GRUs read whole sentences; BERT stops at its position limit

    def prepare(self, sentences: Sequence[str]) -> None:
        """Nothing to fit: the encoder is frozen."""

    @torch.no_grad()
    def _batch(self, sentences: list[str]) -> np.ndarray:
        ids, lengths = self.tokenizer.batch(sentences, self.truncate)
        return self.model.embed(ids.to(self.device), lengths).float().cpu().numpy()

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        self.model.eval()
        try:
            return _in_length_order(sentences, self.batch_size, self._batch)
        finally:
            self.model.train()


class HFEncoder:
    """A local Hugging Face model directory (``AutoModel`` + ``AutoTokenizer``, never downloaded): the masked
    mean of the last hidden layer."""

    def __init__(self, model_dir: str, device: torch.device, batch_size: int):
        path = Path(model_dir).expanduser()
        if not model_dir or not path.is_dir():
            raise UserError(f"method hf needs --set hf_model_dir=DIR, a local Hugging Face model directory "
                            f"(got '{model_dir}')")
        transformers = require("transformers", "text")
        # trust_remote_code=False: a folder whose config names code of its own (auto_map) is refused; left unset,
        # transformers asks on the terminal whether to run it, and a "y" there (or piped in) ran the folder's code
        local = {"local_files_only": True, "trust_remote_code": False}
        try:
            self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, **local)
            self.model = transformers.AutoModel.from_pretrained(path, **local).to(device).eval()
        except (OSError, ValueError) as exc:
            raise UserError(f"could not load a Hugging Face model from {path}: {exc}") from exc
        self.device, self.batch_size = device, batch_size
        self.max_len = min(int(getattr(self.tokenizer, "model_max_length", 512)), 512)

    def prepare(self, sentences: Sequence[str]) -> None:
        """Nothing to fit: the model is frozen."""

    @torch.no_grad()
    def _batch(self, sentences: list[str]) -> np.ndarray:
        enc = self.tokenizer(sentences, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt")
        enc = {k: v.to(self.device) for k, v in enc.items()}
        hidden = self.model(**enc).last_hidden_state
        weights = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return ((hidden * weights).sum(1) / weights.sum(1).clamp(min=1)).float().cpu().numpy()

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return _in_length_order(sentences, self.batch_size, self._batch)
