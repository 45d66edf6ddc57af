"""A test plugin (``HARNESS_PLUGINS=tiny_domain,late_sigterm`` with ``tests/`` on the path) whose process sends
itself SIGTERM at the moment ``LATE_SIGTERM`` names, once work is saved:

- ``record``: right after each run's record is written (``harness.records.write_json_atomic``);
- ``summary``: as ``harness run`` prints the mean over its seeds, past the block that stops runs gracefully;
- ``exit``: in Python's teardown, after the command has returned its exit status (an ``atexit`` callback).

Signalled at a fixed point of the process, not after a sleep, so that a test of it never races.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
from collections.abc import Callable
from typing import Any

import harness.run
from harness import records

MOMENT = os.environ.get("LATE_SIGTERM")


def _then_sigterm(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        return result
    return wrapped


if MOMENT == "record":
    records.write_json_atomic = _then_sigterm(records.write_json_atomic)
elif MOMENT == "summary":
    harness.run._metric_summary = _then_sigterm(harness.run._metric_summary)
elif MOMENT == "exit":
    atexit.register(os.kill, os.getpid(), signal.SIGTERM)
elif MOMENT is not None:
    raise ValueError(f"LATE_SIGTERM={MOMENT!r}: name record, summary or exit")
