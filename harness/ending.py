"""How the process of a ``harness`` command run from its command line ends (:func:`own_command`), where
``harness.cli.main`` called by another program leaves that program's process as it found it.

Standard library only, and outside ``harness/run`` (whose package imports torch): the console script and
``python -m harness`` import this before the command's own modules, so that a Ctrl-C in the seconds those imports
take ends the process as any other Ctrl-C before a run does (:func:`interrupted`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)  # what asks a run or a sweep to stop (harness.run.stopping)
ENDING_SIGNALS = (*STOP_SIGNALS, signal.SIGINT)  # what ends a command's process once its work is over (exit_with)
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as the shell reports Ctrl-C

_own_process = False  # own_process(): graceful() leaves the stop signals ignored, for exit_with()
_before: dict[signal.Signals, object] = {}  # the handlers own_process() found, which exit_with(None) puts back


def interrupted() -> int:
    """A Ctrl-C that came before the command could say what it stopped: one line, and :data:`EXIT_INTERRUPTED`."""
    print("interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def own_command(command: Callable[[], int]) -> int:
    """Run ``command``, this process's own (:func:`own_process`), and return its exit status; a Ctrl-C that escapes
    it (one while it imports its modules, before anything could catch it) is :func:`interrupted`. Either way the
    process then ends through :func:`exit_with`."""
    own_process()
    status = None
    try:
        status = command()
    except KeyboardInterrupt:
        status = interrupted()
    finally:
        exit_with(status)
    return status


def own_process() -> None:
    """This process runs one harness command from its command line: from the end of a
    :func:`harness.run.stopping.graceful` block (a run's, a sweep's, a benchmark's) until :func:`exit_with` it ignores
    the stop signals, whose default action would kill it after its work is saved (exit 143, read as unfinished)."""
    global _own_process, _before
    _own_process, _before = True, {sig: signal.getsignal(sig) for sig in ENDING_SIGNALS}


def owned() -> bool:
    """Whether this process runs a harness command of its own (:func:`own_process`)."""
    return _own_process


def exit_with(status: int | None) -> None:
    """The command of this process (:func:`own_process`) is over with exit ``status``: a stop signal in Python's
    teardown after it (a second or more with torch and the trackers' libraries loaded) ends the process at once
    with that status. None (the command raised): each signal's handler from before :func:`own_process`."""
    for sig in ENDING_SIGNALS:
        signal.signal(sig, _before[sig] if status is None else functools.partial(_exit_now, status))
    # CPython marks a KeyboardInterrupt raised in code run by exec() of a string (a dataclass's or a namedtuple's
    # methods, made as an import runs) unhandled even where the command caught it (Ctrl-C, exit 130), and at the
    # end of its teardown the process then kills itself with SIGINT (exit -2). Each such exec clears the mark first.
    exec("")


def _exit_now(status: int, signum: int, frame: object) -> None:
    for stream in (sys.stdout, sys.stderr):  # os._exit drops what Python has not flushed yet
        with contextlib.suppress(OSError, ValueError):  # a closed or broken stream has nothing to flush
            stream.flush()
    os._exit(status)
