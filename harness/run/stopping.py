"""Graceful ends: a run or a sweep asked to stop checkpoints at its next step boundary and exits with
:data:`EXIT_STOPPED`; the same command with ``--resume`` goes on from there.

What asks: SIGTERM (``kill``, ``scancel``, a container's stop), SIGUSR1 (what Slurm sends before a job's time
limit with ``--signal=USR1@...``), ``--time-limit``, and in a sweep also SIGINT (Ctrl-C; a single ``harness run``
keeps Python's KeyboardInterrupt there, which stops at once). The signal handler only records the reason; a run
reads it at each step boundary (:meth:`domains.context.RunContext.progress`) and before each seed. A sweep's jobs
run in other processes, on other machines under Ray or Slurm: the sweep tells them through a stop file in its
results folder, which every one of them writes its records into anyway.
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from domains.errors import UserError
from harness import ending
from harness.ending import STOP_SIGNALS

EXIT_STOPPED = 75  # EX_TEMPFAIL of sysexits.h: stopped at a checkpoint, to be resumed
SWEEP_STOPPED = "the sweep was stopped"  # the reason a stop file gives
FILE_POLL_S = 0.5  # a stop file is looked for at most this often (a step boundary can come every millisecond)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

_reason: str | None = None
_deadline: float | None = None  # time.monotonic() at which a --time-limit stops the process
_stop_file: Path | None = None
_file_checked = 0.0


def stop_reason() -> str | None:
    """Why this process should stop (a signal's name, the time limit, its sweep's stop file), or None."""
    global _reason, _file_checked
    if _reason is None and _deadline is not None and time.monotonic() >= _deadline:
        _reason = "time limit"
    if _reason is None and _stop_file is not None and time.monotonic() - _file_checked >= FILE_POLL_S:
        _file_checked = time.monotonic()
        if _stop_file.exists():
            _reason = SWEEP_STOPPED
    return _reason


def would_pass_deadline(seconds: float) -> str | None:
    """The reason to stop now when work expected to take ``seconds`` would end past the ``--time-limit``
    (less its margin), else None: for work that stops only between pieces, each as long as ``seconds``."""
    if _deadline is not None and seconds > 0 and time.monotonic() + seconds >= _deadline:
        return f"time limit: the next part may take {seconds:.0f} s"
    return None


def request_stop(reason: str) -> None:
    """Ask this process to stop; the first reason stays."""
    global _reason
    _reason = _reason or reason


def _on_signal(signum: int, frame: object) -> None:
    request_stop(signal.Signals(signum).name)


def handle(signals: tuple[signal.Signals, ...]) -> dict[signal.Signals, object]:
    """Make each of ``signals`` ask this process to stop; returns the handlers they had."""
    return {sig: signal.signal(sig, _on_signal) for sig in signals}


def parse_duration(text: str, option: str = "--time-limit") -> float:
    """``90m``, ``2h``, ``3600s``, ``1h30m`` or plain seconds, in seconds; UserError naming ``option`` otherwise."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip().lower())
    if not text.strip() or "".join(n + u for n, u in parts) != text.strip().lower():
        raise UserError(f"{option} '{text}' is not a duration such as 90m, 2h, 3600s or 1h30m")
    seconds = sum(float(n) * _UNITS[u or "s"] for n, u in parts)
    if seconds <= 0:
        raise UserError(f"{option} '{text}' must be longer than 0 s")
    return seconds


def stop_margin(limit_s: float) -> float:
    """How long before its limit a run stops: 5 %, at most 5 minutes; the step under way and its checkpoint
    need the time."""
    return min(0.05 * limit_s, 300.0)


@contextlib.contextmanager
def handled(handler: object, *signals: signal.Signals) -> Iterator[None]:
    """Within: each of ``signals`` handled by ``handler``; the handlers they had are put back after."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def graceful(signals: tuple[signal.Signals, ...] = STOP_SIGNALS, time_limit_s: float | None = None) -> Iterator[None]:
    """Within: each of ``signals`` asks the process to stop, and so does ``time_limit_s`` (less
    :func:`stop_margin`); the handlers and the state are put back after (``harness.cli.main`` also runs
    inside other programs)."""
    global _deadline
    if time_limit_s is not None:
        _deadline = time.monotonic() + time_limit_s - stop_margin(time_limit_s)
    previous = handle(signals)
    try:
        yield
    finally:
        # Past the block the work is over: saved, or stopped at a checkpoint. In the command's own process a stop
        # signal has nothing left to stop, so it waits, ignored, for exit_with (see harness.ending.own_process).
        for sig, old in previous.items():
            signal.signal(sig, signal.SIG_IGN if ending.owned() else old)
        reset()


def reset() -> None:
    global _reason, _deadline, _stop_file
    _reason = _deadline = _stop_file = None


def follow(stop_file: Path | None) -> None:
    """In a sweep's job: stop when ``stop_file`` appears. A Ray worker process outlives its sweep, so the
    reason an earlier sweep's file gave is dropped; a signal's stays."""
    global _reason, _stop_file, _file_checked
    if _reason == SWEEP_STOPPED:
        _reason = None
    _stop_file, _file_checked = stop_file, 0.0
