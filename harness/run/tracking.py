"""Live tracking: a run's scalars go to TensorBoard (the default), W&B or MLflow as it trains.

A domain hands what it already has on the host (a step's loss, a curve point) to
:meth:`domains.context.RunContext.log_scalars`, which passes it to the trackers the harness opened for the run
(``--tracker``, repeatable; ``none`` for none). The records and progress bars are the same with or without them,
and the trackers are no part of a run's identity. Each tracker writes beside the records:

- ``tensorboard``: event files in ``<results>/tb/<run id>/`` (``tensorboard --logdir <results>/tb``);
- ``wandb``: an offline run in ``<results>/wandb/`` (``wandb sync`` uploads it; ``WANDB_MODE`` overrides);
- ``mlflow``: MLflow's file store ``file:<results>/mlruns`` (``MLFLOW_TRACKING_URI`` overrides).

A run resumed with ``--resume`` goes on in the same log: TensorBoard appends to its folder, W&B and MLflow reopen
the run whose id the interrupted attempt kept in the run's work folder (:data:`STATE`, beside its checkpoint; a
fresh start clears that folder). Each step keeps one value: the steps the interrupted attempt logged stay and the
resumed run logs from the step after them (after a stop at a checkpoint, the step it goes on at), except
TensorBoard, which purges what was logged from the step it goes on at.

A rerun of a run whose completed record stands (``--force``) logs to TensorBoard beside the earlier run's log,
in ``<results>/tb/<run id>.rerun/``, which takes the place of ``<run id>/`` once the new record is written
(:func:`publish`): a rerun that fails, or stops, leaves the earlier run's curve as it was, beside its record, and
never mixes the two (``--force --resume`` goes on in the rerun's folder). W&B and MLflow keep each run apart.

Each tracker is told how its run ended (:data:`Ending`): MLflow's run status is FINISHED, KILLED (stopped at a
checkpoint, to be resumed) or FAILED; W&B's run ends with exit code 0, 75 after ``mark_preempting`` (stopped) or 1.

Each library is imported when its tracker is checked or opened; a missing one is a :class:`UserError` naming the
install command, raised by :func:`check` before any run starts. W&B and MLflow are optional extras.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from domains.base import RunSpec, require
from domains.errors import UserError
from domains.files import refuse_link, write_atomic
from harness.records import is_completed
from harness.run.stopping import EXIT_STOPPED
from harness.tables import markdown

TRACKERS = ("tensorboard", "wandb", "mlflow")
DEFAULT = ("tensorboard",)
NONE = "none"
PROJECT = "contrastive-harness"  # the W&B project and the MLflow experiment, unless the environment names one
FINAL = "final/"  # the prefix of the evaluation's metrics, logged once at the run's last step
IDENTITY = "run/identity"  # TensorBoard's text of the run's identity (domain, dataset, loss and its params, config)
STATE = "trackers.json"  # in the run's work folder: the W&B and MLflow run ids that a resumed run reopens
RERUN = ".rerun"  # TensorBoard's folder of a rerun, beside the log of the completed record it is to replace
# How a run ended, as its trackers are told: evaluated; stopped at a checkpoint (a signal, --time-limit, Ctrl-C),
# which --resume goes on from in the same log; or failed (an error, a crash)
Ending = Literal["finished", "stopped", "failed"]
FINISHED: Ending = "finished"
STOPPED: Ending = "stopped"
FAILED: Ending = "failed"


def _saved(work_dir: Path, name: str) -> dict[str, Any] | None:
    """What tracker ``name`` kept in the work folder for a resumed run; None without it."""
    path = work_dir / STATE
    return json.loads(path.read_text()).get(name) if path.is_file() else None


def _keep(work_dir: Path, name: str, entry: dict[str, Any]) -> None:
    """Keep ``entry`` for tracker ``name`` in the work folder (one process per run id holds its lock)."""
    path = work_dir / STATE
    state = json.loads(path.read_text()) if path.is_file() else {}
    write_atomic(path, json.dumps({**state, name: entry}))  # a crash never leaves a half-written file to resume


class Tracker(Protocol):
    """One run's live log in one library."""

    name: str  # as --tracker names it
    location: str  # where the run's log is: a path relative to the results folder, or the library's URI
    hint: str | None  # the command that shows or uploads it; None where nothing is kept (W&B disabled)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        """Log ``scalars`` (plain floats) at training ``step``."""

    def close(self, ending: Ending = FAILED, summary: dict[str, float] | None = None) -> None:
        """Log ``summary`` (a finished run's evaluation metrics) and close, telling the library how the run ended
        (``ending``); a second call does nothing."""

    def publish(self) -> None:
        """Once the run's record is written (after :meth:`close`): make the log the one of that record."""


def resolve(names: Sequence[str] | None) -> list[str]:
    """The trackers a ``--tracker`` list asks for: the default when it names none, nothing for ``none``."""
    if not names:
        return list(DEFAULT)
    unknown = sorted(set(names) - {*TRACKERS, NONE})
    if unknown:
        raise UserError(f"unknown --tracker {', '.join(unknown)}; choose from {', '.join([*TRACKERS, NONE])}")
    if NONE in names and len(set(names)) > 1:
        raise UserError("--tracker none cannot be combined with another tracker")
    return [] if NONE in names else list(dict.fromkeys(names))


def _library(name: str) -> Any:
    """The module a tracker writes with; UserError naming the install command when it is missing."""
    if name == "tensorboard":
        try:
            from torch.utils import tensorboard
        except ImportError as exc:
            raise UserError(f"live tracking with TensorBoard (--tracker tensorboard, the default) needs the Python "
                            f"package 'tensorboard' ({exc}); install it with: pip install tensorboard, or run "
                            "with --tracker none") from exc
        return tensorboard
    return require(name, name)


def check(names: Sequence[str]) -> None:
    """Import each tracker's library now, so that a missing one stops the command before any run starts."""
    for name in names:
        if name not in KINDS:
            raise UserError(f"unknown tracker '{name}'; choose from {', '.join(TRACKERS)}")
        _library(name)


def _mlflow_uri(results: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"file:{(results / 'mlruns').resolve()}"


def _wandb_mode() -> str:
    """The mode W&B runs in: ``offline`` unless ``WANDB_MODE`` names another (its aliases read as W&B reads
    them)."""
    mode = os.environ.get("WANDB_MODE", "offline").strip().lower() or "offline"
    return {"dryrun": "offline", "run": "online"}.get(mode, mode)


def view_hint(name: str, results: Path) -> str | None:
    """The command that shows or uploads what tracker ``name`` logs in the results folder ``results``: every run
    there (a run's seeds, a sweep's jobs), so that a sweep can print it before any job has opened its tracker.
    None where the tracker keeps nothing (``WANDB_MODE=disabled``). TensorBoard's and MLflow's are also each
    run's own; a W&B run names its own offline folder or page (:class:`WandbTracker`)."""
    if name == "tensorboard":
        # every run of the folder, each seed a run; quoted, so that a folder with a space pastes as one argument
        return f"tensorboard --logdir {shlex.quote(str(results / 'tb'))}"
    if name == "mlflow":
        return f"mlflow ui --backend-store-uri {shlex.quote(_mlflow_uri(results))}"
    if name != "wandb":
        raise UserError(f"unknown tracker '{name}'; choose from {', '.join(TRACKERS)}")
    mode = _wandb_mode()
    if mode == "disabled":
        return None
    if mode == "offline":  # the runs not yet uploaded, each attempt of a resumed run in order (their time)
        return f"wandb sync {shlex.quote(str(results / 'wandb'))}/offline-run-*"
    project = os.environ.get("WANDB_PROJECT", PROJECT)
    return f"W&B project {shlex.quote(project)} ({mode}): each run's page is named by its run id"


def _identity_text(spec: RunSpec) -> str:
    """The run's identity as a markdown table, for TensorBoard's text tab (W&B's config, MLflow's params)."""
    return "\n".join(markdown(["key", "value"], _params(spec).items()))


def _params(spec: RunSpec) -> dict[str, Any]:
    """What W&B's config and MLflow's params show of a run: its identity, flat."""
    return {"domain": spec.domain, "method": spec.method, "dataset": spec.dataset, "loss": spec.loss,
            "preset": spec.preset, "seed": spec.seed, **spec.config_dict(),
            **{f"loss.{k}": v for k, v in spec.loss_params.items()}}


class _SummaryAtLastStep:
    """A tracker whose library has no summary: the evaluation's metrics are logged as scalars at the run's last
    step, then the run ends (``_end``)."""

    _step, _closed = 0, False

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._write(step, scalars)
        self._step = step

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        raise NotImplementedError

    def _end(self, ending: Ending) -> None:
        raise NotImplementedError

    def close(self, ending: Ending = FAILED, summary: dict[str, float] | None = None) -> None:
        if self._closed:
            return
        if summary:
            self._write(self._step, {FINAL + k: v for k, v in summary.items()})
        self._end(ending)
        self._closed = True


class TensorBoardTracker(_SummaryAtLastStep):
    """``torch.utils.tensorboard`` event files in ``<results>/tb/<run id>/``. A fresh start clears the folder and
    writes the run's identity as text (:data:`IDENTITY`: in TensorBoard a run is named by its folder, and the run
    id's hash alone does not say which grid point it is); a resumed run purges what its interrupted attempt logged
    from the step it goes on at (the writer opens at the first step logged: TensorBoard's ``purge_step``), so each
    step keeps one value. A resumed run with no step left to train (stopped at its last checkpoint, or killed in
    the evaluation) purges nothing and logs the evaluation's metrics at the last step the log holds.

    A rerun of a run whose completed record stands writes to ``<run id>.rerun/`` (:data:`RERUN`) until
    :meth:`publish` moves it in place of the earlier run's log."""

    name = "tensorboard"

    def __init__(self, results: Path, run_id: str, spec: RunSpec, resume: bool, work_dir: Path):
        self._module = _library("tensorboard")
        self._published = results / "tb" / _plain(run_id)  # where the log of the run's record is
        staged = self._published.with_name(run_id + RERUN)
        refuse_link(staged, results)
        # a rerun of a completed run writes beside the earlier run's log, which stays with its record till then
        self.folder = staged if is_completed(results, run_id) else self._published
        self.location = f"tb/{run_id}"  # where the log is once the record is written
        self.hint = view_hint(self.name, results)
        if not resume:
            shutil.rmtree(self.folder, ignore_errors=True)
        self._resume, self._writer, self._step, self._closed = resume, None, 0, False
        self._identity = None if resume else _identity_text(spec)  # a resumed log has it from its first attempt

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        if self._writer is None:
            self._writer = self._module.SummaryWriter(str(self.folder), flush_secs=10,
                                                      purge_step=step if self._resume else None)
            if self._identity:  # what the run is (its loss's hyper-parameters): a sweep's runs differ in them
                self._writer.add_text(IDENTITY, self._identity, 0)
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)

    def close(self, ending: Ending = FAILED, summary: dict[str, float] | None = None) -> None:
        if summary and self._resume and self._writer is None and not self._closed:
            # Resumed with no step left to train (stopped at the last checkpoint, or killed in the evaluation):
            # the summary goes at the last step the earlier attempts logged, and nothing is purged (a purge from
            # step 0 would drop the whole curve).
            self._step, self._resume = last_step(self.folder), False
        super().close(ending, summary)

    def _end(self, ending: Ending) -> None:  # TensorBoard keeps no run status
        if self._writer is not None:
            self._writer.close()

    def publish(self) -> None:
        """A rerun's log (closed) takes the place of the earlier run's, whose record the rerun's has replaced:
        the earlier log is renamed aside first, so that no moment leaves both logs, or neither, in place."""
        if self.folder == self._published:
            return
        replaced = self._published.with_name(self._published.name + ".replaced")
        shutil.rmtree(replaced, ignore_errors=True)
        if self._published.exists():
            os.replace(self._published, replaced)
        if self.folder.exists():  # a rerun that logged nothing leaves no log: the earlier one goes all the same
            os.replace(self.folder, self._published)
        shutil.rmtree(replaced, ignore_errors=True)


# W&B's exit code of each ending: its run state is finished for 0, failed for any other unless the run was marked
# preempting; a stopped run's is the harness's exit status for a stop at a checkpoint
_WANDB_EXIT: dict[Ending, int] = {FINISHED: 0, STOPPED: EXIT_STOPPED, FAILED: 1}
# MLflow's run status of each ending (mlflow.entities.RunStatus): KILLED is its status for a run stopped on purpose
_MLFLOW_STATUS: dict[Ending, str] = {FINISHED: "FINISHED", STOPPED: "KILLED", FAILED: "FAILED"}


class WandbTracker:
    """A W&B run, offline unless ``WANDB_MODE`` says otherwise, in ``<results>/wandb/``; its name is the run id,
    its config the run's identity. The evaluation's metrics go to its summary.

    A resumed run reopens the W&B run of its interrupted attempt (``id=..., resume="allow"``), whose id and last
    step logged are kept in the work folder, and logs only the steps after that one: W&B keeps one value a step and
    refuses a step below its last. Offline, each attempt writes its own folder; ``wandb sync`` of them all, in
    order, uploads one run. A crashed attempt (killed, not stopped) keeps no last step: its steps past the
    checkpoint are logged again offline, and dropped by W&B's server when synced."""

    name = "wandb"

    def __init__(self, results: Path, run_id: str, spec: RunSpec, resume: bool, work_dir: Path):
        wandb = _library("wandb")
        saved = _saved(work_dir, self.name) if resume else None
        refuse_link(results / "wandb", results)  # as tb/ is: W&B would write wherever a link points
        self._run = wandb.init(project=os.environ.get("WANDB_PROJECT", PROJECT), name=run_id, dir=str(results),
                               mode=os.environ.get("WANDB_MODE", "offline"), config=_params(spec),
                               group=run_id.rsplit("-s", 1)[0], tags=[spec.domain, spec.loss],
                               id=saved and saved["id"], resume="allow" if saved else None,
                               reinit="create_new", settings=wandb.Settings(console="off", silent=True))
        self._id, self._work_dir, self._last = self._run.id, work_dir, (saved or {}).get("last_step", -1)
        _keep(work_dir, self.name, {"id": self._id, "last_step": self._last})
        folder = Path(self._run.dir).parent  # <results>/wandb/offline-run-<time>-<id>[-<attempt>]/files
        self.location = os.path.relpath(folder, results)
        every = f"{shlex.quote(str(folder.parent))}/offline-run-*-{self._id}*"  # each attempt's, in order
        mode = self._run.settings.mode
        # online only: offline, reading the url prints wandb's "URL not available" warning past the quiet output
        url = getattr(self._run, "url", None) if mode not in ("offline", "disabled") else None
        self.hint = (f"wandb sync {every if saved else shlex.quote(str(folder))}" if mode == "offline"
                     else None if mode == "disabled" else str(url) if url else view_hint(self.name, results))
        self._closed = False

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if step <= self._last:  # logged by the interrupted attempt
            return
        self._run.log(scalars, step=step)
        self._last = step

    def close(self, ending: Ending = FAILED, summary: dict[str, float] | None = None) -> None:
        if self._closed:
            return
        for key, value in (summary or {}).items():
            self._run.summary[FINAL + key] = value
        if ending == STOPPED:  # W&B's mark for a run to be resumed (preempted), not a failed one
            self._run.mark_preempting()
        self._run.finish(exit_code=_WANDB_EXIT[ending])
        _keep(self._work_dir, self.name, {"id": self._id, "last_step": self._last})
        self._closed = True

    def publish(self) -> None:
        """Nothing to move: a rerun is a W&B run of its own."""


class MlflowTracker(_SummaryAtLastStep):
    """An MLflow run named by the run id, in the file store ``file:<results>/mlruns`` unless
    ``MLFLOW_TRACKING_URI`` names another store (MLflow 3 keeps its file store only behind
    ``MLFLOW_ALLOW_FILE_STORE``, which this sets for it); params are the run's identity.

    A resumed run reopens the MLflow run of its interrupted attempt (its id kept in the work folder), marks it
    running again and logs only the steps after the last one the store holds (MLflow would keep a second value
    for a step logged twice)."""

    name = "mlflow"

    def __init__(self, results: Path, run_id: str, spec: RunSpec, resume: bool, work_dir: Path):
        mlflow = _library("mlflow")
        from mlflow.entities import Param

        if not os.environ.get("MLFLOW_TRACKING_URI"):  # the harness's own store: not written through a link
            refuse_link(results / "mlruns", results)
        uri = _mlflow_uri(results)
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self._client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        saved = _saved(work_dir, self.name) if resume else None
        self._last = -1
        if saved:
            self._run_id = saved["run_id"]
            run = self._client.get_run(self._run_id)
            experiment = run.info.experiment_id
            self._last = max((m.step for key in run.data.metrics
                              for m in self._client.get_metric_history(self._run_id, key)), default=-1)
            self._client.update_run(self._run_id, status="RUNNING")
        else:
            experiment = _experiment(self._client, os.environ.get("MLFLOW_EXPERIMENT_NAME", PROJECT))
            self._run_id = self._client.create_run(experiment, run_name=run_id,
                                                   tags={"harness.run_id": run_id}).info.run_id
            params = [Param(k, str(v)[:6000]) for k, v in _params(spec).items()]
            for first in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
                self._client.log_batch(self._run_id, params=params[first:first + 100])
            _keep(work_dir, self.name, {"run_id": self._run_id})
        local = uri.removeprefix("file:")
        self.location = (os.path.relpath(Path(local) / experiment / self._run_id, results)
                         if uri.startswith("file:") else f"{uri} run {self._run_id}")
        self.hint = view_hint(self.name, results)
        # the evaluation's metrics go at the last step logged, also where the resumed run logs no new step
        self._step, self._closed = max(self._last, 0), False

    def log(self, step: int, scalars: dict[str, float]) -> None:
        if step > self._last:  # else the interrupted attempt logged it
            super().log(step, scalars)

    def _write(self, step: int, scalars: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._client.log_batch(self._run_id, metrics=[Metric(k, v, now, step) for k, v in scalars.items()])

    def _end(self, ending: Ending) -> None:
        self._client.set_terminated(self._run_id, _MLFLOW_STATUS[ending])

    def publish(self) -> None:
        """Nothing to move: a rerun is an MLflow run of its own."""


def _experiment(client: Any, name: str) -> str:
    """The id of the experiment ``name``, created on first use (by whichever of a sweep's workers is first)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - another process created it in between (MlflowException)
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def last_step(folder: Path) -> int:
    """The largest step of any event in the TensorBoard log ``folder`` (0 when it holds none)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    last = 0
    for path in sorted(folder.glob("events.out.tfevents.*")):
        try:
            for event in EventFileLoader(str(path)).Load():
                last = max(last, event.step)
        except Exception:  # noqa: BLE001 - a file cut short by a kill: the events read before the cut count
            continue
    return last


def _plain(run_id: str) -> str:
    """``run_id`` as one plain folder name under the results folder; UserError for anything else (a separator,
    ``..``, a control character), which could place or clear a log outside it."""
    if (run_id in ("", ".", "..") or "/" in run_id or "\\" in run_id or not run_id.isprintable()
            or run_id != run_id.strip()):
        raise UserError(f"cannot track run id {run_id!r}: a run id must be one plain file name")
    return run_id


KINDS: dict[str, type] = {"tensorboard": TensorBoardTracker, "wandb": WandbTracker, "mlflow": MlflowTracker}


def open_trackers(names: Sequence[str], results: Path, run_id: str, spec: RunSpec, resume: bool, work_dir: Path,
                  announce: bool = True) -> list[Tracker]:
    """The run's trackers, opened; ``work_dir`` (the run's, beside its checkpoint) keeps what a resumed run needs
    to go on in the same log. ``announce`` prints on stderr how to watch each as the run trains."""
    _plain(run_id)  # before any tracker writes or clears anything
    trackers: list[Tracker] = []
    try:
        for name in names:
            trackers.append(KINDS[name](results, run_id, spec, resume, work_dir))
    except BaseException:
        close(trackers)
        raise
    for tracker in trackers if announce else []:
        if tracker.hint and tracker.hint not in _ANNOUNCED:  # once per command: a run's seeds share TensorBoard's
            _ANNOUNCED.add(tracker.hint)
            print(f"tracking: {tracker.hint}", file=sys.stderr, flush=True)
    return trackers


_ANNOUNCED: set[str] = set()  # the hints this process has printed


def finish(trackers: Sequence[Tracker], metrics: dict[str, float | None] | None) -> dict[str, str]:
    """Log the evaluation's ``metrics`` (None: the run failed) and close each tracker; where each log is, for the
    record's ``info["tracking"]``."""
    summary = None if metrics is None else {k: v for k, v in metrics.items() if v is not None}
    for tracker in trackers:
        tracker.close(FAILED if summary is None else FINISHED, summary)
    return {tracker.name: tracker.location for tracker in trackers}


def publish(trackers: Sequence[Tracker]) -> None:
    """The run's record is written: each log becomes that record's (a rerun's TensorBoard log replaces the
    earlier run's)."""
    for tracker in trackers:
        tracker.publish()


def close(trackers: Sequence[Tracker], ending: Ending = FAILED) -> None:
    """Close every tracker that :func:`finish` did not, with how the run ended (``ending``: STOPPED at a checkpoint,
    FAILED where it crashed): what was logged stays."""
    for tracker in trackers:
        tracker.close(ending)

