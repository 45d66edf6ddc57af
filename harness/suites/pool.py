"""The pool that runs a suite's or a campaign's ``harness run`` commands: ``jobs`` processes at a time, in order,
each with a fixed number of threads, one line per finished run (the output's tail when it did not complete).

A campaign gives each command its last word just before it starts (``prepare``, called with the command's index
and the command: a time limit from what is left, ``--resume`` where a checkpoint waits, or None to not start it)
and a deadline after which a run still going is killed (its last checkpoint stays).

SIGINT (Ctrl-C) or SIGTERM stops the pool: the queued runs never start, the running ones get SIGTERM (a
``harness run`` stops at its next checkpoint; one still going after :data:`STOP_GRACE_S` is killed), and
:func:`run_all` raises :class:`Interrupted`, which says what was stopped and the exit status for it.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait

from harness.ending import EXIT_INTERRUPTED
from harness.run.stopping import EXIT_STOPPED, handled

KILLED = -9  # what a run killed at the deadline returns (SIGKILL)
# How each exit status reads in the progress lines; any other is "exit N".
STATUS = {0: "ok", EXIT_STOPPED: "stopped at a checkpoint: not finished yet", KILLED: "killed at the deadline"}
STOP_GRACE_S = 20.0  # how long a stopped run has to reach its checkpoint and exit before it is killed
Prepare = Callable[[int, list[str]], "list[str] | None"]
Finished = Callable[[int, int, str], None]  # a finished run's index, exit status and output


class Interrupted(Exception):
    """The pool was stopped by ``signum`` (SIGINT or SIGTERM): ``finished`` runs had ended, ``stopped`` were
    stopped while running, ``not_started`` never started. ``code`` is the exit status that says so: 130 for SIGINT,
    75 (:data:`EXIT_STOPPED`) for SIGTERM, as ``harness run`` and ``harness sweep`` exit."""

    def __init__(self, signum: int, finished: int, stopped: int, not_started: int):
        self.code = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_STOPPED
        super().__init__(f"stopped by {signal.Signals(signum).name}: {finished} runs finished, {stopped} running "
                         f"stopped, {not_started} not started")


class _Signalled(BaseException):
    """SIGTERM, raised in the main thread as Ctrl-C raises KeyboardInterrupt (a BaseException, so that no
    ``except Exception`` on the way swallows it)."""


def _raise_signalled(signum: int, frame: object) -> None:
    raise _Signalled


class Children:
    """The pool's running subprocesses, so that a stop reaches them; once stopping, none starts (a worker may be
    between taking a job and starting its process when the stop comes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self._stopping = False

    def start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen | None:
        """The started process, or None when the pool is stopping."""
        with self._lock:
            if self._stopping:
                return None
            proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self._running.add(proc)
            return proc

    def ended(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._running.discard(proc)

    def signal_all(self, sig: signal.Signals) -> None:
        """Send ``sig`` to every running process; from now on none starts."""
        with self._lock:
            self._stopping = True
            for proc in self._running:
                proc.send_signal(sig)  # does nothing to one already reaped


def thread_env(threads: int) -> dict[str, str]:
    """What a run's environment sets: its threads (one, so that a seed's numbers do not depend on the machine's
    cores)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def run_one(command: list[str], threads: int = 1, kill_at: float | None = None,
            children: Children | None = None) -> tuple[int, float, str] | None:
    """One run in a subprocess with ``threads`` threads: exit status, seconds, its output; None when ``children``
    is stopping and it did not start. Killed when it is still going at ``kill_at`` (``time.monotonic()``)."""
    env = {**os.environ, **thread_env(threads)}
    children = children or Children()
    start = time.perf_counter()
    proc = children.start(command, env)
    if proc is None:
        return None
    with proc:
        try:
            output, _ = proc.communicate(timeout=None if kill_at is None else max(0.0, kill_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
        finally:
            children.ended(proc)
    return proc.returncode, time.perf_counter() - start, output


def _stop(pool: ThreadPoolExecutor, pending: list[Future], children: Children) -> int:
    """Stop the running runs (SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`), cancel the queued ones and wait
    for the workers; returns how many of ``pending`` never started. Signals are ignored meanwhile: the stop is
    under way and ends in seconds."""
    children.signal_all(signal.SIGTERM)  # first: from here on no worker starts a process
    with handled(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM):
        pool.shutdown(wait=False, cancel_futures=True)
        # Only the started ones: wait() never counts a future cancelled by the shutdown as done.
        if wait([f for f in pending if not f.cancelled()], timeout=STOP_GRACE_S).not_done:
            children.signal_all(signal.SIGKILL)
        pool.shutdown(wait=True)
    return sum(f.cancelled() or (f.exception() is None and f.result() is None) for f in pending)


def run_all(commands: list[tuple[str, list[str]]], jobs: int, threads: int = 1, prepare: Prepare | None = None,
            kill_at: float | None = None, finished: Finished | None = None) -> list[int | None]:
    """The runs, ``jobs`` at a time; one line per finished run and the pool's wall and CPU time (the CPU time is
    what a busy machine does not inflate). Returns the exit statuses in the commands' order, None for a run that
    ``prepare`` did not start; ``finished`` is handed each run that ended, with its whole output (a campaign reads
    why a run was refused). Raises :class:`Interrupted` on SIGINT or SIGTERM (call it from the main thread)."""
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    children = Children()

    def job(index: int, command: list[str]) -> tuple[int, float, str] | None:
        ready = prepare(index, command) if prepare else command
        return None if ready is None else run_one(ready, threads, kill_at, children)

    codes: list[int | None] = [None] * len(commands)
    futures: dict[Future, int] = {}
    consumed: set[Future] = set()
    # Not a `with` block: its exit waits for every queued run, which a stop must cancel instead.
    pool = ThreadPoolExecutor(max_workers=jobs)
    with handled(_raise_signalled, signal.SIGTERM):
        try:
            for index, (_, command) in enumerate(commands):
                futures[pool.submit(job, index, command)] = index
            for future in as_completed(futures):
                index, done = futures[future], future.result()
                consumed.add(future)
                label = commands[index][0]
                if done is None:
                    print(f"[not started: too little time left] {label}", flush=True)
                    continue
                code, seconds, output = done
                codes[index] = code
                print(f"[{STATUS.get(code, f'exit {code}')}] {label} ({seconds:.0f} s)", flush=True)
                if code not in (0, EXIT_STOPPED):
                    print("\n".join("    " + line for line in output.strip().splitlines()[-15:]), flush=True)
                if finished:
                    finished(index, code, output)
        except (KeyboardInterrupt, _Signalled) as exc:
            signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
            # Runs queued before the signal but never submitted (it came mid-submission) never started either.
            not_started = _stop(pool, [f for f in futures if f not in consumed], children)
            not_started += len(commands) - len(futures)
            raise Interrupted(signum, len(consumed), len(commands) - len(consumed) - not_started,
                              not_started) from None
        finally:
            pool.shutdown(wait=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"{len(commands)} runs in {time.perf_counter() - start:.0f} s wall, {cpu:.0f} s CPU, {jobs} at a time, "
          f"{threads} thread{'s' * (threads > 1)} each", flush=True)
    return codes
