"""The checks every reader of the text domain's plain-text files makes (SentEval's tasks,
:mod:`domains.text.senteval_tasks`; the books, :mod:`domains.text.corpus`): a file that cannot be read, or that
holds NUL bytes (a binary or UTF-16 file, which latin-1 would read as text), is a UserError naming it, never a
traceback or a task of noise. Each reader says in its own words what the file should be.
"""

from __future__ import annotations

from pathlib import Path

from domains.errors import UserError


def read_bytes(path: Path, name: str) -> bytes:
    """The bytes of ``path``; UserError ``cannot read <name> (<why>)`` when the system refuses them."""
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {name} ({exc.strerror or exc})") from None


def refuse_nul(raw: bytes, path: Path, plain_text: str) -> None:
    """UserError when ``raw`` (the bytes of ``path``) holds a NUL byte: ``not a plain-text <plain_text>``, the
    reader's own words for what the file should be and how to restore it."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raise UserError(f"{path} holds NUL bytes (the first at offset {nul}): not a plain-text {plain_text}")
