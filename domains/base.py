"""The protocol every domain implements, and what the harness hands it.

A domain turns batches of its modality into :class:`losses.Scores`, pretrains an encoder with a loss
of the core, and evaluates the frozen representation with its field's protocol. The harness knows
nothing else about it: it resolves a :class:`RunSpec` (domain, method, dataset, loss, preset, seed,
the domain's config dataclass), calls ``prepare`` once for the seeds of a run (the data and its
fingerprint), then for each seed builds a :class:`~domains.context.RunContext` and calls ``pretrain`` then
``evaluate``. Beside this module, the rest of the contract: :mod:`domains.context` (what a run hands the domain:
progress, checkpoints, trackers), :mod:`domains.errors` (what it raises) and :mod:`domains.files` (atomic writes,
the cache, data fingerprints).

Rules for a domain module (so ``harness list`` works whatever extras are installed):
- import only the standard library and the core dependencies (numpy, torch, pydantic for the config, the loss
  core) at module level; import the heavy libraries of
  its extra (torch_geometric, torchvision, dm_control, transformers, ...) inside functions, through
  :func:`require`, which turns a missing package into a :class:`~domains.errors.UserError` naming the extra;
- raise :class:`~domains.errors.UserError` (or :class:`~domains.errors.DatasetMissingError`) for every mistake a
  user can fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch

import losses
from domains.context import RunContext
from domains.errors import UserError
from losses.registry import CLASS, CLASSMATES, LOGITS, POSITIVES, PROBABILITIES, SCORINGS, VIEWS, LossSpec


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

    source: str  # e.g. "InfoGraph (Sun et al., ICLR 2020), Table 2"
    dataset: str
    label: str  # e.g. "InfoGraph+PUCL (alpha 0.1)"
    value: float
    std: float | None = None
    method: str = ""
    loss: str = ""
    # How the published run differs from ours (data, budget, model), where it does: the leaderboard marks the row
    # and prints this note under its table, so a reader does not compare unlike runs unawares.
    protocol: str = ""
    # True only for a number read in the source, or in a quotation of it that names it (a test should pin it,
    # quoting what was read); a row left False says "(unchecked)" after its source on the page.
    checked: bool = False


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
class KeptModel:
    """What a run keeps of its training (``harness run --save-model``, :meth:`Domain.trained_modules`): the trained
    networks by name, and what rebuilding them needs besides the run's config (:meth:`Domain.build_modules`): the
    sizes the data decides (a feature count, an action count), a tokenizer, as plain values (str, int, float,
    bool, None, lists and dicts of them) that ``torch.load(..., weights_only=True)`` reads back."""

    modules: dict[str, torch.nn.Module]
    build: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalResult:
    """What ``evaluate`` returns. ``metrics`` holds the primary metric and the other scalars;
    ``details`` the per-fold / per-task / per-episode numbers (JSON-serialisable)."""

    metrics: dict[str, float]
    details: dict[str, Any] = field(default_factory=dict)


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

    def lacks(self, loss: LossSpec) -> str:
        """What the objective ``loss`` needs that this does not supply, in words (``class labels``), for an error
        that says why a method does not train with it; empty where it :meth:`admits` it."""
        needs = ["class labels"] if loss.needs_labels and not self.labels else []
        if loss.positives not in self.positives:
            needs.append(f"positives that are {_POSITIVE_WORDS[loss.positives]}")
        if loss.scoring not in self.scorings:
            needs.append(_SCORING_WORDS[loss.scoring])
        return " and ".join(needs)


_SCORING_WORDS = {PROBABILITIES: "logits it normalises over the candidates (a softmax)",
                  LOGITS: "raw logits, each pair scored on its own"}
_POSITIVE_WORDS = {VIEWS: "other views of the anchor's sample", CLASSMATES: "the anchor's classmates",
                   CLASS: "the anchor's class among class candidates"}


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
    # method -> the config keys that weight or shape its objective around the loss (a regulariser's weight): a
    # paper's table compares "SupCon" with "eps-SupInfoNCE + FairKL", each with its own weights. The pages count
    # them as the loss's hyper-parameters, so rows that differ only in them share one setting.
    method_objective_keys: ClassVar[dict[str, frozenset[str]]] = {}
    # Methods that train nothing and ignore the loss (evaluation only): `harness run` needs no --loss for them, and
    # names the method's baseline loss in the record (its run id), as when a user passed that loss.
    loss_free_methods: ClassVar[frozenset[str]] = frozenset()
    # The module holding the domain's page text, its REFERENCES and NOTES (:attr:`references`, :attr:`notes`): read
    # by the pages alone and imported on demand, so that it lies outside the code a run executes and its identity
    # (editing a note or a published number changes no run id). Run code never imports it.
    published_module: ClassVar[str | None] = None
    leaderboard_metrics: ClassVar[tuple[str, ...]] = ()  # secondary metrics the leaderboard shows as columns

    # A plugin may set ``references = (...)`` and ``notes = {...}`` as class attributes instead: a subclass's
    # attribute shadows these properties.
    @property
    def references(self) -> tuple[Reference, ...]:
        """The published numbers the leaderboard shows as labelled reference rows: :attr:`published_module`'s
        REFERENCES."""
        return self._published("REFERENCES", ())

    @property
    def notes(self) -> dict[str, str]:
        """dataset -> a paragraph the leaderboard prints under that dataset's table: where and why we do not
        reproduce a paper, what is still to run. Written by hand, so it cites records, never replaces them:
        :attr:`published_module`'s NOTES."""
        return self._published("NOTES", {})

    def _published(self, name: str, default: Any) -> Any:
        if self.published_module is None:
            return default
        # import_module, not an import statement: no static import (the run's code closure) reaches the page text
        return getattr(importlib.import_module(self.published_module), name)

    def baseline_loss_for(self, method: str) -> str:
        """The loss a method's other rows are measured against (the domain's, unless the method sets its own)."""
        return self.method_baselines.get(method, self.baseline_loss)

    def objective_keys(self, method: str) -> frozenset[str]:
        """The config keys of ``method``'s objective beyond the loss (:attr:`method_objective_keys`)."""
        return self.method_objective_keys.get(method, frozenset())

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

    def unused_fields(self, config: Any, method: str, dataset: str, loss: str) -> dict[str, str]:
        """The config fields a run of ``method`` on ``dataset`` with ``loss`` ignores under ``config`` (its values
        resolved), each with the reason, e.g. ``{"momentum": "optimizer=adam has none (sgd only)"}``. A value given
        to one would change the run's id and nothing the run computes: ``harness run`` refuses it, and a sweep
        leaves it out of those jobs, which run once. Empty (the default): every field counts."""
        return {}

    def dataset_code(self, dataset: str) -> tuple[str, ...]:
        """The modules of the user's own code that ``dataset`` runs (rl's ``gym:<module>:<id>``: the module that
        registers the environment), imported: their code, and the user's modules they import, is part of the run's
        identity as a plugin's is (``harness.version.source_digest``). Default: none."""
        return ()

    def validate(self, spec: RunSpec) -> None:  # noqa: B027 - an optional hook, not abstract
        """Raise UserError for a combination that cannot run (e.g. a method/dataset mismatch)."""

    @abstractmethod
    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        """Load the data of a run and fingerprint it (file hashes, generator parameters): what identifies the
        data the run saw. The harness calls it once for all the seeds of a run, before any record or checkpoint
        is written (a missing or mistyped dataset is a UserError then), and hands ``data`` to ``pretrain`` and
        ``evaluate`` of every seed. So both may depend only on the domain, the dataset, the data root and the
        config, never on the seed, the loss or the device (``ctx.seed`` is the first seed's; a domain moves its
        data to the device in ``pretrain``), and neither step may change the data. Where the harness takes the
        fingerprint first (:meth:`data_fingerprint`), it hands both calls the same ``ctx``: what both read and is
        costly to find (hf-text's dataset, for a hub id a request to the hub) is kept in ``ctx.found`` and found
        once for the run."""

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

    def trained_modules(self, spec: RunSpec, pretrained: PretrainResult) -> KeptModel | None:
        """The trained networks of ``pretrained`` worth keeping (``harness run --save-model``): the encoder a user
        probes, plots or fine-tunes, and what trains beside it (heads, a momentum encoder, an agent's actor and
        critic), each an ``nn.Module`` whose ``state_dict()`` is saved under its name. None: nothing to keep, as for
        a method that trains nothing (an evaluation-only baseline); the default, for a domain that does not say."""
        return None

    def build_modules(self, spec: RunSpec, build: dict[str, Any]) -> dict[str, torch.nn.Module]:
        """Untrained networks of the architecture :meth:`trained_modules` keeps, on the CPU and under the same
        names, from the run's ``spec`` (its config as recorded) and the kept ``build`` values: the saved state
        dicts load into them with ``load_state_dict(strict=True)`` (:func:`harness.run.model_file.load_model`)."""
        raise UserError(f"domain '{self.name}' cannot rebuild the networks of a saved model")

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


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 run``, ``2 runs``, ``0 runs``: a count with its noun in the number it takes (``plural`` where adding an s
    does not make it)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


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


