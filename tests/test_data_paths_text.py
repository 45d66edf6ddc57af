"""The text domain's data paths under damage: SentEval files in a wrong encoding, empty or binary, and books that
are empty or not plain text. Every file is written by the test; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from domains.errors import UserError
from domains.text import corpus, senteval_tasks
from domains.text.config import TextConfig

MRPC_HEADER = "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _task(root: Path, task: str, contents: dict[str, bytes]) -> Path:
    folder = root / "senteval" / task
    folder.mkdir(parents=True, exist_ok=True)
    for name, body in contents.items():
        (folder / name).write_bytes(body)
    return root


def _mrpc(rows: list[str]) -> bytes:
    return (MRPC_HEADER + "".join(f"{r}\n" for r in rows)).encode("utf-8")


PAIRS = ["1\t1\t2\tA cat sat .\tThe cat sat .", "0\t3\t4\tA dog ran .\tIt rained ."]


def test_mrpc_in_a_wrong_encoding_is_named_with_its_line(tmp_path):
    """A latin-1 byte in MRPC's UTF-8 file gave a UnicodeDecodeError traceback."""
    bad = _mrpc(PAIRS).replace(b"It rained", b"It rain\xe9d")
    _task(tmp_path, "MRPC", {"msr_paraphrase_train.txt": _mrpc(PAIRS), "msr_paraphrase_test.txt": bad})
    with pytest.raises(UserError, match=r"msr_paraphrase_test\.txt:3: byte 0xe9 is not utf-8-sig"):
        senteval_tasks.read_task(tmp_path, "MRPC")


def test_mrpc_with_its_header_only_is_refused(tmp_path):
    _task(tmp_path, "MRPC", {"msr_paraphrase_train.txt": _mrpc(PAIRS),
                             "msr_paraphrase_test.txt": MRPC_HEADER.encode("utf-8")})
    with pytest.raises(UserError, match=r"msr_paraphrase_test\.txt holds no sentence pairs"):
        senteval_tasks.read_task(tmp_path, "MRPC")


def test_an_empty_senteval_file_is_named_not_a_task_of_one_class(tmp_path):
    """An empty rt-polarity.neg gave MR with positive sentences only, without a word."""
    _task(tmp_path, "MR", {"rt-polarity.pos": b"good .\nfine .\n", "rt-polarity.neg": b""})
    with pytest.raises(UserError, match=r"rt-polarity\.neg is empty"):
        senteval_tasks.read_task(tmp_path, "MR")
    _task(tmp_path, "TREC", {"train_5500.label": b"NUM:date When ?\n", "TREC_10.label": b"\n"})
    with pytest.raises(UserError, match=r"TREC_10\.label is empty"):
        senteval_tasks.read_task(tmp_path, "TREC")


def test_a_utf16_senteval_file_is_named(tmp_path):
    _task(tmp_path, "CR", {"custrev.pos": "good .\n".encode("utf-16"), "custrev.neg": b"bad .\n"})
    with pytest.raises(UserError, match=r"custrev\.pos holds NUL bytes"):
        senteval_tasks.read_task(tmp_path, "CR")


def test_senteval_lines_are_read_as_before(tmp_path):
    """CRLF, a lone CR, blank lines and a latin-1 byte: the samples SentEval's ``read().splitlines()`` gives."""
    _task(tmp_path, "MPQA", {"mpqa.pos": b"good\r\nnice caf\xe9\r\n\r\nfine\n", "mpqa.neg": b"bad\rworse\n"})
    task = senteval_tasks.read_task(tmp_path, "MPQA")
    assert sorted(task.train.sentences) == sorted(["good", "nice caf\xe9", "", "fine", "bad", "worse"])
    assert sorted(task.train.labels.tolist()) == [0, 0, 1, 1, 1, 1]


def _books(root: Path, books: dict[str, bytes]) -> Path:
    (root / "books").mkdir(parents=True, exist_ok=True)
    for name, body in books.items():
        (root / "books" / name).write_bytes(body)
    return root


def test_an_empty_book_is_named_not_a_document_without_sentences(tmp_path):
    pytest.importorskip("pysbd")
    _books(tmp_path, {"a.txt": b"One sentence here. Another one.\n", "empty.txt": b"\n\n  \n"})
    with pytest.raises(UserError, match=r"books/empty\.txt is empty"):
        corpus.load_books(tmp_path, TextConfig())


def test_a_utf16_book_is_named_not_read_as_latin1_noise(tmp_path):
    pytest.importorskip("pysbd")
    _books(tmp_path, {"a.txt": b"One sentence here.\n", "u16.txt": "Hello world. Bye.".encode("utf-16")})
    with pytest.raises(UserError, match=r"books/u16\.txt holds NUL bytes"):
        corpus.load_books(tmp_path, TextConfig())


def test_a_cached_empty_split_is_not_trusted(tmp_path, cache):
    pytest.importorskip("pysbd")
    _books(tmp_path, {"a.txt": b"One sentence here. Another one.\n"})
    first = corpus.load_books(tmp_path, TextConfig()).sentences
    (path,) = (cache / "text").glob("a-*.json")
    path.write_text("[]")
    with pytest.warns(UserWarning, match="damaged"):
        assert corpus.load_books(tmp_path, TextConfig()).sentences == first


def test_a_folder_named_like_a_book_is_not_a_book(tmp_path):
    """``books/*.txt`` took in a folder of that name, and reading it failed with IsADirectoryError."""
    pytest.importorskip("pysbd")
    _books(tmp_path, {"a.txt": b"One sentence here.\n"})
    (tmp_path / "books" / "drafts.txt").mkdir()
    assert corpus.load_books(tmp_path, TextConfig()).doc_names == ["a"]


def _unreadable(monkeypatch, name: str) -> None:
    read_bytes = Path.read_bytes

    def refuse(self):
        if self.name == name:
            raise PermissionError(13, "Permission denied", str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)


def test_an_unreadable_book_or_senteval_file_is_named(tmp_path, monkeypatch):
    _books(tmp_path, {"a.txt": b"One sentence here.\n"})
    _task(tmp_path, "MR", {"rt-polarity.pos": b"good .\n", "rt-polarity.neg": b"bad .\n"})
    _unreadable(monkeypatch, "a.txt")
    with pytest.raises(UserError, match=r"cannot read the book .*books/a\.txt \(Permission denied\)"):
        corpus.load_books(tmp_path, TextConfig())
    _unreadable(monkeypatch, "rt-polarity.neg")
    with pytest.raises(UserError, match=r"cannot read .*rt-polarity\.neg \(Permission denied\)"):
        senteval_tasks.read_task(tmp_path, "MR")
