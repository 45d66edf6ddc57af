"""The protocol every domain implements, and what the harness hands it.

A domain turns batches of its modality into :class:`losses.Scores`, pretrains an encoder with a loss
of the core, and evaluates the frozen representation with its field's protocol. The harness knows
nothing else about it: it resolves a :class:`RunSpec` (domain, method, dataset, loss, preset, seed,
the domain's config dataclass), builds a :class:`RunContext` and calls ``pretrain`` then ``evaluate``.

Rules for a domain module (so ``harness list`` works whatever extras are installed):
- import only the standard library, numpy and torch at module level; import the heavy libraries of
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
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import torch

T = TypeVar("T")


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


class DatasetMissingError(UserError):
    """A dataset is not on disk and could not be downloaded; the message says where to put it."""


class NonFiniteLossError(UserError):
    """Training produced a NaN or infinite loss; raised at once by :meth:`RunContext.check_loss`."""


def _checkpoint_globals() -> list[Any]:
    """What a checkpoint may hold besides tensors and plain Python: numpy arrays, scalars and dtypes (replay
    buffers, RNG states). ``torch.load(weights_only=True)`` refuses every other class, so a tampered
    checkpoint cannot run code."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype, *dtypes]


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
        import losses

        return losses.get(self.loss, **self.loss_params)

    def config_dict(self) -> dict[str, Any]:
        """The experiment part of the config: what the run's identity (its hash, its leaderboard row) covers."""
        return split_config(self.config)[0]

    def runtime_dict(self) -> dict[str, Any]:
        """The runtime part (:func:`runtime_fields`): recorded, never hashed."""
        return split_config(self.config)[1]


@dataclass
class PretrainResult:
    """What ``pretrain`` returns: the trained model(s) and what the record keeps of training."""

    model: Any
    curve: list[dict[str, Any]] = field(default_factory=list)  # one dict per epoch / eval point
    throughput: dict[str, float] = field(default_factory=dict)  # e.g. {"graphs_per_s": ...}
    info: dict[str, Any] = field(default_factory=dict)  # anything else worth recording


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

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None, **kw) -> Iterator[T]:
        """A tqdm progress bar, silent under ``--quiet``."""
        from tqdm.auto import tqdm

        return iter(tqdm(iterable, desc=desc, total=total, disable=self.quiet, leave=False, **kw))

    def log(self, message: str) -> None:
        self.logger.info(message)

    @property
    def checkpoint_path(self) -> Path:
        return self.work_dir / "checkpoint.pt"

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        """Atomically save ``state`` (tensors, state_dicts, python objects): a kill never corrupts it."""
        write_atomic(self.checkpoint_path, lambda fh: torch.save(state, fh))

    def load_checkpoint(self) -> dict[str, Any] | None:
        """The last checkpoint when resuming, else None."""
        if not self.resume or not self.checkpoint_path.exists():
            return None
        with torch.serialization.safe_globals(_checkpoint_globals()):
            return torch.load(self.checkpoint_path, map_location="cpu", weights_only=True)

    def check_loss(self, value: float, step: int, hint: str = "") -> None:
        """Stop at once on a NaN or infinite loss, naming the step and the value; the harness writes a failed
        record saying so. ``hint`` names what to change (default: a lower learning rate)."""
        if not math.isfinite(value):
            raise NonFiniteLossError(f"the loss is {value} at training step {step}: training diverged; "
                                     f"{hint or 'try a lower learning rate (--set lr=...)'}")


class Domain(ABC):
    """Base class of a domain. Subclasses set the class attributes and implement the two steps."""

    name: ClassVar[str]
    description: ClassVar[str]
    config_class: ClassVar[type]  # a dataclass; every field has a default (the quick CPU setting)
    methods: ClassVar[dict[str, str]]  # method name -> one-line description
    default_method: ClassVar[str]
    datasets: ClassVar[dict[str, DatasetSpec]]
    default_dataset: ClassVar[str]  # embedded, needs no download
    losses: ClassVar[tuple[str, ...]]  # loss names accepted (core registry names, or domain objectives)
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

    def setting_note(self, config: dict[str, Any]) -> str:
        """A short, human description of a run's budget for leaderboard labels (e.g. "5k env steps");
        empty when the preset's name says enough."""
        return ""

    def resolve_config(self, config: Any, method: str, dataset: str) -> Any:
        """``config`` with every ``auto`` value replaced by the one the run uses, so that a record stores, and
        its identity hashes, effective values: the default and an explicit equal value are one setting."""
        return config

    def validate(self, spec: RunSpec) -> None:  # noqa: B027 - an optional hook, not abstract
        """Raise UserError for a combination that cannot run (e.g. a method/dataset mismatch)."""

    @abstractmethod
    def pretrain(self, spec: RunSpec, ctx: RunContext) -> PretrainResult:
        """Train the representation; checkpoint through ``ctx.save_checkpoint`` and resume from
        ``ctx.load_checkpoint()``."""

    @abstractmethod
    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext) -> EvalResult:
        """Evaluate the frozen representation with the domain's protocol."""

    def data_fingerprint(self, spec: RunSpec, ctx: RunContext) -> dict[str, Any]:
        """What identifies the data a run saw (file hashes, generator parameters). It may depend only on the
        domain, the dataset, the data root and the config, never on the seed, the loss or the device: the
        harness takes it once for the runs that share those (``harness.runner.fingerprint``, and a sweep
        memoises it across jobs)."""
        return {"dataset": spec.dataset}

    def benchmark(self, device: torch.device, data_root: Path, quick: bool) -> list[dict[str, Any]]:
        """Speed benchmark rows for ``harness bench <domain>``; each row a flat dict."""
        raise UserError(f"domain '{self.name}' has no benchmark")


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` (difflib, ignoring case), else ``"."``: the
    caller's next sentence follows either way."""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
    return f"; did you mean '{prefix}{by_lower[close[0]]}'?" if close else "."


RUNTIME = "runtime"  # config field metadata key: field(default=..., metadata={RUNTIME: True})


def runtime_fields(config_class: type) -> frozenset[str]:
    """The fields of a config dataclass marked ``metadata={"runtime": True}``: how a run executes (parallel
    jobs, loader workers, download, logging and checkpoint frequency), never what it computes. They are
    recorded but left out of every hash and group key, so the same experiment on another machine is the same
    setting."""
    return frozenset(f.name for f in dataclasses.fields(config_class) if f.metadata.get(RUNTIME))


def split_config(config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A config dataclass as (experiment fields, runtime fields), each a dict."""
    values, runtime = dataclasses.asdict(config), runtime_fields(type(config))
    return ({k: v for k, v in values.items() if k not in runtime}, {k: v for k, v in values.items() if k in runtime})


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
    umask), not mkstemp's private 0600, so a shared results folder stays readable."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cache_dir() -> Path:
    """The writable cache for derived files (processed datasets, split corpora): ``$HARNESS_CACHE_DIR``
    or ``~/.cache/contrastive-harness``; never the data root, which may be read-only."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "contrastive-harness"


def hash_files(paths: Iterable[Path]) -> str:
    """sha256 over the names and bytes of ``paths`` (sorted), for data fingerprints."""
    digest = hashlib.sha256()
    for path in sorted(Path(p) for p in paths):
        digest.update(path.name.encode())
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


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
