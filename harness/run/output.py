"""Output settings of ``harness run`` and ``harness sweep``: what a normal run shows, what ``-v`` adds.

Apart from the CLI so that a sweep's spawned workers take the same settings without importing the CLI (which
imports the sweep's module)."""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

# Library chatter a normal run hides (-v shows it): deprecation notices of APIs the harness's dependencies
# call (torch.jit.script's FutureWarning from PyG), INFO lines of libraries that configure logging on import
# (absl through dm_control).
QUIET_WARNINGS = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)
QUIET_LOGGERS = ("absl", "torch_geometric", "transformers", "datasets", "urllib3", "filelock", "matplotlib",
                 "PIL", "OpenGL")
# Loggers whose INFO lines -v hides too: they say nothing of the run, and can mislead (vcs_versioning, which
# harness.version calls for the record's code version, logs "version 0.0 -> 0.0" where the record says 0.1.devN).
NOT_VERBOSE_LOGGERS = ("vcs_versioning", "setuptools_scm")


# A warning raised from the project's own code is one line for a user, ``warning: <message>``, as an error is
# ``error: <message>``; a library's keeps Python's format (its file, line and source), which says whose it is.
OWN_PACKAGES = tuple(Path(__file__).resolve().parents[2] / name for name in ("losses", "domains", "harness"))


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: TextIO | None = None, line: str | None = None) -> None:
    own = any(Path(filename).resolve().is_relative_to(package) for package in OWN_PACKAGES)
    text = f"warning: {message}\n" if own else warnings.formatwarning(message, category, filename, lineno, line)
    (file or sys.stderr).write(text)


def configure_output(verbose: bool) -> None:
    """A normal run shows progress bars, its estimate and results; ``verbose`` adds every log line.

    The run's own log lines always go to its record's ``.log`` file; the "harness" logger does not propagate
    to the root logger, where a library may have installed a handler (absl calls ``logging.basicConfig``).
    """
    harness_logger = logging.getLogger("harness")
    warnings.showwarning = _show_warning  # put back by output_settings' catch_warnings
    if verbose:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        harness_logger.propagate = True
        for name in NOT_VERBOSE_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)
        return
    harness_logger.propagate = False
    logging.getLogger().setLevel(logging.WARNING)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for category in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", category=category)


@contextlib.contextmanager
def output_settings(verbose: bool) -> Iterator[None]:
    """``configure_output`` for one command, undone afterwards: ``main`` also runs inside other programs."""
    root, harness_logger = logging.getLogger(), logging.getLogger("harness")
    loggers = [root, *(logging.getLogger(name) for name in (*QUIET_LOGGERS, *NOT_VERBOSE_LOGGERS))]
    levels, handlers = [lg.level for lg in loggers], list(root.handlers)
    propagate = harness_logger.propagate
    with warnings.catch_warnings():
        configure_output(verbose)
        try:
            yield
        finally:
            harness_logger.propagate = propagate
            root.handlers[:] = handlers
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)
