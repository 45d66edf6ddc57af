"""One ``harness sweep`` job, whichever executor runs it: :func:`run_job` (in a worker, exactly what ``harness run``
does), its checkpointable Slurm form (:class:`SlurmJob`), and the lines, progress bar and results the executors
share."""

from __future__ import annotations

import dataclasses
import shlex
import traceback
from pathlib import Path
from typing import Any

import torch

from domains.errors import ResumeRefused, RunStopped, UserError
from harness.run import data_root_prefix, metric_text, plugins_prefix, stopping, tracking
from harness.run.runner import RunRequest, error_line, execute

POLL_S = 0.5  # how often a waiting sweep looks whether it was asked to stop


def run_job(request: RunRequest, stop_file: str | None = None, threads: int | None = None,
            show_traceback: bool = True) -> list[dict[str, Any]]:
    """One sweep job in a worker: exactly what ``harness run`` does; failures and stops come back as data.
    ``stop_file``: the sweep's (:func:`harness.run.stopping.follow`); ``threads``: torch's, where the worker's
    initializer did not set them (Ray, Slurm); ``show_traceback``: print the traceback of a crash outside the
    run's own code (whose failures its log holds) to this process's stderr: a Slurm job's log, a Ray worker's
    output; the local executor's workers print it under ``-v`` only, its one-line error says so."""
    stopping.follow(Path(stop_file) if stop_file else None)
    if stopping.stop_reason() is not None:  # handed to this worker before the sweep stopped
        return not_started([request])
    if threads:
        torch.set_num_threads(threads)
    try:
        outcomes = execute(request)
    except ResumeRefused as exc:  # as `harness run --resume` refuses it: no record, the checkpoint kept
        return [{"run_id": job_name(request), "status": "refused", "error": str(exc)}]
    except UserError as exc:
        return [failed(request, str(exc))]
    except RunStopped as stop:
        return [{"run_id": job_name(request), "status": "stopped", "error": f"{stop}; its checkpoint is kept"}]
    except Exception as exc:  # noqa: BLE001 - a crash outside the run (a damaged cache): the other jobs go on
        if show_traceback:
            traceback.print_exc()
        return [failed(request, error_line(exc) + ("" if show_traceback else " (sweep -v shows its traceback)"))]
    return [{"run_id": o.run_id, "status": o.status, "error": o.error, "path": str(o.path),
             "metrics": o.record.metrics if o.record is not None else {}, "model": o.model} for o in outcomes]


class SlurmJob:
    """:func:`run_job` for submitit, checkpointable: when Slurm signals a job (SIGUSR1 before its time limit,
    or a preemption), submitit calls :meth:`checkpoint`, requeues the job and ends it; the requeued job runs the
    request again with ``resume``, from the run's last checkpoint."""

    def __call__(self, request: RunRequest, stop_file: str | None, threads: int) -> list[dict[str, Any]]:
        return run_job(request, stop_file, threads)

    def checkpoint(self, request: RunRequest, stop_file: str | None, threads: int) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, dataclasses.replace(request, resume=True), stop_file, threads)


def job_name(request: RunRequest) -> str:
    return f"{request.domain}/{request.dataset}/{request.loss} seed {request.seeds[0]}"


def failed(request: RunRequest, error: str) -> dict[str, Any]:
    return {"run_id": job_name(request), "status": "failed", "error": error}


def not_started(requests: list[RunRequest]) -> list[dict[str, Any]]:
    return [{"run_id": job_name(r), "status": "not started", "error": None} for r in requests]


def stopped(stop_file: Path) -> bool:
    """Whether the sweep is asked to stop; the first time, tell its jobs (the stop file) and the user: a job stops
    only once the step under way ends (a long epoch: minutes), and a sweep silent till then after a Ctrl-C looked
    hung, asking for a second Ctrl-C (which changes nothing) or a kill that loses the jobs' work since their last
    checkpoint."""
    reason = stopping.stop_reason()
    if reason is None:
        return False
    if not stop_file.exists():
        stop_file.touch()
        from tqdm.auto import tqdm  # its write() keeps the sweep's progress bar intact

        tqdm.write(f"sweep stopping ({reason}): each running job stops at its next checkpoint, once the step under "
                   "way ends; no queued job starts")
    return True


def varying_keys(requests: list[RunRequest]) -> list[str]:
    """The keys whose value differs between jobs of the sweep: a ``--grid`` of several values (a ``--set``, or a
    ``--grid`` of one value, is the same in every job that has it)."""
    values: dict[str, set[str]] = {}
    for request in requests:
        for key, value in request.sets.items():
            values.setdefault(key, set()).add(str(value))
    return sorted(key for key, seen in values.items() if len(seen) > 1)


def job_line(request: RunRequest, whole: bool = False) -> str:
    """The ``harness run`` of a job: what it runs; ``whole`` adds where and how (results, device, data root,
    trackers, ``--force`` and ``--resume``: without it, a pasted job would start over and drop the checkpoint the
    sweep goes on from), after the data root (``HARNESS_DATA_ROOT``, :func:`harness.run.data_root_prefix`) and the
    sweep's plugins (``HARNESS_PLUGINS``), so that the line pasted in a new shell runs the job as the sweep would."""
    argv = ["harness", "run", "--domain", request.domain, "--dataset", request.dataset, "--method", request.method,
            "--loss", request.loss, "--preset", request.preset, "--seeds", str(request.seeds[0])]
    for key, value in sorted(request.sets.items()):
        argv += ["--set", f"{key}={value}"]
    if whole:
        argv += ["--results", request.results, "--device", request.device]
        argv += ["--data-root", request.data_root] if request.data_root else []
        argv += ["--save-model"] if request.save_model else []
        argv += ["--force"] if request.force else []
        argv += ["--resume"] if request.resume else []
        for tracker in request.trackers or [tracking.NONE]:
            argv += ["--tracker", tracker]
        return data_root_prefix(request.data_root) + plugins_prefix() + shlex.join(argv)
    return shlex.join(argv)


def progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sweep", unit="job")


def report(job_results: list[dict[str, Any]], bar, request: RunRequest, varying: list[str]) -> list[dict[str, Any]]:
    """A line per result of ``request``'s job, with the job's values of the ``varying`` keys: neither a run id
    (a hash) nor a job's name (domain, dataset, loss, seed) tells apart two points of the grid. Metrics as
    ``harness run`` prints a seed's (:func:`harness.run.metric_text`)."""
    grid = ", ".join(f"{key}={request.sets[key]}" for key in varying if key in request.sets)
    for r in job_results:
        detail = r["error"] or "" if r["status"] not in ("completed", "skipped") else ", ".join(
            f"{k}={metric_text(v)}" for k, v in sorted(r.get("metrics", {}).items()) if isinstance(v, (int, float)))
        bar.write(f"[{r['status']}] {r['run_id']}{f' ({grid})' if grid else ''}: {detail}")
        if r.get("model"):
            bar.write(f"  {r['model']}")
    bar.update(1)
    return job_results
