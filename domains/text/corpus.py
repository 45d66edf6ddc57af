"""Training corpora: ordered sentences with the document each belongs to.

- ``books``: a directory of plain-text books (``<data root>/books/*.txt``, read as latin-1), one document per
  file, split into sentences with pysbd (rule-based, offline) paragraph by paragraph, in reading order. The
  split is cached per file content under ``$HARNESS_CACHE_DIR`` (default ``~/.cache/contrastive-harness``).
- ``hf-text``: a Hugging Face text dataset, or a local folder or file, read with ``datasets``
  (:mod:`domains.text.hf_text`).
- ``synthetic-topics``: the embedded default. Every document follows one latent topic; its sentences come
  from a small probabilistic grammar whose content words are drawn from the topic's own words with
  probability ``synthetic_topic_word_prob`` (else from words shared by all topics). A matching
  sentence-classification task (predict the topic of a single sentence) has a known, uniform class prior 1/K.
  K = ``synthetic_topics`` sets the class prior of the corpus too: every topic has as many documents
  (:func:`synthetic_documents`), so the topics of the training sentences give τ+ = Σ_k p_k² = 1/K.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domains.base import require
from domains.context import RunContext
from domains.errors import DatasetMissingError, UserError
from domains.files import cache_dir, hash_jsonable, write_atomic
from domains.text.config import TextConfig
from domains.text.files import read_bytes, refuse_nul
from domains.text.hf_text import Source, resolve, text_rows

SPLITTER_VERSION = "pysbd-paragraphs-1"  # part of the cache key: bump it when the splitting changes


@dataclass
class Corpus:
    """Sentences in reading order; ``doc_ids[i]`` is the document of sentence i (non-decreasing)."""

    sentences: list[str]
    doc_ids: np.ndarray  # int64 [N]
    doc_names: list[str]
    doc_labels: np.ndarray | None = None  # the latent topic of each document (synthetic corpus only)

    def __len__(self) -> int:
        return len(self.sentences)


def from_documents(names: list[str], documents: list[list[str]], doc_labels: np.ndarray | None = None) -> Corpus:
    sentences = [s for doc in documents for s in doc]
    doc_ids = np.repeat(np.arange(len(documents)), [len(d) for d in documents]).astype(np.int64)
    return Corpus(sentences, doc_ids, list(names), doc_labels)


def keep_prefixes(documents: list[list[str]], max_sentences: int) -> list[list[str]]:
    """At most ``max_sentences`` in all: a contiguous prefix of each document, in proportion to its length,
    so every document (book) stays represented and its sentences stay in order."""
    lengths = [len(d) for d in documents]
    kept = kept_lengths(lengths, max_sentences)
    return documents if kept == lengths else [d[:n] for d, n in zip(documents, kept)]


def kept_lengths(lengths: list[int], max_sentences: int) -> list[int]:
    """How many sentences :func:`keep_prefixes` keeps of documents of these lengths."""
    total = sum(lengths)
    if not max_sentences or total <= max_sentences:
        return lengths
    return [n * max_sentences // total for n in lengths]


# ----------------------------------------------------------------------------------------- books


def split_sentences(text: str) -> list[str]:
    """Sentences of a plain-text book: paragraphs are separated by blank lines and hard-wrapped, so each
    paragraph is unwrapped and split with pysbd; the order is kept."""
    pysbd = require("pysbd", "text")
    segmenter = pysbd.Segmenter(language="en", clean=False)
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text.replace("\r\n", "\n")):
        paragraph = " ".join(paragraph.split())
        if paragraph:
            sentences.extend(s.strip() for s in segmenter.segment(paragraph) if s.strip())
    return sentences


def book_sentences(path: Path) -> list[str]:
    """The sentences of one book, cached by the sha256 of its bytes (splitting all 15 books takes a minute)."""
    raw = read_bytes(path, f"the book {path}")
    key = hashlib.sha256(raw + SPLITTER_VERSION.encode()).hexdigest()[:32]
    cached = cache_dir() / "text" / f"{path.stem}-{key}.json"
    sentences = _cached_sentences(cached)
    if sentences is not None:
        return sentences
    refuse_nul(raw, path, "book (UTF-16? books are read as latin-1, one byte a character)")
    sentences = split_sentences(raw.decode("latin-1"))
    if not sentences:
        raise UserError(f"{path} is empty (no sentence in it): remove it from {path.parent}/ or restore its text")
    write_atomic(cached, json.dumps(sentences))  # concurrent runs never read half a file
    return sentences


def _cached_sentences(path: Path) -> list[str] | None:
    """The cached sentences at ``path``; None when there are none, or (with a warning naming the file) when the file
    is damaged or not a list of sentences: the book is then split again and the cache rewritten."""
    if not path.exists():
        return None
    try:
        sentences = json.loads(path.read_text())
        if not isinstance(sentences, list) or not sentences or not all(isinstance(s, str) for s in sentences):
            raise ValueError("not a list of sentences")
        return sentences
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        warnings.warn(f"the sentence cache {path} is damaged or was not written by the harness ({exc}); splitting "
                      "the book again", UserWarning, stacklevel=3)
        return None


def book_paths(data_root: Path, names: tuple[str, ...]) -> list[Path]:
    folder = Path(data_root) / "books"
    available = sorted(p for p in folder.glob("*.txt") if p.is_file()) if folder.is_dir() else []
    if not available:
        raise DatasetMissingError(f"no books found: put plain-text books (*.txt, one book per file) under {folder}/")
    if not names:
        return available
    by_name = {p.stem: p for p in available}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise UserError(f"unknown book(s) {', '.join(unknown)} in {folder}; available: {', '.join(sorted(by_name))}")
    return [by_name[n] for n in names]


def load_books(data_root: Path, cfg: TextConfig) -> Corpus:
    paths = book_paths(data_root, cfg.books)
    documents = keep_prefixes([book_sentences(p) for p in paths], cfg.max_sentences)
    return from_documents([p.stem for p in paths], documents)


# ------------------------------------------------------------------------------- Hugging Face


def load_hf(cfg: TextConfig, source: Source, log: Callable[[str], None], bars: bool) -> Corpus:
    """Rows of a Hugging Face dataset (``hf_dataset`` resolved: :func:`domains.text.hf_text.resolve`) in order
    (BookCorpus: one sentence per row; :mod:`domains.text.hf_text`).
    Consecutive rows with the same ``hf_doc_field`` value form a document; without that field the split is one
    document."""
    names: list[str] = []
    documents: list[list[str]] = []
    previous = object()
    count = 0
    for doc, text in text_rows(cfg, source, log, bars):
        if not documents or doc != previous:
            names.append(str(doc if doc is not None else cfg.hf_dataset))
            documents.append([])
            previous = doc
        new = split_sentences(text) if cfg.hf_split_sentences else [text.strip()] if text.strip() else []
        documents[-1].extend(new)
        count += len(new)
        if cfg.max_sentences and count >= cfg.max_sentences:
            break
    return from_documents(names, documents)


# -------------------------------------------------------------------------------- synthetic


_DETERMINERS = ("the", "a", "one", "every", "this", "that", "some")
_PREPOSITIONS = ("in", "on", "near", "with", "under", "over", "beside", "behind")
_SIZES = {"noun": 15, "verb": 10, "adj": 10}  # words per topic; the shared lists are twice as long


def _pseudo_words(rng: np.random.Generator, count: int, taken: set[str]) -> list[str]:
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    words: list[str] = []
    while len(words) < count:
        syllables = int(rng.integers(2, 4))
        word = "".join(consonants[rng.integers(len(consonants))] + vowels[rng.integers(len(vowels))]
                       for _ in range(syllables))
        if word not in taken:
            taken.add(word)
            words.append(word)
    return words


class TopicGrammar:
    """S -> NP VP [PP] '.'; NP -> Det [Adj] N; VP -> V NP; PP -> Prep NP. Each content word (N, V, Adj) is a
    word of the topic with probability ``topic_prob``, else a word shared by every topic."""

    def __init__(self, topics: int, topic_prob: float, seed: int):
        rng = np.random.default_rng(seed)
        taken = set(_DETERMINERS) | set(_PREPOSITIONS)
        self.shared = {pos: _pseudo_words(rng, 2 * n, taken) for pos, n in _SIZES.items()}
        self.topic_words = [{pos: _pseudo_words(rng, n, taken) for pos, n in _SIZES.items()} for _ in range(topics)]
        self.topic_prob = topic_prob

    def _word(self, rng: np.random.Generator, topic: int, pos: str) -> str:
        words = self.topic_words[topic][pos] if rng.random() < self.topic_prob else self.shared[pos]
        return words[rng.integers(len(words))]

    def _noun_phrase(self, rng: np.random.Generator, topic: int) -> list[str]:
        phrase = [_DETERMINERS[rng.integers(len(_DETERMINERS))]]
        if rng.random() < 0.4:
            phrase.append(self._word(rng, topic, "adj"))
        return phrase + [self._word(rng, topic, "noun")]

    def bayes_accuracy(self, sentences: list[str]) -> float:
        """Expected accuracy (percent) of the Bayes classifier on ``sentences``: a topic word names the topic
        for sure (the word lists are disjoint); a sentence without one is a uniform guess among the K topics."""
        owner = {w: t for t, words in enumerate(self.topic_words) for ws in words.values() for w in ws}
        k = len(self.topic_words)
        hits = [1.0 if any(w in owner for w in s.split()) else 1.0 / k for s in sentences]
        return 100 * float(np.mean(hits))

    def sentence(self, rng: np.random.Generator, topic: int) -> str:
        words = self._noun_phrase(rng, topic) + [self._word(rng, topic, "verb")] + self._noun_phrase(rng, topic)
        if rng.random() < 0.5:
            words += [_PREPOSITIONS[rng.integers(len(_PREPOSITIONS))]] + self._noun_phrase(rng, topic)
        return " ".join(words) + " ."


def _grammar(cfg: TextConfig) -> TopicGrammar:
    return TopicGrammar(cfg.synthetic_topics, cfg.synthetic_topic_word_prob, cfg.synthetic_seed)


def synthetic_documents(cfg: TextConfig) -> int:
    """The number of documents of the synthetic corpus: ``synthetic_documents``, or for 0 max(160, 8·K) rounded
    up to a multiple of K = ``synthetic_topics``: the same number of documents (and sentences) for every topic,
    and at least 8 of them, however many topics; 160, the size before K could change, for K <= 20."""
    if cfg.synthetic_documents:
        return cfg.synthetic_documents
    k = cfg.synthetic_topics
    return -(-max(160, 8 * k) // k) * k


def synthetic_sentences(documents: int, per_doc: int, max_sentences: int) -> int:
    """The training sentences of the synthetic corpus of ``documents`` documents (resolved:
    :func:`synthetic_documents`) of ``per_doc`` sentences, as :func:`synthetic_corpus` keeps them, without
    generating it."""
    return sum(kept_lengths([per_doc] * documents, max_sentences))


def sentence_labels(corpus: Corpus) -> np.ndarray:
    """The class of each training sentence, for the class prior a run reports (never for training): its topic
    on the synthetic corpus, else the document it comes from (``books``: its book)."""
    return corpus.doc_ids if corpus.doc_labels is None else corpus.doc_labels[corpus.doc_ids]


def _balanced_labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return rng.permutation(np.arange(n) % k).astype(np.int64)


def synthetic_corpus(cfg: TextConfig) -> Corpus:
    grammar = _grammar(cfg)
    rng = np.random.default_rng([cfg.synthetic_seed, 1])
    topics = _balanced_labels(rng, synthetic_documents(cfg), cfg.synthetic_topics)
    documents = [[grammar.sentence(rng, int(t)) for _ in range(cfg.synthetic_sentences_per_doc)] for t in topics]
    documents = keep_prefixes(documents, cfg.max_sentences)
    return from_documents([f"doc{i:04d}-topic{t}" for i, t in enumerate(topics)], documents, topics)


def synthetic_task(cfg: TextConfig) -> tuple[list[str], np.ndarray, float]:
    """Held-out single sentences labelled with their topic (classes balanced, so the prior is 1/K each), and
    the Bayes accuracy on them, the ceiling any encoder can reach."""
    grammar = _grammar(cfg)
    rng = np.random.default_rng([cfg.synthetic_seed, 2])
    labels = _balanced_labels(rng, cfg.synthetic_eval_sentences, cfg.synthetic_topics)
    sentences = [grammar.sentence(rng, int(t)) for t in labels]
    return sentences, labels, grammar.bayes_accuracy(sentences)


def synthetic_fingerprint(cfg: TextConfig) -> str:
    keys = ("synthetic_topics", "synthetic_documents", "synthetic_sentences_per_doc", "synthetic_topic_word_prob",
            "synthetic_eval_sentences", "synthetic_seed", "max_sentences")
    values = {k: getattr(cfg, k) for k in keys} | {"synthetic_documents": synthetic_documents(cfg)}
    return hash_jsonable(values | {"generator": "TopicGrammar-1"})


def load_corpus(dataset: str, cfg: TextConfig, ctx: RunContext, source: Source | None = None) -> Corpus:
    """The training corpus of ``dataset``; for hf-text, from ``source`` where the caller resolved it already (the
    run's fingerprint hashes the same files), else resolved here."""
    if dataset == "synthetic-topics":
        return synthetic_corpus(cfg)
    if dataset == "books":
        return load_books(ctx.data_root, cfg)
    if dataset == "hf-text":
        return load_hf(cfg, source or resolve(cfg, ctx.data_root), ctx.log, bars=not ctx.quiet)
    raise UserError(f"unknown text dataset '{dataset}'")
