"""SentEval's transfer tasks (Conneau & Kiela 2018) read from its own layout, for the protocol of
:mod:`domains.text.senteval`.

Layout under ``<data root>/senteval/``: ``MR/rt-polarity.{pos,neg}``, ``CR/custrev.{pos,neg}``,
``SUBJ/subj.{objective,subjective}``, ``MPQA/mpqa.{pos,neg}``, ``TREC/{train_5500,TREC_10}.label``,
``MRPC/msr_paraphrase_{train,test}.txt``. Read as SentEval reads them: one sample per line of
``read().splitlines()`` (so CR's and MPQA's blank lines are samples, empty sentences, as in SentEval's counts),
latin-1 for the four binary tasks and TREC (TREC's train file has a latin-1 byte), MRPC as UTF-8 without its
BOM, header skipped. Samples are sorted as SentEval sorts them (by length, then label), so with the same seed
the folds are SentEval's folds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from domains.errors import DatasetMissingError, UserError
from domains.text.files import read_bytes, refuse_nul

TREC_CLASSES = {"ABBR": 0, "DESC": 1, "ENTY": 2, "HUM": 3, "LOC": 4, "NUM": 5}
FILES = {"MR": ("rt-polarity.pos", "rt-polarity.neg"), "CR": ("custrev.pos", "custrev.neg"),
         "SUBJ": ("subj.objective", "subj.subjective"), "MPQA": ("mpqa.pos", "mpqa.neg"),
         "TREC": ("train_5500.label", "TREC_10.label"), "MRPC": ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt")}
BINARY = ("MR", "CR", "SUBJ", "MPQA")


@dataclass
class Split:
    """Sentences and labels; ``second`` holds the other sentence of each pair (MRPC)."""

    sentences: list[str]
    labels: np.ndarray
    second: list[str] | None = None

    def __len__(self) -> int:
        return len(self.sentences)

    def all_sentences(self) -> list[str]:
        return self.sentences + (self.second or [])


@dataclass
class Task:
    """A transfer task; ``test`` None means cross-validation on ``train``."""

    name: str
    train: Split
    test: Split | None = None


def _path(root: Path, task: str, name: str) -> Path:
    path = Path(root) / "senteval" / task / name
    if not path.is_file():
        raise DatasetMissingError(f"SentEval task {task} is missing {path}: put SentEval's data/downstream/{task}/ "
                                  f"files under {Path(root) / 'senteval' / task}/")
    return path


def _lines(path: Path, encoding: str) -> list[str]:
    """The lines of ``path`` (universal newlines); UserError naming the file when it is empty, holds NUL bytes (a
    binary or UTF-16 file, which latin-1 would read as text) or does not decode as ``encoding``."""
    raw = read_bytes(path, str(path))
    if not raw.strip():
        raise UserError(f"{path} is empty: restore SentEval's file")
    refuse_nul(raw, path, "file (UTF-16?); restore SentEval's file")
    try:
        text = raw.decode(encoding)
    except UnicodeDecodeError as exc:
        decoded = bytes(exc.object)  # what the codec read (utf-8-sig: after the BOM)
        line = decoded[:exc.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: byte 0x{decoded[exc.start]:02x} is not {encoding} (SentEval's file is; "
                        "restore it)") from None
    return text.replace("\r\n", "\n").replace("\r", "\n").splitlines()


def _sorted(split: Split) -> Split:
    """SentEval's order: by token count (then the second sentence's, for pairs), then label; stable."""
    keys = [(len(s.split()), len(split.second[i].split()) if split.second else 0, int(y))
            for i, (s, y) in enumerate(zip(split.sentences, split.labels))]
    order = sorted(range(len(split)), key=keys.__getitem__)
    second = [split.second[i] for i in order] if split.second else None
    return Split([split.sentences[i] for i in order], split.labels[order], second)


def task_files(root: Path, tasks: Sequence[str]) -> list[Path]:
    """The files of ``tasks`` (DatasetMissingError naming the first one absent)."""
    return [_path(root, task, name) for task in tasks for name in FILES[task]]


def read_binary(root: Path, task: str) -> Task:
    """MR, CR, SUBJ, MPQA: label 1 for the first file (pos; SUBJ: objective), 0 for the second."""
    first, second = (_lines(_path(root, task, name), "latin-1") for name in FILES[task])
    sentences = [" ".join(line.split()) for line in first + second]
    labels = np.array([1] * len(first) + [0] * len(second), dtype=np.int64)
    return Task(task, _sorted(Split(sentences, labels)))


def _read_trec_file(path: Path) -> Split:
    sentences, labels = [], []
    for number, line in enumerate(_lines(path, "latin-1"), 1):
        target, _, rest = line.strip().partition(":")
        if target not in TREC_CLASSES or " " not in rest:
            raise UserError(f"{path}:{number}: expected 'COARSE:fine question', got {line[:60]!r}")
        sentences.append(" ".join(rest.split(" ", 1)[1].split()))  # drop the fine label
        labels.append(TREC_CLASSES[target])
    return _sorted(Split(sentences, np.array(labels, dtype=np.int64)))


def read_trec(root: Path) -> Task:
    train, test = (_read_trec_file(_path(root, "TREC", name)) for name in FILES["TREC"])
    return Task("TREC", train, test)


def _read_mrpc_file(path: Path) -> Split:
    a, b, labels = [], [], []
    for number, line in enumerate(_lines(path, "utf-8-sig")[1:], 2):  # utf-8-sig drops the BOM; skip header
        fields = line.strip().split("\t")
        if len(fields) < 5 or fields[0] not in ("0", "1"):
            raise UserError(f"{path}:{number}: expected 'Quality<TAB>id<TAB>id<TAB>sentence<TAB>sentence'")
        a.append(" ".join(fields[3].split()))
        b.append(" ".join(fields[4].split()))
        labels.append(int(fields[0]))
    if not labels:
        raise UserError(f"{path} holds no sentence pairs (its header only): restore SentEval's file")
    return _sorted(Split(a, np.array(labels, dtype=np.int64), b))


def read_mrpc(root: Path) -> Task:
    train, test = (_read_mrpc_file(_path(root, "MRPC", name)) for name in FILES["MRPC"])
    return Task("MRPC", train, test)


def read_task(root: Path, name: str) -> Task:
    if name in BINARY:
        return read_binary(root, name)
    if name == "TREC":
        return read_trec(root)
    if name == "MRPC":
        return read_mrpc(root)
    raise UserError(f"unknown SentEval task '{name}'")


def subsample(split: Split, size: int, seed: int) -> Split:
    """A random subset of ``size`` samples in the original order (for fast smoke runs only)."""
    if not size or len(split) <= size:
        return split
    keep = np.sort(np.random.default_rng(seed).choice(len(split), size, replace=False))
    second = [split.second[i] for i in keep] if split.second else None
    return Split([split.sentences[i] for i in keep], split.labels[keep], second)
