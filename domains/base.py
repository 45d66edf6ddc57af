"""The protocol every domain implements, and what the harness hands it.

A domain turns batches of its modality into :class:`losses.Scores`, pretrains an encoder with a loss
of the core, and evaluates the frozen representation with its field's protocol. The harness knows
nothing else about it: it resolves a :class:`RunSpec` (domain, method, dataset, loss, preset, seed,
the domain's config dataclass), calls ``prepare`` once for the seeds of a run (the data and its
fingerprint), then for each seed builds a :class:`RunContext` and calls ``pretrain`` then ``evaluate``.

Rules for a domain module (so ``harness list`` works whatever extras are installed):
- import only the standard library and the core dependencies (numpy, torch, pydantic for the config, the loss
  core) at module level; import the heavy libraries of
  its extra (torch_geometric, torchvision, dm_control, transformers, ...) inside functions, through
  :func:`require`, which turns a missing package into a :class:`UserError` naming the extra;
- raise :class:`UserError` (or :class:`DatasetMissingError`) for every mistake a user can fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
import logging
import math
import numbers
import os
import random
import stat
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

import losses
from losses.registry import POSITIVES, PROBABILITIES, SCORINGS, VIEWS, LossSpec

T = TypeVar("T")


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


class DatasetMissingError(UserError):
    """A dataset is not on disk and could not be downloaded; the message says where to put it."""


class UnwritableFileError(UserError, OSError):
    """A file the harness could not write (a full disk, a folder turned read-only): the file there, if any, is
    unchanged. Also an OSError (``strerror`` the system's reason), so callers that handle a failed write as one
    still do; the CLI prints it as one line, like any UserError."""

    def __init__(self, path: Path, cause: OSError):
        super().__init__(f"cannot write {path}: {cause.strerror or cause}; the file there, if any, is unchanged")
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, str(path)

    def __str__(self) -> str:  # OSError's would be "[Errno 28] ...", without what the file there kept
        return str(self.args[0])


class NonFiniteLossError(UserError):
    """Training produced a NaN or infinite loss; raised at once by :meth:`RunContext.check_loss`."""


class RunStopped(BaseException):
    """The run was asked to stop (a signal, a time limit) and did, at a step boundary where its checkpoint holds
    its state: resuming goes on from there. A BaseException, like KeyboardInterrupt, so that a domain's
    ``except Exception`` never takes it for a failure; the message is the reason."""


def _checkpoint_globals() -> list[Any]:
    """What a checkpoint may hold besides tensors and plain Python: numpy arrays, scalars and dtypes (replay
    buffers, RNG states). ``torch.load(weights_only=True)`` refuses every other class, so a tampered
    checkpoint cannot run code."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype, *dtypes]


def rng_state() -> dict[str, Any]:
    """The state of every random generator a run draws from: Python's, numpy's global one, torch's on the CPU
    and, once CUDA is in use, on every CUDA device (an unused CUDA generator keeps the seed it was given)."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` returned (the CUDA devices this machine has, of those saved)."""
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][:torch.cuda.device_count()])


def require(module: str, extra: str) -> Any:
    """Import ``module`` or raise a UserError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UserError(
            f"this needs the Python package '{module.split('.')[0]}' ({exc}); "
            f"install it with: pip install 'contrastive-harness[{extra}]'"
        ) from exc


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset a domain can load. ``needs_download`` is False for the embedded defaults."""

    name: str
    description: str
    needs_download: bool = True


class OpenDatasets(dict):
    """A domain's named data sets, and any other name ``accepts`` admits, described on demand by
    ``describe``: ``name in datasets`` and ``datasets[name]`` hold for both; iteration lists only the
    named ones (``harness list``)."""

    def __init__(self, named: dict[str, DatasetSpec], *, accepts: Callable[[str], bool],
                 describe: Callable[[str], DatasetSpec]):
        super().__init__(named)
        self.accepts, self.describe = accepts, describe

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and self.accepts(name))

    def __missing__(self, name: str) -> DatasetSpec:
        if isinstance(name, str) and self.accepts(name):
            return self.describe(name)
        raise KeyError(name)


@dataclass(frozen=True)
class Preset:
    """Named overrides of a domain's config dataclass, and the seeds a preset runs by default."""

    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0, 1, 2)


@dataclass(frozen=True)
class Reference:
    """A published number, shown on the leaderboard as a labelled reference row, never as ours."""

    source: str  # e.g. "PUCL paper, Table 2"
    dataset: str
    label: str  # e.g. "InfoGraph+PUCL (alpha 0.1)"
    value: float
    std: float | None = None
    method: str = ""
    loss: str = ""
    # How the published run differs from ours (data, budget, model), where it does: the leaderboard marks the row
    # and prints this note under its table, so a reader does not compare unlike runs unawares.
    protocol: str = ""


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one run. ``config`` is the domain's dataclass, fully resolved."""

    domain: str
    method: str
    dataset: str
    loss: str
    loss_params: dict[str, Any]
    preset: str
    seed: int
    config: Any

    def make_loss(self):
        """The loss callable ``loss(scores) -> scalar`` from the core registry."""
        return losses.get(self.loss, **self.loss_params)

    def config_dict(self) -> dict[str, Any]:
        """The experiment part of the config: what the run's identity (its hash, its leaderboard row) covers."""
        return split_config(self.config)[0]

    def runtime_dict(self) -> dict[str, Any]:
        """The runtime part (:func:`runtime_fields`): recorded, never hashed."""
        return split_config(self.config)[1]


@dataclass(frozen=True)
class Prepared:
    """What ``Domain.prepare`` returns: the data every seed of a run trains and evaluates on (the domain's own
    type) and its fingerprint, which the run's id hashes."""

    data: Any
    fingerprint: dict[str, Any]


@dataclass
class PretrainResult:
    """What ``pretrain`` returns: the trained model(s) and what the record keeps of training."""

    model: Any
    curve: list[dict[str, Any]] = field(default_factory=list)  # one dict per epoch / eval point
    throughput: dict[str, float] = field(default_factory=dict)  # e.g. {"graphs_per_s": ...}
    info: dict[str, Any] = field(default_factory=dict)  # anything else worth recording
    loss_used: bool = True  # False: the method ignores the loss (evaluation only, e.g. a bag-of-words baseline)


@dataclass
class EvalResult:
    """What ``evaluate`` returns. ``metrics`` holds the primary metric and the other scalars;
    ``details`` the per-fold / per-task / per-episode numbers (JSON-serialisable)."""

    metrics: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunContext:
    """What the harness gives a domain for one run."""

    seed: int
    device: torch.device
    data_root: Path
    work_dir: Path  # private to this run: checkpoints live here
    resume: bool = False
    quiet: bool = False
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("harness.run"))
    # the run id (its seed, config, data and code): a checkpoint is resumed only by the run that saved it
    run_key: str = ""
    # live trackers (harness.run.tracking: TensorBoard, W&B, MLflow) that log_scalars hands its scalars to
    trackers: Sequence[Any] = ()
    # why the run should stop (a signal, a time limit), or None: the harness's; read at each step boundary
    stop_reason: Callable[[], str | None] = field(default=lambda: None, repr=False, compare=False)
    # the checkpoint read by saved_extras, kept until restore_checkpoint takes it (the file is read once)
    _pending: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _checkpointed: bool = field(default=False, init=False, repr=False, compare=False)  # saved during this step
    # Wall seconds of the run before this process took it up: its earlier processes' up to their last checkpoint
    # (what the resumed run keeps of them), read from the checkpoint; the record's timings add them.
    earlier_s: float = field(default=0.0, init=False, repr=False, compare=False)
    _clock: float = field(default_factory=time.perf_counter, init=False, repr=False, compare=False)

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None, **kw) -> Iterator[T]:
        """A tqdm progress bar, silent under ``--quiet``, over the steps of a training loop; where a stop is
        requested it raises :class:`RunStopped` at the first step boundary where the checkpoint holds the run's
        state: before the loop's first step (the state a loop starts from is the restored checkpoint's, or a
        fresh start's), or right after a step that called :meth:`save_checkpoint`. A loop that checkpoints
        every step stops at the next one; one that checkpoints every few steps saves early when
        :attr:`stop_requested` says so."""
        from tqdm.auto import tqdm

        return self._stoppable(tqdm(iterable, desc=desc, total=total, disable=self.quiet, leave=False, **kw))

    def _stoppable(self, bar: Any) -> Iterator[T]:
        resumable = True
        for item in bar:
            reason = self._agreed_stop(resumable)
            if reason is not None:
                bar.close()
                raise RunStopped(reason)
            self._checkpointed = False
            yield item
            resumable = self._checkpointed

    def _agreed_stop(self, resumable: bool) -> str | None:
        """The stop reason where the run stops at this boundary. Under torch.distributed every rank stops at the
        same boundary (else the others would wait for it in their next collective): any rank's stop stops all,
        and rank 0's checkpoint (the only one written) makes the boundary resumable for all."""
        reason = self.stop_reason()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized() and \
            torch.distributed.get_world_size() > 1
        if not distributed:
            return reason if resumable else None
        flags = torch.tensor([reason is not None, resumable], dtype=torch.float32, device=self.device)
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        return (reason or "another rank's stop") if bool(flags.all()) else None

    @property
    def stop_requested(self) -> bool:
        """Whether the run is asked to stop: a loop that does not checkpoint every step saves one now."""
        return self.stop_reason() is not None

    def log(self, message: str) -> None:
        self.logger.info(message)

    def log_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Hand the scalars of training ``step`` (the domain's own unit, increasing: an optimizer step, an
        environment step) to the run's live trackers (``--tracker``) as the run trains; a no-op without any.

        Pass values already on the host (a loss read with ``.item()``, a curve point): a tensor is refused, since
        reading it would wait for the device. Whatever is not a number (None, a list, text) is left out, so a curve
        point goes as it is. On CUDA the memory the caching allocator holds for tensors is added (host counters,
        no synchronisation)."""
        if not self.trackers:
            return
        values = {}
        for key, value in scalars.items():
            if isinstance(value, torch.Tensor):
                raise TypeError(f"log_scalars: '{key}' is a tensor; pass a number already on the host")
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                values[key] = float(value)
        if not values:
            return
        if self.device.type == "cuda":
            values["gpu_memory_gib"] = torch.cuda.memory_allocated(self.device) / 2**30
            values["gpu_peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        for tracker in self.trackers:
            tracker.log(step, values)

    @property
    def checkpoint_path(self) -> Path:
        return self.work_dir / "checkpoint.pt"

    def save_checkpoint(self, objects: dict[str, Any], **extra: Any) -> None:
        """Atomically save (a kill never leaves half a file) what resuming needs to go on as if never stopped:
        the ``state_dict()`` of each of ``objects`` (model, optimizer, scheduler, the bound loss, a replay
        buffer; a None is skipped, e.g. a method without a loss), the state of every random generator
        (:func:`rng_state`) and the plain values ``extra`` (epoch, step, curve, a generator's own state...)."""
        state = {"objects": {name: obj.state_dict() for name, obj in objects.items() if obj is not None},
                 "rng": rng_state(), "extra": extra, "run": self.run_key,
                 "elapsed_s": self.earlier_s + time.perf_counter() - self._clock}
        write_atomic(self.checkpoint_path, lambda fh: torch.save(state, fh))
        self._checkpointed = True

    def restore_checkpoint(self, objects: dict[str, Any]) -> dict[str, Any] | None:
        """When resuming from a checkpoint: load each of ``objects`` (named as they were saved), restore the
        random generators and return the extras; None on a fresh start. Call it once the objects are built:
        building them draws random numbers, and the saved state must be what the next step draws from."""
        state, self._pending = self._pending or self._saved(), None
        if state is None:
            return None
        given = {name: obj for name, obj in objects.items() if obj is not None}
        missing = sorted(set(given) - set(state["objects"]))
        if missing:
            raise UserError(f"the checkpoint {self.checkpoint_path} holds no {', '.join(missing)}; rerun without "
                            "--resume to start over")
        for name, obj in given.items():
            obj.load_state_dict(state["objects"][name])
        set_rng_state(state["rng"])
        return state["extra"]

    def saved_extras(self) -> dict[str, Any] | None:
        """The extras of the checkpoint a resumed run goes on from, restoring nothing: for what the training
        objects are built from (the text domain's vocabulary); None on a fresh start. The checkpoint is kept for
        :meth:`restore_checkpoint`, which then does not read the file again."""
        self._pending = self._saved()
        return None if self._pending is None else self._pending["extra"]

    def _saved(self) -> dict[str, Any] | None:
        """The checkpoint when resuming, else None. ``weights_only``: tensors, plain Python and the numpy types
        of :func:`_checkpoint_globals` load; any other class (a tampered file) is refused, never run."""
        path = self.checkpoint_path
        if not self.resume or not (path.exists() or path.is_symlink()):
            return None
        refuse_link(path, self.work_dir.parent)
        start_over = "rerun without --resume to start over"
        try:
            with torch.serialization.safe_globals(_checkpoint_globals()):
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - truncated, not a torch file, or a class that is refused
            kind = type(exc).__name__
            raise UserError(f"the checkpoint {path} cannot be read ({kind}: it is damaged or not a checkpoint the "
                            f"harness wrote); {start_over}") from None
        # elapsed_s: absent from checkpoints written before records timed a resumed run whole
        if not isinstance(state, dict) or not {"objects", "rng", "extra", "run"} <= set(state) <= \
                {"objects", "rng", "extra", "run", "elapsed_s"}:
            raise UserError(f"{path} is not a checkpoint of this version of the harness; {start_over}")
        if state["run"] != self.run_key:
            raise UserError(f"the checkpoint {path} was saved by another run (another config, data or code); "
                            f"{start_over}")
        self.earlier_s = float(state.get("elapsed_s", 0.0))
        return state

    def check_loss(self, value: float, step: int, hint: str = "") -> None:
        """Stop at once on a NaN or infinite loss, naming the step and the value; the harness writes a failed
        record saying so. ``hint`` names what to change (default: a lower learning rate)."""
        if not math.isfinite(value):
            raise NonFiniteLossError(f"the loss is {value} at training step {step}: training diverged; "
                                     f"{hint or 'try a lower learning rate (--set lr=...)'}")


@dataclass(frozen=True)
class Supplies:
    """What a method's training loop hands a loss; the losses it accepts follow from it
    (:meth:`Domain.accepted_losses`): the core losses whose capabilities (:class:`losses.LossSpec`) it meets.

    ``positives``: what a positive of the Scores it builds can mean (``losses.POSITIVES``: another view of the
    anchor's own sample, a classmate, or its class among class candidates); ``scorings``: how its logits may be read
    (``losses.SCORINGS``: as probabilities, similarities over a temperature normalised over the candidates, or as
    raw logits scored pair by pair); ``labels``: whether it can hand the loss class labels."""

    positives: frozenset[str] = frozenset({VIEWS})
    scorings: frozenset[str] = frozenset({PROBABILITIES})
    labels: bool = False

    def __post_init__(self) -> None:
        for name, known in (("positives", POSITIVES), ("scorings", SCORINGS)):
            given = frozenset(getattr(self, name))
            object.__setattr__(self, name, given)
            if not given <= set(known):
                raise ValueError(f"Supplies: unknown {name} {', '.join(sorted(given - set(known)))}; "
                                 f"known: {', '.join(known)}")

    def admits(self, loss: LossSpec) -> bool:
        """Whether a method supplying this trains with ``loss``: a training objective whose positives and scoring
        it supplies, and labels where the loss needs them."""
        return (loss.objective and loss.positives in self.positives and loss.scoring in self.scorings
                and (self.labels or not loss.needs_labels))


class Domain(ABC):
    """Base class of a domain. Subclasses set the class attributes and implement the two steps."""

    name: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type]  # a dataclass; every field has a default (the quick CPU setting)
    methods: ClassVar[dict[str, str]]  # method name -> one-line description
    default_method: ClassVar[str]
    datasets: ClassVar[dict[str, DatasetSpec]]
    default_dataset: ClassVar[str]  # embedded, needs no download
    supplies: ClassVar[Supplies] = Supplies()  # what its methods hand a loss: the losses they accept follow
    method_supplies: ClassVar[dict[str, Supplies]] = {}  # method -> its own Supplies, where it differs
    presets: ClassVar[dict[str, Preset]]  # at least "quick" and "paper"
    primary_metric: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    baseline_loss: ClassVar[str] = "infonce"  # the row the leaderboard measures gains against
    method_baselines: ClassVar[dict[str, str]] = {}  # method -> its own baseline loss, where it differs
    references: ClassVar[tuple[Reference, ...]] = ()
    leaderboard_metrics: ClassVar[tuple[str, ...]] = ()  # secondary metrics the leaderboard shows as columns
    # dataset -> a paragraph the leaderboard prints under that dataset's table: where and why we do not
    # reproduce a paper, what is still to run. Written by hand, so it cites records, never replaces them.
    notes: ClassVar[dict[str, str]] = {}

    def baseline_loss_for(self, method: str) -> str:
        """The loss a method's other rows are measured against (the domain's, unless the method sets its own)."""
        return self.method_baselines.get(method, self.baseline_loss)

    def accepted_losses(self, method: str | None = None) -> tuple[str, ...]:
        """The core losses ``method`` (for None: any method) trains with: the registry filtered by what the method
        supplies (:class:`Supplies`); the baseline losses first, then the others by name."""
        methods = list(self.methods) if method is None else [method]
        names = {name for name in losses.available() for m in methods
                 if self.method_supplies.get(m, self.supplies).admits(losses.spec(name))}
        baselines = [self.baseline_loss_for(m) for m in methods]
        return tuple(name for name in dict.fromkeys([*baselines, *sorted(names)]) if name in names)

    @property
    def losses(self) -> tuple[str, ...]:
        """Every loss the domain accepts, for one method or another (:meth:`accepted_losses`)."""
        return self.accepted_losses()

    def setting_note(self, config: dict[str, Any], method: str, dataset: str) -> str:
        """The budget and model of a run, short, for the leaderboard's setting column (e.g. "20 epochs, batch 128,
        GIN 3x32" or "5k env steps"), from a record's ``config`` and what it ran: a preset's name alone does not
        tell a reader the epochs, steps or model. Empty: nothing to add."""
        return ""

    def recorded_config(self, config: dict[str, Any], details: dict[str, Any]) -> dict[str, Any]:
        """The config values (experiment and runtime fields, as recorded) a record ran with, given its ``details``:
        where a record written before a field existed, or before its default or meaning changed, ran something
        other than today's default, say so here; :func:`harness.records.normalize` then fills the fields still
        missing with today's defaults. Default: ``config`` unchanged."""
        return config

    def resolve_config(self, config: Any, method: str, dataset: str) -> Any:
        """``config`` with every ``auto`` value replaced by the one the run uses, so that a record stores, and
        its identity hashes, effective values: the default and an explicit equal value are one setting."""
        return config

    def validate(self, spec: RunSpec) -> None:  # noqa: B027 - an optional hook, not abstract
        """Raise UserError for a combination that cannot run (e.g. a method/dataset mismatch)."""

    @abstractmethod
    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        """Load the data of a run and fingerprint it (file hashes, generator parameters): what identifies the
        data the run saw. The harness calls it once for all the seeds of a run, before any record or checkpoint
        is written (a missing or mistyped dataset is a UserError then), and hands ``data`` to ``pretrain`` and
        ``evaluate`` of every seed. So both may depend only on the domain, the dataset, the data root and the
        config, never on the seed, the loss or the device (``ctx.seed`` is the first seed's; a domain moves its
        data to the device in ``pretrain``), and neither step may change the data."""

    def data_fingerprint(self, spec: RunSpec, ctx: RunContext) -> dict[str, Any]:
        """The fingerprint of :meth:`prepare` without the data: a sweep takes it to skip the jobs whose record
        exists, and runs none of them itself (each worker prepares its own). The default loads the data. A
        domain whose fingerprint costs less than its data (file hashes, generator parameters) computes it here
        and has ``prepare`` take it from the same function, so that no process computes it twice."""
        return self.prepare(spec, ctx).fingerprint

    @abstractmethod
    def pretrain(self, spec: RunSpec, ctx: RunContext, data: Any) -> PretrainResult:
        """Train the representation on ``data`` (``Prepared.data``); checkpoint through ``ctx.save_checkpoint``
        and resume through ``ctx.restore_checkpoint``."""

    @abstractmethod
    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext, data: Any) -> EvalResult:
        """Evaluate the frozen representation with the domain's protocol on ``data`` (``Prepared.data``)."""

    def benchmark(self, device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
        """The parts of ``harness bench <domain>``, in the order they run; nothing is measured until a part's
        ``measure`` is called."""
        raise UserError(f"domain '{self.name}' has no benchmark")


@dataclass(frozen=True)
class BenchPart:
    """One piece of a speed benchmark, measured on its own: ``measure()`` returns its rows (flat dicts). The
    ``name`` is the same in every run of the benchmark, so that an interrupted ``harness bench --resume`` keeps
    the parts its file holds and measures the rest. What a part compares (a ratio, a speed-up) lies within it."""

    name: str
    measure: Callable[[], list[dict[str, Any]]]


def describe_validation(exc: Any, limit: int = 3, whole: str = "") -> str:
    """A pydantic ``ValidationError`` as one line: ``field: must be ...`` for each of its first ``limit`` errors
    (the field's constraint in pydantic's words; ``whole`` names an error of the object as a whole), the rest
    counted. The one error style of ``--set`` values, configs and records."""
    errors = exc.errors(include_url=False)
    parts = []
    for err in errors[:limit]:
        msg = err["msg"].removeprefix("Value error, ").replace("Input should be ", "must be ", 1)
        where = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in err["loc"]).lstrip(".") or whole
        if where.startswith("["):  # a bare list's item (a comma-separated --set value)
            where = f"item {where[1:-1]}"
        parts.append(f"{where}: {msg}" if where else msg)
    more = f" (and {len(errors) - limit} more)" if len(errors) > limit else ""
    return "; ".join(parts) + more


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` (difflib, ignoring case), else ``"."``: the
    caller's next sentence follows either way."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f"; did you mean '{prefix}{by_lower[close[0]]}'?" if close else "."


RUNTIME = "runtime"  # config field metadata key: field(default=..., metadata={RUNTIME: True})
# Config field metadata key for an experiment field added after records were committed: field(default=...,
# metadata={ADDED: True}). At its default it is left out of the experiment part (the run's identity), so a run
# of the default setting keeps the identity the committed records have; set to anything else, it is hashed.
ADDED = "added"


def runtime_fields(config_class: type) -> frozenset[str]:
    """The fields of a config dataclass marked ``metadata={"runtime": True}``: how a run executes (parallel
    jobs, loader workers, download, logging and checkpoint frequency), never what it computes. They are
    recorded but left out of every hash and group key, so the same experiment on another machine is the same
    setting."""
    return frozenset(f.name for f in dataclasses.fields(config_class) if f.metadata.get(RUNTIME))


def split_config(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A config dataclass as (experiment fields, runtime fields), each a dict. An experiment field marked
    :data:`ADDED` is left out at its default."""
    values, runtime = dataclasses.asdict(config), runtime_fields(type(config))
    at_default = {f.name for f in dataclasses.fields(config) if f.metadata.get(ADDED) and f.name not in runtime
                  and f.default is not dataclasses.MISSING and values[f.name] == f.default}
    return ({k: v for k, v in values.items() if k not in runtime and k not in at_default},
            {k: v for k, v in values.items() if k in runtime})


def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: str | bytes | Callable[[Any], None]) -> None:
    """Write ``data`` (text as UTF-8, bytes, or a function that writes into the binary file object it gets, e.g.
    ``lambda fh: torch.save(state, fh)``) to ``path`` through a unique temporary file in the same folder, fsync
    and ``os.replace`` (atomic on POSIX). A reader, a crash or a concurrent writer never sees half a file, and a
    failed write leaves the old file intact. The file gets the mode any other new file would (0666 less the
    umask), not mkstemp's private 0600, so a shared results folder stays readable. UnwritableFileError, naming
    ``path``, when the system refuses (no space, no permission): a write error alone does not name the file."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except Exception as exc:
        # A writer may wrap the system's refusal: torch.save raises a RuntimeError in handling the OSError.
        refusal = exc if isinstance(exc, OSError) else exc.__context__
        if isinstance(refusal, OSError):
            raise UnwritableFileError(path, refusal) from exc
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def refuse_link(path: Path, folder: Path) -> None:
    """UserError when ``path``, or a folder between ``folder`` and it, is a symbolic link: the harness opens no
    file of its own folders (records, logs, checkpoints) through a link, which could point anywhere."""
    path, folder = Path(path), Path(folder)
    try:
        parts = path.relative_to(folder).parts
    except ValueError:
        raise UserError(f"{path} is not inside {folder}") from None
    for depth in range(len(parts), 0, -1):
        here = folder.joinpath(*parts[:depth])
        if here.is_symlink():
            raise UserError(f"{here} is a symbolic link; the harness does not read or write through links in its "
                            "folders: replace it with the file itself, or remove it")


def cache_dir() -> Path:
    """The writable cache for derived files (processed datasets, split corpora): ``$HARNESS_CACHE_DIR``
    or ``~/.cache/contrastive-harness``; never the data root, which may be read-only. A cache read as data must be
    the user's alone: UserError where the folder exists and belongs to another user or anyone may write it
    (a file planted there, with the digest its name promises, would be read as the data)."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    path = Path(env) if env else Path.home() / ".cache" / "contrastive-harness"
    try:
        st = path.stat()
    except OSError:
        return path  # not there yet: whoever creates it first is this process
    if st.st_uid != os.getuid() or st.st_mode & stat.S_IWOTH:
        whose = "belongs to another user" if st.st_uid != os.getuid() else "is writable by every user"
        raise UserError(f"the cache folder {path} {whose}: a file planted there would be read as data; "
                        "set HARNESS_CACHE_DIR to a folder of your own")
    return path


_FILE_HASHES: dict[tuple[tuple[str, int, int], ...], str] = {}
"""The digests :func:`hash_files` computed in this process, keyed by each file's resolved path, size and
modification time in nanoseconds: a run fingerprints its data before deciding whether it has work left, then
loads it, and a sweep's worker fingerprints every job's, so the same files would be read again each time."""


def hash_files(paths: Iterable[Path]) -> str:
    """sha256 over the names and bytes of ``paths`` (sorted), for data fingerprints. Computed once per process
    for files that have not changed since (:data:`_FILE_HASHES`): a rewritten file has another size, mtime,
    ctime or inode (``rsync -t`` or ``touch -r`` puts the mtime back, not the ctime, which moves at the file
    system's resolution). UserError naming the file that cannot be read."""
    ordered = sorted(Path(p) for p in paths)
    try:
        key = tuple((str(p.resolve()), (st := p.stat()).st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                    for p in ordered)
        if key not in _FILE_HASHES:
            digest = hashlib.sha256()
            for path in ordered:
                digest.update(path.name.encode())
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(chunk)
            _FILE_HASHES[key] = digest.hexdigest()
    except OSError as exc:
        raise UserError(f"cannot read data file {exc.filename or ''}: {exc.strerror or exc}") from None
    return _FILE_HASHES[key]


def label_prior(labels: Any) -> dict[str, Any]:
    """The class prior that ``labels`` (one per pretraining sample, any hashable values: an array, a tensor, a
    list) give: ``{"label_prior": τ+, "label_classes": C}`` with τ+ = Σ_c p_c², p_c the fraction of samples
    in class c, and C the number of classes present.

    τ+ is the chance that a sample drawn at random shares the anchor's class: the class prior the debiased
    losses correct for (Chuang et al., NeurIPS 2020, "Debiased Contrastive Learning", Eq. 2; τ+ = 1/C for
    balanced classes). Evaluations report it so that a prior estimated without labels can be checked
    against it; nothing in training reads it."""
    import numpy as np

    if isinstance(labels, torch.Tensor):
        labels = labels.detach().cpu().numpy()
    values = np.asarray(labels).reshape(-1)
    if values.size == 0:
        raise ValueError("label_prior: no labels")
    counts = np.unique(values, return_counts=True)[1]
    p = counts / counts.sum()
    return {"label_prior": float(np.sum(p * p)), "label_classes": int(len(counts))}


def hash_jsonable(obj: Any) -> str:
    """A stable sha256 of a JSON-serialisable object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()
