"""``harness sweep``: a grid of domains x datasets x methods x losses x hyper-parameters x seeds.

The grid becomes a list of one-seed :class:`RunRequest` jobs, each run by the same code as ``harness run``
(in-process in a worker). Jobs whose completed record exists are skipped. Executors: a local
``concurrent.futures.ProcessPoolExecutor``; Slurm job arrays through submitit (``map_array``), falling back
to local where submitit detects no Slurm; Ray where it is installed. No scheduler of our own.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import multiprocessing
import os
import shlex
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import torch

import losses
from domains import get
from domains.base import UserError, hash_jsonable, require
from harness import config as cfg
from harness.output import configure_output
from harness.records import is_completed, run_id
from harness.runner import RunRequest, default_data_root, execute, fingerprint, plan


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["loss.alpha=0.1,0.5", "epochs=2,4"]`` -> ``{"loss.alpha": ["0.1", "0.5"], "epochs": ["2", "4"]}``."""
    grid = {}
    for key, text in cfg.parse_assignments(items).items():
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values:
            raise UserError(f"--grid {key}= has no values")
        grid[key] = values
    return grid


def _csv(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _applies(key: str, domain_name: str, loss: str) -> bool:
    """A loss.* key applies to the losses having that hyper-parameter; a config key to domains having the field."""
    if key.startswith(cfg.LOSS_PREFIX):
        name = key[len(cfg.LOSS_PREFIX):]
        return name in {h.name for h in losses.spec(loss).hparams}
    return key in cfg.config_fields(get(domain_name).config_class)


def build_requests(args: argparse.Namespace) -> list[RunRequest]:
    """Every one-seed job of the grid, in a deterministic order; UserError for a grid that names nothing."""
    grid, fixed = parse_grid(args.grid), cfg.parse_assignments(args.sets)
    wanted = {"dataset": _csv(args.datasets), "method": _csv(args.methods), "loss": _csv(args.losses)}
    used: dict[str, set[str]] = {k: set() for k in wanted}
    used_grid: set[str] = set()
    requests = []
    for name in _csv(args.domains) or []:
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
        seeds = cfg.parse_seeds(args.seeds) if args.seeds else list(domain.presets[args.preset].seeds)
        for dataset, method, loss in itertools.product(datasets, methods, chosen):
            keys = [k for k in grid if _applies(k, name, loss)]
            used_grid.update(keys)
            for values in itertools.product(*(grid[k] for k in keys)):
                for seed in seeds:
                    requests.append(RunRequest(
                        domain=name, loss=loss, method=method, dataset=dataset, seeds=[seed], preset=args.preset,
                        sets={**fixed, **dict(zip(keys, values))}, device=args.device, data_root=args.data_root,
                        results=args.results, force=args.force, quiet=True))
    for what, names in wanted.items():
        missing = sorted(set(names or []) - used[what])
        if missing:
            raise UserError(f"no domain in --domains has {what} {', '.join(missing)} (see harness list)")
    unused = sorted(set(grid) - used_grid)
    if unused:
        raise UserError(f"--grid {', '.join(unused)} applies to no domain/loss of the sweep")
    return requests


def run_job(request: RunRequest) -> list[dict[str, Any]]:
    """One sweep job in a worker: exactly what ``harness run`` does; failures come back as data."""
    try:
        outcomes = execute(request)
    except UserError as exc:
        return [{"run_id": f"{request.domain}/{request.loss}", "status": "failed", "error": str(exc)}]
    return [{"run_id": o.run_id, "status": o.status, "error": o.error, "path": str(o.path),
             "metrics": o.record.metrics if o.record is not None else {}} for o in outcomes]


def _job_line(request: RunRequest) -> str:
    argv = ["harness", "run", "--domain", request.domain, "--dataset", request.dataset, "--method", request.method,
            "--loss", request.loss, "--preset", request.preset, "--seeds", str(request.seeds[0])]
    for key, value in sorted(request.sets.items()):
        argv += ["--set", f"{key}={value}"]
    return shlex.join(argv)


def pending(requests: list[RunRequest]) -> tuple[list[RunRequest], list[RunRequest], list[str]]:
    """Split into jobs to run, jobs with a completed record, and invalid combinations (with the reason).

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
            data = fingerprints[key]
        except UserError as exc:
            invalid.append(f"{_job_line(request)}: {exc}")
            continue
        exists = is_completed(Path(request.results), run_id(spec, data))
        (done if exists and not request.force else todo).append(request)
    return todo, done, invalid


def _progress(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sweep", unit="job")


def _init_worker(threads: int, verbose: bool) -> None:
    configure_output(verbose)  # a spawned worker starts with Python's default output settings
    torch.set_num_threads(threads)


def run_local(requests: list[RunRequest], workers: int, verbose: bool = False) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    # spawn: a fresh interpreter per worker, never a fork of a process holding torch threads; the workers
    # share the cores instead of each starting one thread per core. An explicit OMP_NUM_THREADS wins: on a
    # machine shared with other jobs, one thread per worker avoids OpenMP threads spinning on busy cores.
    context = multiprocessing.get_context("spawn")
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // workers))
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                             initargs=(threads, verbose)) as pool, _progress(len(requests)) as bar:
        for future in as_completed([pool.submit(run_job, r) for r in requests]):
            results += _report(future.result(), bar)
    return results


def run_slurm(requests: list[RunRequest], workers: int, args: argparse.Namespace) -> list[dict[str, Any]] | None:
    """Slurm job arrays through submitit; None when submitit detects no Slurm here."""
    submitit = require("submitit", "sweep")
    executor = submitit.AutoExecutor(folder=str(Path(args.results) / ".submitit" / "%j"))
    if executor.cluster != "slurm":
        print(f"no Slurm cluster found (submitit detected '{executor.cluster}'); running with the local executor")
        return None
    params: dict[str, Any] = {"timeout_min": args.timeout_min, "slurm_array_parallelism": workers,
                              "cpus_per_task": 4, "gpus_per_node": 1 if args.device.startswith("cuda") else 0}
    if args.slurm_partition:
        params["slurm_partition"] = args.slurm_partition
    executor.update_parameters(**params)
    jobs = executor.map_array(run_job, requests)
    print(f"submitted {len(jobs)} jobs as Slurm array {jobs[0].job_id.split('_')[0]}")
    results: list[dict[str, Any]] = []
    with _progress(len(jobs)) as bar:
        for job in submitit.helpers.as_completed(jobs):
            results += _report(job.result(), bar)
    return results


def run_ray(requests: list[RunRequest]) -> list[dict[str, Any]]:
    try:
        ray = importlib.import_module("ray")
    except ImportError:
        raise UserError("--executor ray needs the 'ray' package: pip install ray") from None
    ray.init(ignore_reinit_error=True)
    remote = ray.remote(run_job)
    waiting = [remote.remote(r) for r in requests]
    results: list[dict[str, Any]] = []
    with _progress(len(waiting)) as bar:
        while waiting:
            ready, waiting = ray.wait(waiting, num_returns=1)
            results += _report(ray.get(ready[0]), bar)
    return results


def _report(job_results: list[dict[str, Any]], bar) -> list[dict[str, Any]]:
    for r in job_results:
        detail = r["error"] if r["status"] == "failed" else ", ".join(
            f"{k}={v:.4g}" for k, v in sorted(r.get("metrics", {}).items()) if isinstance(v, (int, float)))
        bar.write(f"[{r['status']}] {r['run_id']}: {detail}")
    bar.update(1)
    return job_results


def cmd_sweep(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise UserError("--workers must be at least 1")
    todo, done, invalid = pending(build_requests(args))
    for line in invalid:
        print(f"[invalid] {line}")
    print(f"sweep: {len(todo) + len(done)} runs, {len(done)} with a completed record (skipped), {len(todo)} to run")
    if not todo and not done and invalid:
        raise UserError("every combination of the sweep is invalid")
    if args.dry_run:
        for request in todo:
            print(_job_line(request))
        return 0
    if not todo:
        return 0
    results = None
    if args.executor == "slurm":
        results = run_slurm(todo, args.workers, args)
    elif args.executor == "ray":
        results = run_ray(todo)
    if results is None:
        results = run_local(todo, args.workers, args.verbose)
    counts = {s: sum(r["status"] == s for r in results) for s in ("completed", "failed", "skipped", "busy")}
    print("sweep done: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
    return 1 if counts["failed"] else 0

