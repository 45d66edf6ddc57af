"""``harness sweep``: a grid of domains x datasets x methods x losses x hyper-parameters x seeds.

The grid becomes a list of one-seed :class:`RunRequest` jobs, each run by the same code as ``harness run``
(in-process in a worker). Jobs whose completed record exists are skipped. Executors: a local
``concurrent.futures.ProcessPoolExecutor``; Slurm job arrays through submitit (``map_array``), falling back
to local where submitit detects no Slurm; Ray where it is installed. No scheduler of our own.

A sweep asked to stop (SIGTERM, SIGUSR1, SIGINT, ``--time-limit``: :mod:`harness.stopping`) tells its jobs
through a stop file in the results folder; the running ones checkpoint at their next step boundary, the queued
ones never start, and the sweep exits with ``EXIT_STOPPED`` once its workers are gone. ``--resume`` goes on.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import multiprocessing
import os
import shlex
import signal
import time
import traceback
import uuid
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import torch

import losses
from domains import get
from domains.base import RunStopped, UserError, hash_jsonable, require
from harness import config as cfg
from harness import stopping, tracking
from harness.commands import resume_command, time_limit
from harness.output import configure_output
from harness.records import reusable, run_id
from harness.runner import (
    RunRequest,
    default_data_root,
    error_line,
    execute,
    fingerprint,
    force_mark,
    plan,
    redo,
    resolve_device,
    results_folder,
)

POLL_S = 0.5  # how often a waiting sweep looks whether it was asked to stop
WORKER_DIED = "its worker process died (killed, out of memory?), which ends the pool; rerun the sweep with --resume"
# What a job on another machine (Ray) needs of this environment to import the harness and find the data.
FORWARDED_ENV = ("PYTHONPATH", "HARNESS_PLUGINS", "HARNESS_DATA_ROOT", "HARNESS_CACHE_DIR")


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["loss.alpha=0.1,0.5", "epochs=2,4"]`` -> ``{"loss.alpha": ["0.1", "0.5"], "epochs": ["2", "4"]}``."""
    grid = {}
    for key, text in cfg.parse_assignments(items, "--grid", once=True).items():
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise UserError(f"--grid {key}= has no values")
        grid[key] = values
    return grid


def _csv(text: str | None, option: str) -> list[str] | None:
    """The names ``option`` lists; None where it is not given (the default applies). A given but empty list is a
    UserError: falling back to the default would run what was not asked for."""
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise UserError(f"{option} '{text}' names nothing: give comma-separated names (see harness list)")
    return names


def _applies(key: str, domain_name: str, loss: str) -> bool:
    """A loss.* key applies to the losses having that hyper-parameter; a config key to domains having the field."""
    if key.startswith(cfg.LOSS_PREFIX):
        name = key[len(cfg.LOSS_PREFIX):]
        return name in {h.name for h in losses.spec(loss).hparams}
    return key in cfg.config_fields(get(domain_name).config_class)


def build_requests(args: argparse.Namespace) -> list[RunRequest]:
    """Every one-seed job of the grid, in a deterministic order; UserError for a grid that names nothing."""
    grid, fixed = parse_grid(args.grid), cfg.parse_assignments(args.sets)
    both = sorted(set(grid) & set(fixed))
    if both:  # one of the two would be dropped without a word
        raise UserError(f"{', '.join(both)} given both to --set and to --grid; give it to one of them")
    trackers = tracking.resolve(args.trackers)
    wanted = {"dataset": _csv(args.datasets, "--datasets"), "method": _csv(args.methods, "--methods"),
              "loss": _csv(args.losses, "--losses")}
    used: dict[str, set[str]] = {k: set() for k in wanted}
    used_grid: set[str] = set()
    requests = []
    for name in _csv(args.domains, "--domains") or []:
        domain = get(name)
        datasets = [d for d in wanted["dataset"] or [domain.default_dataset] if d in domain.datasets]
        methods = [m for m in wanted["method"] or [domain.default_method] if m in domain.methods]
        chosen = [loss for loss in wanted["loss"] or list(domain.losses) if loss in domain.losses]
        used["dataset"].update(datasets)
        used["method"].update(methods)
        used["loss"].update(chosen)
        if args.preset not in domain.presets:
            raise UserError(f"unknown preset '{args.preset}' for domain '{name}'; "
                            f"available: {', '.join(sorted(domain.presets))}")
        seeds = cfg.parse_seeds(args.seeds) if args.seeds is not None else list(domain.presets[args.preset].seeds)
        for dataset, method, loss in itertools.product(datasets, methods, chosen):
            keys = [k for k in grid if _applies(k, name, loss)]
            sets = {k: v for k, v in fixed.items() if _applies(k, name, loss)}  # loss.alpha: the losses having it
            used_grid.update(keys, sets)
            for values in itertools.product(*(grid[k] for k in keys)):
                for seed in seeds:
                    requests.append(RunRequest(
                        domain=name, loss=loss, method=method, dataset=dataset, seeds=[seed], preset=args.preset,
                        sets={**sets, **dict(zip(keys, values))}, device=args.device, data_root=args.data_root,
                        results=args.results, resume=args.resume, force=args.force, quiet=True,
                        trackers=trackers))
    for what, names in wanted.items():
        missing = sorted(set(names or []) - used[what])
        if missing:
            raise UserError(f"no domain in --domains has {what} {', '.join(missing)} (see harness list)")
    unused = sorted(set(grid) - used_grid)
    if unused:
        raise UserError(f"--grid {', '.join(unused)} applies to no domain/loss of the sweep")
    unused = sorted(set(fixed) - used_grid)
    if unused:
        raise UserError(f"--set {', '.join(unused)} applies to no domain/loss of the sweep")
    if not requests:
        raise UserError("the sweep has no job: no domain of --domains has a dataset, a method and a loss of the "
                        "selection together (see harness list)")
    return requests


def run_job(request: RunRequest, stop_file: str | None = None, threads: int | None = None,
            show_traceback: bool = True) -> list[dict[str, Any]]:
    """One sweep job in a worker: exactly what ``harness run`` does; failures and stops come back as data.
    ``stop_file``: the sweep's (:func:`harness.stopping.follow`); ``threads``: torch's, where the worker's
    initializer did not set them (Ray, Slurm); ``show_traceback``: print the traceback of a crash outside the
    run's own code (whose failures its log holds) to this process's stderr: a Slurm job's log, a Ray worker's
    output; the local executor's workers print it under ``-v`` only, its one-line error says so."""
    stopping.follow(Path(stop_file) if stop_file else None)
    if stopping.stop_reason() is not None:  # handed to this worker before the sweep stopped
        return _not_started([request])
    if threads:
        torch.set_num_threads(threads)
    try:
        outcomes = execute(request)
    except UserError as exc:
        return [_failed(request, str(exc))]
    except RunStopped as stop:
        return [{"run_id": _job_name(request), "status": "stopped", "error": f"{stop}; its checkpoint is kept"}]
    except Exception as exc:  # noqa: BLE001 - a crash outside the run (a damaged cache): the other jobs go on
        if show_traceback:
            traceback.print_exc()
        return [_failed(request, error_line(exc) + ("" if show_traceback else " (sweep -v shows its traceback)"))]
    return [{"run_id": o.run_id, "status": o.status, "error": o.error, "path": str(o.path),
             "metrics": o.record.metrics if o.record is not None else {}} for o in outcomes]


class SlurmJob:
    """:func:`run_job` for submitit, checkpointable: when Slurm signals a job (SIGUSR1 before its time limit,
    or a preemption), submitit calls :meth:`checkpoint`, requeues the job and ends it; the requeued job runs the
    request again with ``resume``, from the run's last checkpoint."""

    def __call__(self, request: RunRequest, stop_file: str | None, threads: int) -> list[dict[str, Any]]:
        return run_job(request, stop_file, threads)

    def checkpoint(self, request: RunRequest, stop_file: str | None, threads: int) -> Any:
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, dataclasses.replace(request, resume=True), stop_file, threads)


def _job_name(request: RunRequest) -> str:
    return f"{request.domain}/{request.dataset}/{request.loss} seed {request.seeds[0]}"


def _failed(request: RunRequest, error: str) -> dict[str, Any]:
    return {"run_id": _job_name(request), "status": "failed", "error": error}


def varying_keys(requests: list[RunRequest]) -> list[str]:
    """The keys whose value differs between jobs of the sweep: a ``--grid`` of several values (a ``--set``, or a
    ``--grid`` of one value, is the same in every job that has it)."""
    values: dict[str, set[str]] = {}
    for request in requests:
        for key, value in request.sets.items():
            values.setdefault(key, set()).add(str(value))
    return sorted(key for key, seen in values.items() if len(seen) > 1)


def _job_line(request: RunRequest, whole: bool = False) -> str:
    """The ``harness run`` of a job: what it runs; ``whole`` adds where and how (results, device, data root,
    trackers), so that the line pasted runs the job as the sweep would."""
    argv = ["harness", "run", "--domain", request.domain, "--dataset", request.dataset, "--method", request.method,
            "--loss", request.loss, "--preset", request.preset, "--seeds", str(request.seeds[0])]
    for key, value in sorted(request.sets.items()):
        argv += ["--set", f"{key}={value}"]
    if whole:
        argv += ["--results", request.results, "--device", request.device]
        argv += ["--data-root", request.data_root] if request.data_root else []
        for tracker in request.trackers or [tracking.NONE]:
            argv += ["--tracker", tracker]
    return shlex.join(argv)


def pending(requests: list[RunRequest], mark_in: Path | None = None,
            ) -> tuple[list[RunRequest], list[RunRequest], list[str]]:
    """Split into jobs to run, jobs with a completed record, and invalid combinations (with the reason).
    ``mark_in``: the results folder of a ``--force`` sweep, where each job to run is marked as one to redo
    (:func:`harness.runner.force_mark`) before any runs: after an interruption, ``--force --resume`` redoes the
    jobs the sweep had not redone yet, queued ones included, and keeps those it redid.

    A job's record is named by its data fingerprint, so this takes each fingerprint once, through the domain's
    cheap path (``Domain.data_fingerprint``: file hashes or generator parameters, where the domain has them)
    rather than ``Domain.prepare``: the jobs run in other processes, each preparing its own data, which would
    leave this process holding data it never uses. Inside each process a fingerprint is still computed once:
    a domain's ``prepare`` takes it from the same function."""
    todo, done, invalid = [], [], []
    # A fingerprint depends only on the domain, the dataset, the data root and the config (Domain.prepare), so
    # jobs that share them (other losses, seeds) share it.
    fingerprints: dict[tuple[str, str | None, Path, str], dict[str, Any]] = {}
    for request in requests:
        try:
            the_plan = plan(request)
            spec = the_plan.specs[0]
            data_root = default_data_root(request.data_root)
            key = (spec.domain, spec.dataset, data_root, hash_jsonable(spec.config_dict()))
            if key not in fingerprints:
                # The data belongs to a run's id; the device does not change the data, so the CPU fingerprints it.
                fingerprints[key] = fingerprint(the_plan, data_root, torch.device("cpu"))
            data, results = fingerprints[key], Path(request.results)
            rid = run_id(spec, data)
            exists = not redo(request, results, rid) and reusable(results, spec, data) is not None
        except UserError as exc:
            invalid.append(f"{_job_line(request)}: {exc}")
            continue
        except Exception:  # noqa: BLE001  (a crash here, e.g. a damaged data file: the job runs, and fails alone)
            todo.append(request)
            continue
        if mark_in is not None and not exists:
            force_mark(mark_in, rid).touch()
        (done if exists else todo).append(request)
    return todo, done, invalid


def _progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sweep", unit="job")


def _init_worker(threads: int, verbose: bool) -> None:
    configure_output(verbose)  # a spawned worker starts with Python's default output settings
    torch.set_num_threads(threads)
    # Ctrl-C at a terminal reaches the workers too: they stop at a checkpoint, as on the sweep's stop file.
    stopping.handle((*stopping.STOP_SIGNALS, signal.SIGINT))


def _threads(workers: int) -> int:
    """Torch threads per job: an explicit OMP_NUM_THREADS wins (on a machine shared with other jobs, one thread
    per worker avoids OpenMP threads spinning on busy cores), else this machine's cores over the workers."""
    return int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // workers))


def _stopped(stop_file: Path) -> bool:
    """Whether the sweep is asked to stop; the first time, tell its jobs (the stop file)."""
    if stopping.stop_reason() is None:
        return False
    stop_file.touch(exist_ok=True)
    return True


def _not_started(requests: list[RunRequest]) -> list[dict[str, Any]]:
    return [{"run_id": _job_name(r), "status": "not started", "error": None} for r in requests]


def run_local(requests: list[RunRequest], workers: int, stop_file: Path, varying: list[str],
              verbose: bool = False) -> list[dict[str, Any]]:
    """A pool of ``workers`` processes, handed at most one job each at a time (as the Ray executor does), so that
    the jobs under way are known: a job that crashes fails alone; a worker that dies (killed, out of memory)
    breaks the pool, which fails the jobs under way, and the queued ones are reported not started. ``varying``:
    the keys each job's line shows (:func:`varying_keys`)."""
    queued, running, results = list(requests), {}, []
    # spawn: a fresh interpreter per worker, never a fork of a process holding torch threads; the workers
    # share the cores instead of each starting one thread per core.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                             initargs=(_threads(workers), verbose)) as pool, _progress(len(queued)) as bar:
        while queued or running:
            while queued and len(running) < workers:
                request = queued.pop(0)
                try:
                    running[pool.submit(run_job, request, str(stop_file), None, verbose)] = request
                except BrokenProcessPool:  # a worker died as another job ended: the jobs under way fail next
                    results += _not_started([request, *queued])
                    queued = []
            done, _ = wait(running, timeout=POLL_S, return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                request = running.pop(future)
                try:
                    results += _report(future.result(), bar, request, varying)
                except BrokenProcessPool:
                    broken = True
                    results += _report([_failed(request, WORKER_DIED)], bar, request, varying)
                except Exception as exc:  # noqa: BLE001 - what run_job could not send back: the others go on
                    results += _report([_failed(request, error_line(exc))], bar, request, varying)
            if broken or _stopped(stop_file):
                results += _not_started(queued)
                queued = []
    return results


def _cpus_per_job(args: argparse.Namespace) -> int:
    if args.cpus_per_job is not None and args.cpus_per_job < 1:
        raise UserError("--cpus-per-job must be at least 1")
    return args.cpus_per_job or _threads(args.workers)


def _absolute(request: RunRequest) -> RunRequest:
    """The request with absolute folders: a job on another machine or under a scheduler starts elsewhere."""
    return dataclasses.replace(request, results=str(Path(request.results).resolve()),
                               data_root=str(default_data_root(request.data_root).resolve()))


def run_slurm(requests: list[RunRequest], workers: int, args: argparse.Namespace, varying: list[str],
              stop_file: Path | None = None) -> list[dict[str, Any]] | None:
    """Slurm job arrays through submitit; None when submitit detects no Slurm here. ``varying``: as
    :func:`run_local`'s."""
    submitit = require("submitit", "sweep")
    executor = submitit.AutoExecutor(folder=str(Path(args.results) / ".submitit" / "%j"))
    if executor.cluster != "slurm":
        print(f"no Slurm cluster found (submitit detected '{executor.cluster}'); running with the local executor")
        return None
    cpus = _cpus_per_job(args)
    params: dict[str, Any] = {"timeout_min": args.timeout_min, "slurm_array_parallelism": workers,
                              "cpus_per_task": cpus, "gpus_per_node": 1 if args.device.startswith("cuda") else 0}
    if args.slurm_partition:
        params["slurm_partition"] = args.slurm_partition
    executor.update_parameters(**params)
    requests = [_absolute(r) for r in requests]
    jobs = executor.map_array(SlurmJob(), requests, [str(stop_file) if stop_file else None] * len(requests),
                              [cpus] * len(requests))
    print(f"submitted {len(jobs)} jobs as Slurm array {jobs[0].job_id.split('_')[0]}")
    results: list[dict[str, Any]] = []
    waiting = dict(zip(jobs, requests))
    with _progress(len(jobs)) as bar:
        while waiting:
            for job in [j for j in waiting if j.done()]:
                request = waiting.pop(job)
                try:
                    results += _report(job.result(), bar, request, varying)
                except Exception as exc:  # noqa: BLE001 - raised, cancelled, killed, out of memory: the others go on
                    cancelled = stop_file is not None and stopping.stop_reason() is not None
                    raised = _raised(exc) if isinstance(exc, submitit.core.utils.FailedJobError) else None
                    error = (f"Slurm job {job.job_id} raised {raised} (its traceback: {job.paths.stderr})" if raised
                             else f"Slurm job {job.job_id} ended without a result ({type(exc).__name__}); rerun the "
                                  "sweep with --resume")
                    results += _not_started([request]) if cancelled else _report([_failed(request, error)], bar,
                                                                                 request, varying)
            if stop_file is not None and _stopped(stop_file):
                for job in waiting:
                    if job.state == "PENDING":
                        job.cancel(check=False)
            if waiting:
                time.sleep(POLL_S)
    return results


def _raised(failed: Exception) -> str | None:
    """The exception a Slurm job raised (outside :func:`run_job`, which returns its own failures: a node that
    cannot import the harness), in one line, ``Type: message``. submitit's FailedJobError carries only the job's
    traceback, as text: the exception is the lines after its last frame (``  File ...`` and the indented source
    lines under it), up to submitit's closing rule. None where the text holds no traceback."""
    lines = str(failed).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return None
    after = itertools.dropwhile(lambda line: line.startswith("    "), lines[frames[-1] + 1:])
    text = " ".join(itertools.takewhile(lambda line: not line.startswith("-----"), after))
    return " ".join(text.split()) or None


def run_ray(requests: list[RunRequest], args: argparse.Namespace, stop_file: Path,
            varying: list[str]) -> list[dict[str, Any]]:
    """Ray tasks, at most ``--workers`` at once, each asking for ``--cpus-per-job`` CPUs and, with ``--device
    cuda``, one GPU. A task whose worker dies is reported failed (no retry: a rerun, with ``--resume``, goes
    on from its checkpoint); the others go on. ``varying``: as :func:`run_local`'s."""
    try:
        ray = importlib.import_module("ray")
    except ImportError:
        raise UserError("--executor ray needs the 'ray' package: pip install 'contrastive-harness[ray]'") from None
    env = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    ray.init(address=args.ray_address, ignore_reinit_error=True, log_to_driver=args.verbose,
             runtime_env={"env_vars": env} if env else None)
    cpus = _cpus_per_job(args)
    remote = ray.remote(num_cpus=cpus, num_gpus=1 if args.device.startswith("cuda") else 0, max_retries=0)(run_job)
    queued, running, results = [_absolute(r) for r in requests], {}, []
    try:
        with _progress(len(queued)) as bar:
            while queued or running:
                while queued and len(running) < args.workers:
                    request = queued.pop(0)
                    running[remote.remote(request, str(stop_file), cpus)] = request
                ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    request = running.pop(ref)
                    try:
                        results += _report(ray.get(ref), bar, request, varying)
                    except ray.exceptions.RayError as exc:  # the worker died (killed, out of memory, node lost)
                        error = f"its Ray worker was lost ({type(exc).__name__}); rerun the sweep with --resume"
                        results += _report([_failed(request, error)], bar, request, varying)
                if _stopped(stop_file):
                    results += _not_started(queued)
                    queued = []
    finally:
        if args.ray_address is None:
            ray.shutdown()  # the cluster ray.init started here
    return results


def _report(job_results: list[dict[str, Any]], bar, request: RunRequest, varying: list[str]) -> list[dict[str, Any]]:
    """A line per result of ``request``'s job, with the job's values of the ``varying`` keys: neither a run id
    (a hash) nor a job's name (domain, dataset, loss, seed) tells apart two points of the grid."""
    grid = ", ".join(f"{key}={request.sets[key]}" for key in varying if key in request.sets)
    for r in job_results:
        detail = r["error"] or "" if r["status"] not in ("completed", "skipped") else ", ".join(
            f"{k}={v:.4g}" for k, v in sorted(r.get("metrics", {}).items()) if isinstance(v, (int, float)))
        bar.write(f"[{r['status']}] {r['run_id']}{f' ({grid})' if grid else ''}: {detail}")
    bar.update(1)
    return job_results


def cmd_sweep(args: argparse.Namespace) -> int:
    """Exit 0, 1 (a job failed), 2 (user error) or 75 (``stopping.EXIT_STOPPED``: stopped, or a job busy in
    another process: not done yet, ``--resume`` goes on)."""
    if args.workers < 1:
        raise UserError("--workers must be at least 1")
    resolve_device(args.device)  # a device this machine lacks stops the sweep before any job, not job by job
    limit = time_limit(args)
    forced = args.force and not args.resume and not args.dry_run
    requests = build_requests(args)
    varying = varying_keys(requests)
    todo, done, invalid = pending(requests, results_folder(args.results) if forced else None)
    for line in invalid:
        print(f"[invalid] {line}")
    print(f"sweep: {len(todo) + len(done)} runs, {len(done)} with a completed record (skipped), {len(todo)} to run")
    if not todo and not done and invalid:
        raise UserError("every combination of the sweep is invalid")
    if args.dry_run:
        for request in todo:
            print(_job_line(request, whole=True))
        return 1 if invalid else 0
    if not todo:
        print("sweep done: nothing to run, every job has its completed record"
              + (f"; {len(invalid)} invalid combination(s) not run (listed above)" if invalid else ""))
        return 1 if invalid else 0
    tracking.check(todo[0].trackers)
    if "tensorboard" in todo[0].trackers:
        print(f"tracking: tensorboard --logdir {Path(args.results) / 'tb'}")
    stop_file = results_folder(args.results).resolve() / ".work" / f"sweep-{uuid.uuid4().hex[:12]}.stop"
    try:
        with stopping.graceful((*stopping.STOP_SIGNALS, signal.SIGINT), limit):
            results = None
            if args.executor == "slurm":
                results = run_slurm(todo, args.workers, args, varying, stop_file)
            elif args.executor == "ray":
                results = run_ray(todo, args, stop_file, varying)
            if results is None:
                results = run_local(todo, args.workers, stop_file, varying, args.verbose)
            reason = stopping.stop_reason()
    finally:
        stop_file.unlink(missing_ok=True)
    return _summarize(results, reason, args.argv, len(invalid))


def _summarize(results: list[dict[str, Any]], reason: str | None, argv: list[str], invalid: int = 0) -> int:
    """Print the sweep's last line, with the command that goes on where any job is left undone; its exit status
    (1 also where a combination was invalid: the sweep did not run all it was asked to)."""
    states = ("completed", "failed", "skipped", "busy", "stopped", "not started")
    counts = {s: sum(r["status"] == s for r in results) for s in states}
    summary = ", ".join(f"{n} {s}" + (f" (another process is running {'it' if n == 1 else 'them'})"
                                       if s == "busy" else "") for s, n in counts.items() if n)
    if invalid:
        summary += f", {invalid} invalid combination(s) not run (listed above)"
    if reason is not None and (counts["stopped"] or counts["not started"]):
        print(f"sweep stopped ({reason}): {summary}; continue with: {resume_command(argv)}")
        return stopping.EXIT_STOPPED
    if not (counts["failed"] or counts["busy"] or counts["stopped"] or counts["not started"]):
        print("sweep done: " + summary)
        return 1 if invalid else 0
    print(f"sweep done: {summary}; continue with: {resume_command(argv)}")
    # A busy job is not done yet either: exit 75 so that a script does not publish the sweep without it.
    return 1 if counts["failed"] or invalid else stopping.EXIT_STOPPED
