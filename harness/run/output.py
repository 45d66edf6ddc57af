"""Output settings of ``harness run`` and ``harness sweep``: what a normal run shows, what ``-v`` adds.

Apart from the CLI so that a sweep's spawned workers take the same settings without importing the CLI (which
imports the sweep's module)."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from typing import TextIO

# Library chatter a normal run hides (-v shows it): deprecation notices of APIs the harness's dependencies
# call (torch.jit.script's FutureWarning from PyG), INFO lines of libraries that configure logging on import
# (absl through dm_control), and PyG's "Processing..." / "Done!" prints when it first processes a TU set.
QUIET_WARNINGS = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)
QUIET_LOGGERS = ("absl", "torch_geometric", "transformers", "datasets", "urllib3", "filelock", "matplotlib",
                 "PIL", "OpenGL")
QUIET_PRINTS = frozenset({"Processing...", "Done!"})


class _DropLines:
    """A stderr that drops the exact lines in QUIET_PRINTS (written by ``print``: the text, then its newline)
    and passes every other write through unchanged, progress bars included."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._dropped = False

    def write(self, text: str) -> int:
        dropped, self._dropped = self._dropped, text in QUIET_PRINTS
        if self._dropped or (dropped and text == "\n"):
            return len(text)
        return self._stream.write(text)

    def close(self) -> None:
        """Flush, never close: a logging handler that holds this stream (absl's) is closed by any later
        ``logging.config.dictConfig``, and closing would close the process's real stderr."""
        self._stream.flush()

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def configure_output(verbose: bool) -> None:
    """A normal run shows progress bars, its estimate and results; ``verbose`` adds every log line.

    The run's own log lines always go to its record's ``.log`` file; the "harness" logger does not propagate
    to the root logger, where a library may have installed a handler (absl calls ``logging.basicConfig``).
    """
    harness_logger = logging.getLogger("harness")
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        harness_logger.propagate = True
        return
    harness_logger.propagate = False
    logging.getLogger().setLevel(logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for category in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", category=category)
    if not isinstance(sys.stderr, _DropLines):
        sys.stderr = _DropLines(sys.stderr)


@contextlib.contextmanager
def output_settings(verbose: bool) -> Iterator[None]:
    """``configure_output`` for one command, undone afterwards: ``main`` also runs inside other programs."""
    root, harness_logger = logging.getLogger(), logging.getLogger("harness")
    loggers = [root, *(logging.getLogger(name) for name in QUIET_LOGGERS)]
    levels, handlers = [lg.level for lg in loggers], list(root.handlers)
    stderr, propagate = sys.stderr, harness_logger.propagate
    with warnings.catch_warnings():
        configure_output(verbose)
        try:
            yield
        finally:
            sys.stderr, harness_logger.propagate = stderr, propagate
            root.handlers[:] = handlers
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)
