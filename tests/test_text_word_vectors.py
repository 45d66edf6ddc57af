"""The text domain's word vectors are data: a missing file stops the run before it starts (no failed record), and
the file's contents are part of the data fingerprint, so other vectors are another run, never a reused record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import domains
from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from domains.text.config import TextConfig

TEXT = domains.get("text")


def _spec(word_vectors: str) -> RunSpec:
    return RunSpec("text", "quickthought", "synthetic-topics", "infonce", {}, "quick", 0,
                   TextConfig(word_vectors=word_vectors))


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path / "work", quiet=True)


def test_missing_word_vectors_stop_the_run_before_it_starts(tmp_path):
    with pytest.raises(UserError, match=r"^word_vectors file not found: .*nowhere\.txt$"):
        TEXT.data_fingerprint(_spec(str(tmp_path / "nowhere.txt")), _ctx(tmp_path))


def test_other_word_vectors_are_other_data(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("the 0.1 0.2\n")
    second.write_text("the 0.3 0.2\n")
    prints = [TEXT.data_fingerprint(_spec(str(p)), _ctx(tmp_path)) for p in (first, second)]
    assert prints[0]["word_vectors_sha256"] != prints[1]["word_vectors_sha256"]
    assert "word_vectors_sha256" not in TEXT.data_fingerprint(_spec(""), _ctx(tmp_path))


def test_a_file_that_holds_none_of_the_words_is_refused_not_read_as_zeros(tmp_path):
    """The bag of words gave every sentence the zero vector (chance accuracy), quick-thought started from random
    embeddings: both under the id of a run that read the vectors."""
    from domains.text.models import build_model
    from domains.text.senteval import BowEncoder
    from domains.text.tokenize import train_tokenizer

    path = tmp_path / "vectors.txt"
    path.write_text("Katze 1 2 3\nHund 4 5 6\n")
    with pytest.raises(UserError, match=r"holds none of the 3 words it is read for \(another language"):
        BowEncoder(str(path)).prepare(["the cat sat"])
    tokenizer = train_tokenizer(["the cat sat", "the dog"], "word", 100, 30)
    with pytest.raises(UserError, match=f"holds none of the {tokenizer.vocab_size} words"):
        build_model("quickthought", TextConfig(word_vectors=str(path), word_dim=3), tokenizer)
    path.write_text("Katze 1 2 3\ncat 4 5 6\n")  # one word known is enough
    BowEncoder(str(path)).prepare(["the cat sat"])
