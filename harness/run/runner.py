"""One ``harness run``: resolve the request into RunSpecs, prepare the data once, then for each seed pretrain,
evaluate, record.

The same code path serves ``harness run`` and every ``harness sweep`` job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock, Timeout

import domains
from domains.base import Domain, Prepared, PretrainResult, RunSpec, counted, did_you_mean
from domains.context import RunContext
from domains.errors import NonFiniteLossError, ResumeRefused, RunStopped, UserError
from domains.files import folder_problem, refuse_link
from harness import records
from harness.machine import hardware_info
from harness.run import config as cfg
from harness.run import model_file, stopping, tracking
from harness.run.estimate import EstimatingContext
from harness.run.outputs import RunOutputs
from harness.version import software_info
from losses.checks import NonFiniteError
from losses.registry import KernelOutputError

LOGGER = logging.getLogger("harness")


@dataclass
class RunRequest:
    """What ``harness run`` was asked for (before resolution)."""

    domain: str
    loss: str | None  # None: the method trains nothing (Domain.loss_free_methods)
    method: str | None = None
    dataset: str | None = None
    seeds: list[int] | None = None
    preset: str = "quick"
    sets: dict[str, str] = field(default_factory=dict)
    device: str = "auto"
    data_root: str | None = None
    results: str = "leaderboards/results"
    resume: bool = False
    force: bool = False
    quiet: bool = False  # no progress bars; everything else a run prints still shows (the tracking line too)
    # Print where the live logs are (tracking: ...) and the time the pretraining has left (estimate: ...): a sweep
    # prints the first once itself, not in each job, and its own bar estimates the whole sweep, not each job.
    announce: bool = True
    trackers: list[str] = field(default_factory=lambda: list(tracking.DEFAULT))  # live logs: a runtime option
    save_model: bool = False  # keep the trained networks (model_file): a runtime option, outside the run's identity


@dataclass
class Outcome:
    """The result of one seed: status is completed, failed, skipped (record exists) or busy (running elsewhere)."""

    run_id: str
    status: str
    path: Path
    record: records.RunRecord | None = None
    error: str | None = None
    user_error: bool = False
    model: str | None = None  # with --save-model: the line that says where the model went, or why there is none
    note: str | None = None  # a skipped seed's: why it may not be the record the user meant


@dataclass
class Plan:
    domain: Domain
    specs: list[RunSpec]
    overrides: dict[str, Any]


def default_data_root(cli_value: str | None) -> Path:
    """``--data-root`` > ``$HARNESS_DATA_ROOT`` > :func:`builtin_data_root`."""
    value = cli_value or os.environ.get("HARNESS_DATA_ROOT")
    return Path(value).expanduser() if value else builtin_data_root()


def builtin_data_root() -> Path:
    """The data root where neither ``--data-root`` nor ``$HARNESS_DATA_ROOT`` names one."""
    return Path.home() / ".cache" / "contrastive-harness" / "data"


def resolve_device(name: str) -> torch.device:
    """``--device``: auto, cpu, cuda, cuda:N (a device this machine has) or mps (where available); UserError
    otherwise, before anything runs (torch knows more device types, e.g. meta, on which no run computes)."""
    usable = "auto, cpu" + (", cuda, cuda:N" if torch.cuda.is_available() else "") + \
        (", mps" if torch.backends.mps.is_available() else "")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kind, colon, index = name.partition(":")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {name} but no CUDA device is available; use --device cpu or auto")
    if kind == "cuda" and (not colon or (index.isdecimal() and int(index) < torch.cuda.device_count())):
        return torch.device(name)
    if kind == "cuda" and index.isdecimal():
        count = torch.cuda.device_count()
        raise UserError(f"--device {name}: this machine has {counted(count, 'CUDA device')}, cuda:0"
                        + (f" to cuda:{count - 1}" if count > 1 else ""))
    if name == "cpu" or (name == "mps" and torch.backends.mps.is_available()):
        return torch.device(name)
    raise UserError(f"unknown --device '{name}'; this machine offers {usable}")


def plan(req: RunRequest) -> Plan:
    """Resolve domain, method, dataset, loss, preset, overrides and seeds; UserError on any mistake."""
    domain = domains.get(req.domain)
    method = req.method or domain.default_method
    if method not in domain.methods:
        raise UserError(f"unknown method '{method}' for domain '{domain.name}'{did_you_mean(method, domain.methods)} "
                        f"Available: {', '.join(domain.methods)}")
    dataset = req.dataset or domain.default_dataset
    if records.CONTROL.search(dataset):  # its record could not be read back (records.RunRecord)
        raise UserError(f"the dataset name {dataset!r} holds a control character (a newline, ...); a name is one line")
    if dataset not in domain.datasets:
        raise UserError(f"unknown dataset '{dataset}' for domain '{domain.name}'"
                        f"{did_you_mean(dataset, domain.datasets)} Available: {', '.join(domain.datasets)}")
    loss = run_loss(domain, method, req.loss)
    # A plugin's names reach the record, whose validator (records.name_problem) would refuse them only after
    # training; registration checks their characters but not their length, and a method's not at all.
    for kind, name in (("domain", domain.name), ("method", method), ("loss", loss)):
        if problem := records.name_problem(name):
            raise UserError(f"the {kind} name {problem}; its plugin must register a shorter, plain name")
    config_sets, loss_sets = cfg.split_sets(req.sets)
    loss_params = cfg.resolve_loss(domain, loss, loss_sets)
    config, overrides = cfg.resolve_config(domain, req.preset, config_sets)
    config = domain.resolve_config(config, method, dataset)  # effective values: what the run's id hashes
    _refuse_unused(domain, req.preset, overrides, domain.unused_fields(config, method, dataset, loss))
    seeds = req.seeds if req.seeds is not None else list(domain.presets[req.preset].seeds)
    specs = [RunSpec(domain=domain.name, method=method, dataset=dataset, loss=loss, loss_params=loss_params,
                     preset=req.preset, seed=seed, config=config) for seed in seeds]
    for spec in specs[:1]:
        domain.validate(spec)
    return Plan(domain, specs, overrides)


def _refuse_unused(domain: Domain, preset: str, overrides: dict[str, Any], unused: dict[str, str]) -> None:
    """UserError for a ``--set`` of a field the run ignores (``Domain.unused_fields``) to another value than the
    preset's: it would change the run's id, not the run. (The preset's own value passes: the id is the same.)"""
    base = domain.config_class(**domain.presets[preset].overrides)
    given = [key for key in overrides if key in unused and overrides[key] != getattr(base, key)]
    if given:
        raise UserError("; ".join(f"--set {key}={cfg.format_value(overrides[key])} does not apply: {unused[key]}"
                                  for key in given) + ". Leave it out: it would change the run's id, not the run")


def run_loss(domain: Domain, method: str, loss: str | None) -> str:
    """The loss a run of ``method`` names: ``loss``, required where the method trains; for a method that trains
    nothing (``Domain.loss_free_methods``), its baseline loss, the one its records name, and no other: another
    would repeat the same evaluation under another run id. UserError otherwise."""
    if method in domain.loss_free_methods:
        baseline = domain.baseline_loss_for(method)
        if loss not in (None, baseline):
            raise UserError(f"method '{method}' of domain '{domain.name}' trains nothing, so --loss {loss} would "
                            f"repeat its evaluation under another run id: leave --loss out (its record names "
                            f"{baseline})")
        return baseline
    if loss is None:
        free = f"; only {', '.join(sorted(domain.loss_free_methods))} ignore it" if domain.loss_free_methods else ""
        raise UserError(f"--loss is required: method '{method}' of domain '{domain.name}' trains with one "
                        f"(harness list losses{free})")
    return loss


def command_for(spec: RunSpec, overrides: dict[str, Any], device: torch.device) -> list[str]:
    """The argv that reproduces exactly this run (one seed)."""
    argv = ["harness", "run", "--domain", spec.domain, "--method", spec.method, "--dataset", spec.dataset,
            "--loss", spec.loss, "--preset", spec.preset, "--seeds", str(spec.seed), "--device", device.type]
    for key in sorted(overrides):
        argv += ["--set", f"{key}={cfg.format_value(overrides[key])}"]
    for key in sorted(spec.loss_params):
        argv += ["--set", f"{cfg.LOSS_PREFIX}{key}={cfg.format_value(spec.loss_params[key])}"]
    return argv


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def _data_context(the_plan: Plan, data_root: Path, device: torch.device) -> RunContext:
    """The context of the data step: the first seed's, with no work folder (the data step writes nothing)."""
    return RunContext(seed=the_plan.specs[0].seed, device=device, data_root=data_root, work_dir=Path(), quiet=True)


class PlanData:
    """The data of a plan's runs (``Domain.prepare``), loaded at most once for all of them: they differ only in the
    seed, so they see the same data. ``fingerprint`` comes from ``Domain.data_fingerprint`` where the domain
    computes it without the data (file hashes, generator parameters), so that a run whose seeds all have a
    record skips them without loading anything; ``data`` loads on first use."""

    def __init__(self, the_plan: Plan, data_root: Path, device: torch.device):
        self._domain, self._spec = the_plan.domain, the_plan.specs[0]
        self._ctx = _data_context(the_plan, data_root, device)
        self._prepared: Prepared | None = None
        self._fingerprint: dict[str, Any] | None = None

    def load(self) -> Prepared:
        """The data and its fingerprint; a dataset that is missing, mistyped or unreadable is a UserError here."""
        if self._prepared is None:
            self._prepared = self._domain.prepare(self._spec, self._ctx)
            self._fingerprint = self._prepared.fingerprint
        return self._prepared

    @property
    def data(self) -> Any:
        return self.load().data

    @property
    def fingerprint(self) -> dict[str, Any]:
        if self._fingerprint is None:
            cheap = type(self._domain).data_fingerprint is not Domain.data_fingerprint  # the default loads
            self._fingerprint = self._domain.data_fingerprint(self._spec, self._ctx) if cheap else \
                self.load().fingerprint
        return self._fingerprint


def fingerprint(the_plan: Plan, data_root: Path, device: torch.device) -> dict[str, Any]:
    """The fingerprint alone (``Domain.data_fingerprint``): what a sweep needs to skip the jobs it has done."""
    return the_plan.domain.data_fingerprint(the_plan.specs[0], _data_context(the_plan, data_root, device))


def run_ids(req: RunRequest) -> list[str]:
    """The run id of each seed of ``req``, as ``harness run`` names its record and work folder, from the data's
    fingerprint alone (``Domain.data_fingerprint``, on the CPU: the device is no part of the data), writing
    nothing; UserError where it cannot be had (a data set not on this machine, an extra not installed)."""
    the_plan = plan(req)
    data = fingerprint(the_plan, default_data_root(req.data_root), torch.device("cpu"))
    return [records.run_id(spec, data) for spec in the_plan.specs]


def check_results(results: str) -> None:
    """UserError, before anything runs or is created, when ``--results`` names a file or a path under one: mkdir
    would only say "File exists" or "Not a directory"."""
    path = Path(results)
    problem = folder_problem(path) if path.exists() else None  # (one that does not exist yet is made)
    if problem:
        raise UserError(f"--results {results} {problem}")
    above = next((p for p in path.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        raise UserError(f"--results {results} lies under the file {above}, not in a folder")


def results_folder(results: str) -> Path:
    """The results folder, created; UserError when it cannot be (a file, a path under a file, no permission)."""
    check_results(results)
    path = Path(results)
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / ".work").mkdir(exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot use the results folder '{results}': {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK) or not os.access(path / ".work", os.W_OK | os.X_OK):
        raise UserError(f"cannot write into the results folder '{results}' (permission denied)")
    return path


def error_line(exc: BaseException, with_type: bool = True) -> str:
    """An exception as the one line a failed record gives: its message on one line (its type where it has none),
    after its type unless ``with_type`` is False (a UserError's message is the whole story)."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {message}" if with_type else message


def force_mark(results: Path, rid: str) -> Path:
    """The mark of a seed that a ``--force`` command has yet to redo: set for every seed of the command before
    the first one runs, removed once the seed's new record is written. After an interruption, ``--force
    --resume`` redoes only the seeds still marked (resuming the checkpoint where one was saved) and keeps those
    the interrupted command already redid."""
    return results / ".work" / f"{rid}.force"


def own_paths(results: Path, rid: str) -> list[Path]:
    """What the harness writes of run ``rid`` in ``results``: none may be, or lie under, a symbolic link
    (:func:`refuse_link`): ``.work`` itself is checked as the folder above the run's work folder and marks."""
    path = records.record_path(results, rid)
    return [path, path.with_suffix(".log"), results / ".work" / rid, results / "tb" / rid,
            results / ".work" / f"{rid}.lock", force_mark(results, rid), model_file.model_path(results, rid)]


def redo(req: RunRequest, results: Path, rid: str) -> bool:
    """Whether ``req`` runs this seed again although it has a completed record (:func:`force_mark`)."""
    return req.force and (not req.resume or force_mark(results, rid).exists())


def execute(req: RunRequest, on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run every seed of ``req``; stops at the first failure. Raises UserError before any run starts, and
    RunStopped where a stop is requested (:mod:`harness.run.stopping`): at a checkpoint, or before a seed starts.
    ``on_outcome`` is called as each seed finishes."""
    the_plan = plan(req)
    check_results(req.results)
    tracking.check(req.trackers)
    device = resolve_device(req.device)
    data_root = default_data_root(req.data_root)
    data = PlanData(the_plan, data_root, device)
    rids = [records.run_id(spec, data.fingerprint) for spec in the_plan.specs]
    for rid in rids:  # before anything is written (a --force mark, a folder): a refusal leaves the folder as it was
        for own in own_paths(Path(req.results), rid):
            refuse_link(own, Path(req.results))
    if not all(not redo(req, Path(req.results), rid) and records.reusable(Path(req.results), spec, data.fingerprint)
               for spec, rid in zip(the_plan.specs, rids)):
        data.load()  # before any run starts: a data error leaves the results folder untouched
    results = results_folder(req.results)
    if req.force and not req.resume and not _secondary_rank():
        for rid in rids:
            force_mark(results, rid).touch()
    outcomes = []
    # Presets longer than quick print an estimate, once per `harness run`, from its first seed that runs.
    estimated = False
    for index, spec in enumerate(the_plan.specs):
        reason = stopping.stop_reason()
        if reason is not None:  # asked to stop: start no other seed
            raise RunStopped(reason)
        seeds_left = 0 if estimated else len(the_plan.specs) - index
        outcome = _run_locked(the_plan, spec, data, device, data_root, results, req, seeds_left)
        estimated |= outcome.status in ("completed", "failed")  # it ran (a quick one never estimates)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
        if outcome.status == "failed":
            break
    return outcomes


def _run_locked(the_plan: Plan, spec: RunSpec, data: PlanData, device: torch.device, data_root: Path,
                results: Path, req: RunRequest, seeds_left: int) -> Outcome:
    """``seeds_left``: the seeds a time estimate covers (this one included); 0 prints none."""
    rid = records.run_id(spec, data.fingerprint)
    path = records.record_path(results, rid)
    if _secondary_rank():
        # Under torchrun every rank trains; rank 0 alone holds the lock and writes the record.
        work_dir = results / ".work" / rid
        work_dir.mkdir(parents=True, exist_ok=True)
        return _run_one(the_plan, spec, rid, data, path, work_dir, device, data_root, req, seeds_left,
                        write=False)
    if not redo(req, results, rid) and (done := records.reusable(results, spec, data.fingerprint)) is not None:
        return _skipped(req, results, rid, path, done)
    for own in own_paths(results, rid):  # checked by execute too; again here, as the folder may have changed since
        refuse_link(own, results)
    work_dir = results / ".work" / rid
    work_dir.parent.mkdir(parents=True, exist_ok=True)
    lock_path = results / ".work" / f"{rid}.lock"
    # One process per run id at a time: a second one (another sweep, a second terminal) skips it.
    try:
        lock = FileLock(str(lock_path), timeout=0)
        lock.acquire()
    except Timeout:
        return Outcome(rid, "busy", path, error="another process is running it")
    try:
        if not redo(req, results, rid) and (done := records.reusable(results, spec, data.fingerprint)) is not None:
            return _skipped(req, results, rid, path, done)  # finished while we waited for the lock
        if not req.resume:  # a fresh start: drop what an interrupted earlier attempt left behind
            if (work_dir / "checkpoint.pt").exists():  # said, so that a rerun after a crash does not lose it unseen
                warnings.warn(f"{rid}: starting over without --resume; dropped the checkpoint an interrupted "
                              f"attempt left in {work_dir} (--resume goes on from a checkpoint)", UserWarning,
                              stacklevel=2)
            shutil.rmtree(work_dir, ignore_errors=True)
        elif work_dir.exists() and path.with_suffix(".log").exists() and not (work_dir / "checkpoint.pt").exists():
            # An earlier attempt (its log is there) that saved no checkpoint. The folder alone is no sign of one:
            # under torchrun the other ranks make it as they start.
            warnings.warn(f"{rid}: --resume found no checkpoint in {work_dir} (the earlier attempt stopped before "
                          "its first one): starting from the beginning", UserWarning, stacklevel=2)
        work_dir.mkdir(exist_ok=True)
        outcome = _run_one(the_plan, spec, rid, data, path, work_dir, device, data_root, req, seeds_left)
        if outcome.status == "completed":
            force_mark(results, rid).unlink(missing_ok=True)  # redone: a resumed --force keeps it
        return outcome
    finally:
        lock.release()


def _skipped(req: RunRequest, results: Path, rid: str, path: Path, record: records.RunRecord) -> Outcome:
    """A seed whose completed record exists: nothing runs, so ``--save-model`` has no model to save (it says so)."""
    note = model_file.skipped_note(results, rid) if req.save_model else None
    # --resume without --force after an interrupted --force: the seed it had yet to redo keeps its old record
    pending = ("an interrupted --force left this seed to redo: add --force to redo it (--force --resume)"
               if not req.force and force_mark(results, rid).exists() else None)
    return Outcome(rid, "skipped", path, record, model=note, note=pending)


def _secondary_rank() -> bool:
    return int(os.environ.get("RANK", "0")) != 0


def _run_one(the_plan: Plan, spec: RunSpec, rid: str, data: PlanData, path: Path, work_dir: Path,
             device: torch.device, data_root: Path, req: RunRequest, seeds_left: int,
             write: bool = True) -> Outcome:
    domain = the_plan.domain
    estimate = write and spec.preset != "quick" and seeds_left > 0 and req.announce
    ctx = EstimatingContext(seed=spec.seed, device=device, data_root=data_root, work_dir=work_dir,
                            resume=req.resume, quiet=req.quiet, logger=logging.getLogger("harness.run"),
                            run_key=rid, stop_reason=stopping.stop_reason, seeds=seeds_left if estimate else 0)
    # Before the log, the trackers and the record: a refused --resume (ResumeRefused) is a mistake about the
    # command, not a result of the run, and leaves the results folder, the checkpoint included, as it was. The
    # checks that need the domain's objects come as it restores them: a resumed run's log and trackers open then.
    ctx.check_resume()
    outputs = RunOutputs(path, rid, spec, ctx, req.trackers, req.resume, req.announce, write)
    if ctx.restoring:
        ctx.on_going_ahead = outputs.open
    else:
        outputs.open()
    LOGGER.addHandler(outputs.handler)
    LOGGER.setLevel(logging.INFO)
    # What the record says of the run whatever its outcome; _attempt adds the outcome.
    fields: dict[str, Any] = {
        "run_id": rid, "domain": spec.domain, "method": spec.method, "dataset": spec.dataset, "loss": spec.loss,
        "loss_params": spec.loss_params, "seed": spec.seed, "preset": spec.preset, "overrides": the_plan.overrides,
        "config": spec.config_dict(), "runtime": spec.runtime_dict(), "config_hash": records.config_hash(spec),
        "primary_metric": domain.primary_metric, "higher_is_better": domain.higher_is_better,
        "baseline_loss": domain.baseline_loss_for(spec.method),
        "command": command_for(spec, the_plan.overrides, device), "hardware": hardware_info(device),
        "software": software_info(spec.domain, spec.loss, spec.dataset),
        # Resumed: a checkpoint was there to go on from (a --resume of a seed that never started starts fresh).
        "started_at": records.utc_now("microseconds"), "resumed": req.resume and (work_dir / "checkpoint.pt").exists(),
        "data_fingerprint": data.fingerprint,
    }
    try:
        LOGGER.info("run %s: %s", rid, " ".join(fields["command"]))
        outcome, pretrained = _attempt(domain, spec, ctx, data.data, records.jsonable(fields), path)
        outputs.open()  # where the run never went ahead (ctx.on_going_ahead); an open that failed in it stops it here
        trackers = outputs.trackers
        if trackers:  # where the live logs are (the record's schema is unchanged)
            outcome.record.info["tracking"] = tracking.finish(
                trackers, outcome.record.metrics if outcome.status == "completed" else None)
        keep_earlier = outcome.status == "failed" and records.is_completed(path.parent, rid)
        if write and keep_earlier:
            # A --force rerun that fails keeps the completed record; the failure is in the log.
            LOGGER.warning("run %s failed; keeping its earlier completed record", rid)
        elif write:
            if req.save_model and outcome.status == "completed":
                # Before the record: a seed whose record exists is skipped, so a model written after it could be
                # lost to a crash for good; written before, a crash leaves the checkpoint, and --resume saves it.
                outcome.model = _save_model(domain, spec, pretrained, outcome.record, path.parent, ctx)
            elif outcome.status == "completed" and (earlier := model_file.model_path(path.parent, rid)).exists():
                # Kept, as nothing written is lost, but said: it no longer is the model of the run's record.
                warnings.warn(f"{rid}: {earlier} holds the model of the earlier run this one replaces; rerun with "
                              "--force --save-model to keep this run's", UserWarning, stacklevel=2)
            try:
                records.write_json_atomic(path, outcome.record.to_json())
            except OSError as exc:  # the checkpoint stays: nothing is lost but the last step
                kept = f"the run's checkpoint is kept in {work_dir}" if ctx.checkpoint_path.exists() else \
                    "the run saved no checkpoint"
                raise UserError(f"cannot write the record {path}: {exc.strerror or exc}; {kept}: free the space or "
                                "fix the permission, then rerun with --resume") from None
            try:
                tracking.publish(trackers)  # a --force rerun's TensorBoard log replaces the earlier run's
            except OSError as exc:  # the record is written: only the live log is not where it should be
                staged = path.parent / "tb" / (rid + tracking.RERUN)
                warnings.warn(f"{rid}: its record is written, but its TensorBoard log could not replace the earlier "
                              f"run's ({exc.strerror or exc}); it stays in {staged}", UserWarning, stacklevel=2)
    except ResumeRefused:  # found as the domain restored the checkpoint: nothing of the run is written
        raise
    except BaseException as exc:
        with contextlib.suppress(Exception):  # what the run logged (a stop's line) goes to its log; its own error
            outputs.open()                    # is the one to report
        if isinstance(exc, (RunStopped, KeyboardInterrupt)):
            outputs.close(tracking.STOPPED)  # at a checkpoint, which --resume goes on from: no failure
        raise
    finally:
        outputs.close()  # after a crash too (failed): what was logged stays readable
        LOGGER.removeHandler(outputs.handler)
    if outcome.status == "completed" and write:
        shutil.rmtree(work_dir, ignore_errors=True)  # the checkpoint is only needed to resume
    return outcome


def timings(ctx: RunContext, *, total_s: float, pretrain_s: float | None = None,
            evaluate_s: float | None = None) -> dict[str, float]:
    """A record's timings, of the whole run: a resumed run's pretraining and total add what its earlier processes
    spent up to their last checkpoint (``earlier_s``, recorded too), so that they compare with an uninterrupted run."""
    out = {"pretrain_s": None if pretrain_s is None else pretrain_s + ctx.earlier_s, "evaluate_s": evaluate_s,
           "total_s": total_s + ctx.earlier_s, "earlier_s": ctx.earlier_s or None}
    return {key: value for key, value in out.items() if value is not None}


def _save_model(domain: Domain, spec: RunSpec, pretrained: PretrainResult, record: records.RunRecord,
                results: Path, ctx: RunContext) -> str:
    try:
        return model_file.save_model(domain, spec, pretrained, record, results)
    except OSError as exc:  # as for the record: the checkpoint stays, and --resume saves the model and the record
        kept = f"the run's checkpoint is kept in {ctx.work_dir}" if ctx.checkpoint_path.exists() else \
            "the run saved no checkpoint"
        where = model_file.model_path(results, record.run_id)
        raise UserError(f"cannot write the model {where}: {exc.strerror or exc}; the run's record is not written and "
                        f"{kept}: free the space or fix the permission, then rerun with --resume") from None


def _pretrain(domain: Domain, spec: RunSpec, ctx: RunContext, data: Any) -> PretrainResult:
    """``domain.pretrain``, where the loss core's refusal of non-finite scores (weights that diverged, in a domain
    that does not check its loss step by step: vision's graphed steps, rl's updates) is the same one-line error
    as graph's and text's own check, not a crash."""
    try:
        return domain.pretrain(spec, ctx, data)
    except KernelOutputError as exc:  # a plugin's kernel that returns no loss: the user's code to fix, one line
        raise UserError(str(exc)) from exc
    except NonFiniteError as exc:
        lr = getattr(spec.config, "lr", None)
        now = f" (now --set lr={lr:g})" if isinstance(lr, (int, float)) else " (--set lr=...)"
        raise NonFiniteLossError(f"{exc} during pretraining: training diverged; try a lower learning rate{now}") \
            from exc


def _attempt(domain: Domain, spec: RunSpec, ctx: RunContext, data: Any, fields: dict[str, Any],
             path: Path) -> tuple[Outcome, PretrainResult | None]:
    """Seed, pretrain and evaluate on ``data``; the outcome's record is ``fields`` completed or failed, beside the
    trained networks of a completed one (None for a failed one). What the domain returns is validated as the
    record is built: a metric that is not a number fails the run (a ValidationError naming it), never writes a
    record that cannot be read back."""
    rid = fields["run_id"]
    # ctx.clock: opening a resumed run's trackers, within its pretraining, counts no more than a fresh run's
    start = ctx.start_clock()
    cuda = ctx.device.type == "cuda"
    try:
        seed_everything(spec.seed)
        if cuda:
            torch.cuda.reset_peak_memory_stats(ctx.device)
        t0 = ctx.clock()
        pretrained = _pretrain(domain, spec, ctx, data)
        t1 = ctx.clock()
        result = domain.evaluate(spec, pretrained, ctx, data)
        t2 = ctx.clock()
        if cuda:  # the run's peak, for the pages' device column (what lightly's table gives as memory)
            peak = torch.cuda.max_memory_allocated(ctx.device) / 2**30
            fields = {**fields, "hardware": {**fields["hardware"], "peak_gpu_memory_gib": peak}}
        if domain.primary_metric not in result.metrics:
            raise RuntimeError(f"domain '{domain.name}' did not report its primary metric '{domain.primary_metric}'")
        record = records.RunRecord(
            **fields, status="completed", finished_at=records.utc_now("microseconds"), loss_used=pretrained.loss_used,
            **records.jsonable({"metrics": result.metrics, "details": result.details, "curve": pretrained.curve,
                                "throughput": pretrained.throughput, "info": pretrained.info,
                                "timings": timings(ctx, pretrain_s=t1 - t0, evaluate_s=t2 - t1,
                                                   total_s=t2 - start)}))
    except (RunStopped, KeyboardInterrupt) as stop:
        # The log beside the record says how the run ended: without this line, one of a Ctrl-C ended mid-run and
        # read as a run still under way, or one that died unseen.
        saved = f"its checkpoint is {ctx.checkpoint_path}" if ctx.checkpoint_path.exists() else \
            "it had no checkpoint yet and starts over"
        how = f"stopped ({stop}) at a step boundary" if isinstance(stop, RunStopped) else "interrupted (Ctrl-C)"
        LOGGER.warning("run %s %s; %s: rerun with --resume", rid, how, saved)
        raise
    except ResumeRefused:  # found as the domain restores its objects: no result of the run either
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes a failed record, never a half one
        user = isinstance(exc, UserError)
        error = error_line(exc, with_type=not user)
        if user:
            LOGGER.error("run %s failed: %s", rid, error)
        else:
            LOGGER.error("run %s failed:\n%s", rid, traceback.format_exc())
        # Training that diverged has a result, a non-finite one (RunRecord.diverged); other failures have none.
        metrics = {fields["primary_metric"]: None} if isinstance(exc, NonFiniteLossError) else {}
        failed = records.RunRecord(**fields, status="failed", error=error, finished_at=records.utc_now("microseconds"),
                                   metrics=metrics, details={}, curve=[], throughput={}, info={},
                                   timings=timings(ctx, total_s=ctx.clock() - start))
        return Outcome(rid, "failed", path, failed, error=error, user_error=user), None
    LOGGER.info("run %s completed: %s", rid, record.metrics)
    return Outcome(rid, "completed", path, record), pretrained
