"""``harness sweep``: a grid of domains x datasets x methods x losses x hyper-parameters x seeds.

The grid becomes a list of one-seed :class:`RunRequest` jobs, each run by the same code as ``harness run``
(in-process in a worker). Jobs whose completed record exists are skipped. Executors: a local
``concurrent.futures.ProcessPoolExecutor``; Slurm job arrays through submitit (``map_array``), falling back
to local where submitit detects no Slurm; Ray where it is installed. No scheduler of our own.

A sweep asked to stop (SIGTERM, SIGUSR1, SIGINT, ``--time-limit``: :mod:`harness.run.stopping`) tells its jobs
through a stop file in the results folder; the running ones checkpoint at their next step boundary, the queued
ones never start, and the sweep exits with ``EXIT_STOPPED`` once its workers are gone. ``--resume`` goes on.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import torch

import losses
from domains import get
from domains.base import Domain, counted, did_you_mean
from domains.errors import UserError
from domains.files import hash_jsonable
from harness.records import reusable, run_id
from harness.run import config as cfg
from harness.run import resume_command, stopping, time_limit, tracking
from harness.run.model_file import model_path
from harness.run.runner import (
    RunRequest,
    check_results,
    default_data_root,
    error_line,
    fingerprint,
    force_mark,
    plan,
    redo,
    resolve_device,
    results_folder,
)
from harness.sweep.cluster import executor_library, run_ray, run_slurm
from harness.sweep.jobs import job_line, varying_keys
from harness.sweep.local import run_local, threads


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``["loss.alpha=0.1,0.5", "epochs=2,4"]`` -> ``{"loss.alpha": ["0.1", "0.5"], "epochs": ["2", "4"]}``."""
    grid = {}
    for key, text in cfg.parse_assignments(items, "--grid", once=True).items():
        values = [v.strip() for v in text.split(",")]
        if values == [""]:
            raise UserError(f"--grid {key}= has no values")
        if "" in values:  # dropping it would run fewer points than the user wrote
            raise UserError(f"--grid {key}={text} has an empty value (a stray comma)")
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


def _losses(domain: Domain, method: str, wanted: list[str] | None) -> list[str]:
    """The losses a sweep runs ``method`` with: for a method that trains nothing its baseline loss alone, with or
    without ``--losses`` (any other would repeat its evaluation under another run id, which ``harness run``
    refuses); else those of ``--losses`` the domain has (one the method cannot train is listed [invalid]: it was
    asked for), or without it every loss the method trains."""
    if method in domain.loss_free_methods:
        return [domain.baseline_loss_for(method)]
    if wanted:
        return [loss for loss in wanted if loss in domain.losses]
    return list(domain.accepted_losses(method))


def loss_free_notes(requests: list[RunRequest], wanted: list[str] | None) -> list[str]:
    """A line for each method of the sweep that trains nothing where ``--losses`` asked for others than its
    baseline loss: it runs once, under that loss alone (:func:`_losses`), which the plan says rather than leave
    the user to wonder where the other losses' jobs went."""
    notes = []
    for name, method in dict.fromkeys((r.domain, r.method) for r in requests):
        domain = get(name)
        baseline = domain.baseline_loss_for(method)
        others = [loss for loss in wanted or [] if loss != baseline and loss in domain.losses]
        if method in domain.loss_free_methods and others:
            notes.append(f"sweep: method '{method}' of domain '{name}' trains nothing: it runs once, under its "
                         f"baseline loss {baseline}, not under {', '.join(others)}")
    return notes


def _applies(key: str, domain_name: str, loss: str) -> bool:
    """A loss.* key applies to the losses having that hyper-parameter; a config key to domains having the field."""
    if key.startswith(cfg.LOSS_PREFIX):
        name = key[len(cfg.LOSS_PREFIX):]
        return name in {h.name for h in losses.spec(loss).hparams}
    return key in cfg.config_fields(get(domain_name).config_class)


def _unused(domain: Domain, preset: str, method: str, dataset: str, loss: str, sets: dict[str, str]) -> dict[str, str]:
    """The keys of ``sets`` that the job ignores (``Domain.unused_fields``), with the reason; none for a job whose
    config is refused: it stays as it is, and is listed [invalid] (:func:`pending`)."""
    config_sets, _ = cfg.split_sets(sets)
    try:
        config, _ = cfg.resolve_config(domain, preset, config_sets)
    except UserError:
        return {}
    unused = domain.unused_fields(domain.resolve_config(config, method, dataset), method, dataset, loss)
    return {key: unused[key] for key in config_sets if key in unused}


def build_requests(args: argparse.Namespace) -> tuple[list[RunRequest], list[str]]:
    """Every one-seed job of the grid, in a deterministic order, and a note for each key left out of some jobs,
    which ignore it (``Domain.unused_fields``): those run once, at the preset's value, not once per value (which
    ``harness run`` refuses). UserError for a grid that names nothing."""
    grid, fixed = parse_grid(args.grid), cfg.parse_assignments(args.sets, once=True)
    both = sorted(set(grid) & set(fixed))
    if both:  # one of the two would be dropped without a word
        raise UserError(f"{', '.join(both)} given both to --set and to --grid; give it to one of them")
    trackers = tracking.resolve(args.trackers)
    wanted = {"dataset": _csv(args.datasets, "--datasets"), "method": _csv(args.methods, "--methods"),
              "loss": _csv(args.losses, "--losses")}
    used: dict[str, set[str]] = {k: set() for k in wanted}
    offered: dict[str, set[str]] = {k: set() for k in wanted}  # what the domains have: a misspelling's did-you-mean
    used_grid: set[str] = set()
    known: set[str] = set()  # every key some job of the sweep could take: the did-you-mean of one that none takes
    requests, seen = [], set()
    left_out: dict[tuple[str, str], int] = {}  # (key, reason) -> jobs that ignore it
    for name in _csv(args.domains, "--domains") or []:
        domain = get(name)
        datasets = [d for d in wanted["dataset"] or [domain.default_dataset] if d in domain.datasets]
        methods = [m for m in wanted["method"] or [domain.default_method] if m in domain.methods]
        chosen = {method: _losses(domain, method, wanted["loss"]) for method in methods}
        used["dataset"].update(datasets)
        used["method"].update(methods)
        used["loss"].update(loss for loss in wanted["loss"] or [] if loss in domain.losses)
        for what, names in (("dataset", domain.datasets), ("method", domain.methods), ("loss", domain.losses)):
            offered[what].update(names)
        if args.preset not in domain.presets:
            raise UserError(f"unknown preset '{args.preset}' for domain '{name}'; "
                            f"available: {', '.join(sorted(domain.presets))}")
        seeds = cfg.parse_seeds(args.seeds) if args.seeds is not None else list(domain.presets[args.preset].seeds)
        known.update(cfg.config_fields(domain.config_class))
        known.update(cfg.LOSS_PREFIX + h.name for m in methods for loss in chosen[m] for h in losses.spec(loss).hparams)
        for dataset, method, loss in ((d, m, loss) for d in datasets for m in methods for loss in chosen[m]):
            keys = [k for k in grid if _applies(k, name, loss)]
            sets = {k: v for k, v in fixed.items() if _applies(k, name, loss)}  # loss.alpha: the losses having it
            for values in itertools.product(*(grid[k] for k in keys)):
                job = {**sets, **dict(zip(keys, values))}
                unused = _unused(domain, args.preset, method, dataset, loss, job)
                for key, reason in unused.items():
                    left_out[key, reason] = left_out.get((key, reason), 0) + len(seeds)
                job = {k: v for k, v in job.items() if k not in unused}
                used_grid.update(job)
                for seed in seeds:
                    if (identity := (name, dataset, method, loss, tuple(job.items()), seed)) in seen:
                        continue  # the same job, once an ignored key is left out
                    seen.add(identity)
                    requests.append(RunRequest(
                        domain=name, loss=loss, method=method, dataset=dataset, seeds=[seed], preset=args.preset,
                        sets=job, device=args.device, data_root=args.data_root, results=args.results,
                        resume=args.resume, force=args.force, quiet=True, announce=False, trackers=trackers,
                        save_model=args.save_model))
    for what, names in wanted.items():
        missing = sorted(set(names or []) - used[what])
        if missing:
            hint = did_you_mean(missing[0], offered[what]).removesuffix(".")
            known = losses.available(objective=None)
            unknown = [name for name in missing if name not in known] if what == "loss" else []
            plugins = f"; {cfg.plugin_hint(unknown)}" if unknown else ""
            raise UserError(f"no domain in --domains has {what} {', '.join(missing)}{hint} (see harness list"
                            f"{plugins})")
    for option, keys in (("--grid", grid), ("--set", fixed)):
        unused = sorted(set(keys) - used_grid)
        reasons = [reason for key in unused for (ignored, reason) in left_out if ignored == key]
        if reasons:  # every job ignores it: its values would all run the same
            raise UserError(f"{option} {', '.join(unused)} applies to no job of the sweep: "
                            f"{'; '.join(dict.fromkeys(reasons))}")
        if unused:
            raise UserError(f"{option} {', '.join(unused)} applies to no domain/loss of the sweep"
                            f"{did_you_mean(unused[0], known)}")
    if not requests:
        raise UserError("the sweep has no job: no domain of --domains has a dataset, a method and a loss of the "
                        "selection together (see harness list)")
    notes = [f"sweep: {key} left out of {counted(jobs, 'job')}, which run at the preset's value, once: {reason}"
             for (key, reason), jobs in left_out.items()]
    return requests, notes


def pending(requests: list[RunRequest], mark_in: Path | None = None,
            ) -> tuple[list[RunRequest], list[str], list[str]]:
    """Split into jobs to run, the run ids of jobs with a completed record, and invalid combinations (with the
    reason). A job whose run id an earlier job has (``--grid epochs=1,1.0``: one value written twice) is dropped:
    two processes would run the one run.
    ``mark_in``: the results folder of a ``--force`` sweep, where each job to run is marked as one to redo
    (:func:`harness.run.runner.force_mark`) before any runs: after an interruption, ``--force --resume`` redoes the
    jobs the sweep had not redone yet, queued ones included, and keeps those it redid.

    A job's record is named by its data fingerprint, so this takes each fingerprint once, through the domain's
    cheap path (``Domain.data_fingerprint``: file hashes or generator parameters, where the domain has them)
    rather than ``Domain.prepare``: the jobs run in other processes, each preparing its own data, which would
    leave this process holding data it never uses. Inside each process a fingerprint is still computed once:
    a domain's ``prepare`` takes it from the same function."""
    todo, done, invalid = [], [], []
    seen: set[str] = set()
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
            if rid in seen:
                continue
            seen.add(rid)
            exists = not redo(request, results, rid) and reusable(results, spec, data) is not None
        except UserError as exc:
            invalid.append(f"{job_line(request)}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001  (a crash here, e.g. a damaged data file: the job runs, and fails alone)
            # said, not only counted: a job whose record exists would otherwise run as if it had none, unexplained
            print(f"warning: {job_line(request)}: its record could not be looked for ({error_line(exc)}); it runs",
                  file=sys.stderr)
            todo.append(request)
            continue
        if mark_in is not None and not exists:
            force_mark(mark_in, rid).touch()
        if exists:
            done.append(rid)
        else:
            todo.append(request)
    return todo, done, invalid


def cmd_sweep(args: argparse.Namespace) -> int:
    """Exit 0, 1 (a job failed), 2 (user error) or 75 (``stopping.EXIT_STOPPED``: stopped, or a job busy in
    another process: not done yet, ``--resume`` goes on)."""
    if args.workers < 1:
        raise UserError("--workers must be at least 1")
    if args.executor == "slurm" and args.timeout_min < 1:  # Slurm reads --time=0 as no limit at all
        raise UserError(f"--timeout-min must be at least 1 (got {args.timeout_min})")
    if args.executor == "slurm" and not args.slurm_lost_after > 0:
        raise UserError(f"--slurm-lost-after must be more than 0 seconds (got {args.slurm_lost_after:g})")
    check_results(args.results)  # a dry run too: the sweep it shows could not run
    resolve_device(args.device)  # a device this machine lacks stops the sweep before any job, not job by job
    threads(args.workers)  # a bad OMP_NUM_THREADS too
    limit = time_limit(args)
    forced = args.force and not args.resume and not args.dry_run
    requests, notes = build_requests(args)
    varying = varying_keys(requests)
    todo, done, invalid = pending(requests, results_folder(args.results) if forced else None)
    for line in [*loss_free_notes(requests, _csv(args.losses, "--losses")), *notes,
                 *(f"[invalid] {x}" for x in invalid)]:
        print(line)
    print(f"sweep: {counted(len(todo) + len(done), 'run')}, {len(done)} with a completed record (skipped), "
          f"{len(todo)} to run")
    unsaved = [rid for rid in done if not model_path(Path(args.results), rid).is_file()] if args.save_model else []
    if unsaved:  # no training runs for them: there is no model to save
        which = "1 of the skipped runs has" if len(unsaved) == 1 else f"{len(unsaved)} of the skipped runs have"
        print(f"--save-model: {which} no saved model; rerun {'it' if len(unsaved) == 1 else 'them'} with --force to "
              "train again and save it")
    if not todo and not done and invalid:
        raise UserError("every combination of the sweep is invalid")
    if todo:  # what running them needs, a dry run too: it would show a plan that the sweep then refuses
        tracking.check(todo[0].trackers)
        executor_library(args.executor)
    if args.dry_run:
        for request in todo:
            print(job_line(request, whole=True))
        return 1 if invalid else 0
    if not todo:
        print("sweep done: nothing to run, every job has its completed record"
              + (f"; {counted(len(invalid), 'invalid combination')} not run (listed above)" if invalid else ""))
        return 1 if invalid else 0
    for name in todo[0].trackers:  # once for the sweep: its jobs open their trackers quietly, in other processes
        hint = tracking.view_hint(name, Path(args.results))
        if hint:
            print(f"tracking: {hint}")
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
    return _summarize(results, reason, args.argv, len(invalid), args.data_root)


def _count_text(state: str, n: int) -> str:
    """``n`` jobs in ``state`` as the sweep's last line counts them, with why where the state alone does not say."""
    if state == "busy":
        return f"{n} busy (another process is running {'it' if n == 1 else 'them'})"
    if state == "refused":
        checkpoints = "its checkpoint" if n == 1 else "their checkpoints"
        return f"{n} refused (--resume cannot go on from {checkpoints}: see above)"
    return f"{n} {state}"


def _summarize(results: list[dict[str, Any]], reason: str | None, argv: list[str], invalid: int = 0,
               data_root: str | None = None) -> int:
    """Print the sweep's last line, with the command that goes on where any job is left undone (reading the data
    root ``data_root``, ``--data-root``); its exit status (1 also where a combination was invalid: the sweep did not
    run all it was asked to; 2 where ``--resume`` refused a job's checkpoint, as ``harness run`` exits)."""
    states = ("completed", "failed", "refused", "skipped", "busy", "stopped", "not started")
    counts = {s: sum(r["status"] == s for r in results) for s in states}
    summary = ", ".join(_count_text(s, n) for s, n in counts.items() if n)
    if invalid:
        summary += f", {counted(invalid, 'invalid combination')} not run (listed above)"
    if reason is not None and (counts["stopped"] or counts["not started"]):
        print(f"sweep stopped ({reason}): {summary}; continue with: {resume_command(argv, data_root)}")
        return stopping.EXIT_STOPPED
    # A refused job is the user's to act on (its line says how), as `harness run --resume` refuses it: exit 2,
    # never 75, which a script would answer with the same --resume.
    refused = 2 if counts["refused"] else None
    if not (counts["failed"] or counts["busy"] or counts["stopped"] or counts["not started"]):
        print("sweep done: " + summary)
        return refused or (1 if invalid else 0)
    print(f"sweep done: {summary}; continue with: {resume_command(argv, data_root)}")
    # A busy job is not done yet either: exit 75 so that a script does not publish the sweep without it.
    return 1 if counts["failed"] or invalid else refused or stopping.EXIT_STOPPED
