"""``harness list`` piped into a reader that stops early (``| head``): no traceback, exit 0."""

from __future__ import annotations

import io
import sys

from harness import listing


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: the first write or flush fails as a closed pipe does."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_list_into_a_closed_pipe_exits_0_without_a_traceback(monkeypatch):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert listing.cmd_list("presets") == 0
    assert listing.cmd_list(None) == 0
