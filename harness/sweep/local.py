"""The local executor of ``harness sweep``: a process pool on this machine."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import torch

from domains.base import counted
from domains.errors import UserError
from harness.machine import omp_threads
from harness.run import stopping
from harness.run.output import configure_output
from harness.run.runner import RunRequest, error_line
from harness.sweep.jobs import POLL_S, failed, not_started, progress, report, run_job, stopped

# Held by a worker while it runs a job: a worker whose sweep is gone ends once its job has (_end_with_sweep).
_JOB_UNDER_WAY = threading.Lock()
WORKER_DIED = ("its worker process died (killed, out of memory?), or another worker of its pool did; rerun the "
               "sweep with --resume")


def _init_worker(threads: int, verbose: bool) -> None:
    configure_output(verbose)  # a spawned worker starts with Python's default output settings
    torch.set_num_threads(threads)
    # Ctrl-C at a terminal reaches the workers too: they stop at a checkpoint, as on the sweep's stop file.
    stopping.handle((*stopping.STOP_SIGNALS, signal.SIGINT))
    threading.Thread(target=_end_with_sweep, args=(os.getppid(),), daemon=True, name="sweep-watch").start()


def _end_with_sweep(sweep_pid: int) -> None:
    """End this worker once the sweep that started it is gone (killed at once: SIGKILL, the OOM killer). Its pool
    neither hands it another job nor tells it to end, so it would wait forever, holding its memory (and a GPU's),
    and go on with its job as if the sweep were there. Its job stops at its next checkpoint, as on the sweep's
    stop file, and ``harness sweep --resume`` goes on from there."""
    while os.getppid() == sweep_pid:
        time.sleep(POLL_S)
    stopping.request_stop("the sweep's process ended")
    with _JOB_UNDER_WAY:
        os._exit(stopping.EXIT_STOPPED)


def _run_job(request: RunRequest, stop_file: str, verbose: bool) -> list[dict[str, Any]]:
    """:func:`run_job` in a worker of the pool, marked as under way for :func:`_end_with_sweep`."""
    with _JOB_UNDER_WAY:
        return run_job(request, stop_file, None, verbose)


def threads(workers: int) -> int:
    """Torch threads per job: an explicit OMP_NUM_THREADS wins (on a machine shared with other jobs, one thread
    per worker avoids OpenMP threads spinning on busy cores), else this machine's cores over the workers."""
    return omp_threads() or max(1, (os.cpu_count() or 1) // workers)


def run_local(requests: list[RunRequest], workers: int, stop_file: Path, varying: list[str],
              verbose: bool = False) -> list[dict[str, Any]]:
    """A pool of ``workers`` processes, handed at most one job each at a time (as the Ray executor does), so that
    the jobs under way are known: a job that crashes fails alone; a worker that dies (killed, out of memory)
    breaks the pool, which fails the jobs under way, and a fresh pool takes the queued ones (a sweep asked to stop
    reports them not started). A pool that broke before any job came back is checked with a fresh worker
    (:func:`startup_failure`): one that cannot start is a UserError giving why, and the jobs it lost are left
    as they were, to run again. ``varying``: the keys each job's line shows (:func:`varying_keys`)."""
    queued, results = list(requests), []
    with progress(len(queued)) as bar:
        while queued:
            left = len(queued)
            queued, ran, lost = _pool_round(queued, workers, stop_file, varying, verbose, bar)
            if lost and not ran and (cause := startup_failure(threads(workers), verbose)) is not None:
                raise UserError(f"the sweep's worker processes cannot start: {cause}; "
                                f"{counted(len(lost) + len(queued), 'job')} not run (none marked failed): fix that, "
                                "then rerun the sweep with --resume")
            results += ran
            for request in lost:
                results += report([failed(request, WORKER_DIED)], bar, request, varying)
            if not queued or len(queued) == left or stopped(stop_file):
                break  # done, stopped, or a pool that took no job: no other round
        results += not_started(queued)
    return results


def _pool_round(queued: list[RunRequest], workers: int, stop_file: Path, varying: list[str], verbose: bool,
                bar) -> tuple[list[RunRequest], list[dict[str, Any]], list[RunRequest]]:
    """Run ``queued`` in one process pool until they are done, the sweep is asked to stop or a worker dies (which
    breaks the pool); returns the jobs not handed to a worker, the results that came back and the jobs whose
    worker died under them (reported by the caller, which first tells a worker that died from one that never
    started)."""
    queued, running, results, lost = list(queued), {}, [], []
    # spawn: a fresh interpreter per worker, never a fork of a process holding torch threads; the workers
    # share the cores instead of each starting one thread per core.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                             initargs=(threads(workers), verbose)) as pool:
        broken = False
        while (queued and not broken) or running:
            while queued and not broken and len(running) < workers:
                try:
                    running[pool.submit(_run_job, queued[0], str(stop_file), verbose)] = queued[0]
                except BrokenProcessPool:  # a worker died as another job ended: the jobs under way fail next
                    broken = True
                    break
                queued.pop(0)
            done, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for future in done:
                request = running.pop(future)
                try:
                    results += report(future.result(), bar, request, varying)
                except BrokenProcessPool:
                    broken = True
                    lost.append(request)
                except Exception as exc:  # noqa: BLE001 - what run_job could not send back: the others go on
                    results += report([failed(request, error_line(exc))], bar, request, varying)
            if stopped(stop_file):
                broken = True  # hand out no other job; the ones under way checkpoint and end
    return queued, results, lost


def startup_failure(threads: int, verbose: bool) -> str | None:
    """Why a fresh worker cannot start, or None where it can: one worker spawned as the pool spawns its own
    (the same interpreter, path and environment, importing the same modules) runs the pool's initializer and
    exits. What it printed last on stderr (a failed import's exception) and its exit status say why."""
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        terminal = os.dup(2)
        os.dup2(captured.fileno(), 2)  # the worker inherits this process's stderr: its traceback lands in the file
        try:
            worker = multiprocessing.get_context("spawn").Process(target=_init_worker, args=(threads, verbose))
            worker.start()
            worker.join()
        finally:
            os.dup2(terminal, 2)
            os.close(terminal)
        if worker.exitcode == 0:
            return None
        captured.seek(0)
        lines = [line.strip() for line in captured.read().decode(errors="replace").splitlines() if line.strip()]
    code = worker.exitcode or 0
    status = f"exit code {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
    return f"{lines[-1]} ({status})" if lines else f"a worker ends at its start ({status})"
