"""The pool that runs a suite's or a campaign's ``harness run`` commands: ``jobs`` processes at a time, in order,
each with a fixed number of threads, one line per finished run (the output's tail when it did not complete).

A campaign gives each command its last word just before it starts (``prepare``, called with the command's index
and the command: a time limit from what is left, ``--resume`` where a checkpoint waits, or None to not start it)
and a deadline after which a run still going is killed (its last checkpoint stays).
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from harness.stopping import EXIT_STOPPED

KILLED = -9  # what a run killed at the deadline returns (SIGKILL)
# How each exit status reads in the progress lines; any other is "exit N".
STATUS = {0: "ok", EXIT_STOPPED: "stopped at a checkpoint: not finished yet", KILLED: "killed at the deadline"}
Prepare = Callable[[int, list[str]], "list[str] | None"]


def run_one(command: list[str], threads: int = 1, kill_at: float | None = None) -> tuple[int, float, str]:
    """One run in a subprocess with ``threads`` threads: exit status, seconds, its output. Killed when it is still
    going at ``kill_at`` (``time.monotonic()``)."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    start = time.perf_counter()
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        try:
            output, _ = proc.communicate(timeout=None if kill_at is None else max(0.0, kill_at - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    return proc.returncode, time.perf_counter() - start, output


def run_all(commands: list[tuple[str, list[str]]], jobs: int, threads: int = 1, prepare: Prepare | None = None,
            kill_at: float | None = None) -> list[int | None]:
    """The runs, ``jobs`` at a time; one line per finished run and the pool's wall and CPU time (the CPU time is
    what a busy machine does not inflate). Returns the exit statuses in the commands' order, None for a run that
    ``prepare`` did not start."""
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)

    def job(index: int, command: list[str]) -> tuple[int, float, str] | None:
        ready = prepare(index, command) if prepare else command
        return None if ready is None else run_one(ready, threads, kill_at)

    codes: list[int | None] = [None] * len(commands)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(job, index, command): index for index, (_, command) in enumerate(commands)}
        for future in as_completed(futures):
            index, done = futures[future], future.result()
            label = commands[index][0]
            if done is None:
                print(f"[not started: too little time left] {label}", flush=True)
                continue
            code, seconds, output = done
            codes[index] = code
            print(f"[{STATUS.get(code, f'exit {code}')}] {label} ({seconds:.0f} s)", flush=True)
            if code not in (0, EXIT_STOPPED):
                print("\n".join("    " + line for line in output.strip().splitlines()[-15:]), flush=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(f"{len(commands)} runs in {time.perf_counter() - start:.0f} s wall, {cpu:.0f} s CPU, {jobs} at a time, "
          f"{threads} thread{'s' * (threads > 1)} each", flush=True)
    return codes
