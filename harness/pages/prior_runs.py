"""The runs of the prior study as the class-prior page (:mod:`harness.pages.prior`) reads them: which setting of its
loss's prior each record ran (:func:`classify`: the baseline, the label prior, ``auto``, the papers' default) and
what the page needs of it (:class:`Run`), with the τ+ it is judged against (:attr:`Run.reference`).

Which records are runs follows the leaderboard pages' rule (:func:`study_runs`, :func:`harness.groups.group_records`
with ``one_data``): of each experiment (everything but the seed), the newest code's records that read the data its
newest record read, one per seed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from domains.errors import UserError
from harness.groups import DATA, Group, digest, group_records
from harness.records import RunRecord, utc_iso

if TYPE_CHECKING:
    from losses.registry import HParam

SYNTHETIC = ("synthetic-motifs", "synthetic-topics", "digits", "biased-digits")
LOSSES = ("dcl", "hcl", "pucl")
MEASURED, LABEL_PRIOR = "measured", "label prior"  # where a record's reference τ+ comes from
# The record's measured share of same-class negatives: graph and vision count it as they train
# (losses.prior.SameClassShare), text from its fixed batches (domains.text.quickthought); older records lack it.
SHARE_KEYS = ("negative_same_class_fraction", "negative_same_topic_fraction")


@dataclass
class Run:
    """What the page needs of one completed record."""

    domain: str
    dataset: str
    classes: int | None
    loss: str
    settings: tuple[str, ...]  # ("baseline",) for infonce; "true", "auto", "default" (both of the first and last
    # where the label prior equals the default), or () for another value
    estimator: str | None
    seed: int
    value: float
    higher_is_better: bool
    label_prior: float | None
    estimate: float | None  # the final smoothed estimate of an auto run
    measured_share: float | None  # the measured share of the negatives that share the anchor's class
    class_structure: dict[str, float] | None  # the evaluation's class silhouette and ARI (losses.prior.class_structure)
    trajectory: list[tuple[float, float]] = field(default_factory=list)  # (epoch, smoothed estimate)
    estimate_seconds: list[float] = field(default_factory=list)  # each estimate's cost, in the curve's order
    total_seconds: float = 0.0
    data: str = ""  # the digest of the data it read (harness.groups.digest)
    other_data: bool = False  # its experiment left out seeds that read other data (Group.mixed_data)
    mixed_code: bool = False  # its experiment's seeds come from several commits (Group.mixed_code)

    @property
    def prior_seconds(self) -> float:
        return sum(self.estimate_seconds)

    @property
    def task(self) -> tuple[str, str, int | None]:
        return (self.domain, self.dataset, self.classes)

    @property
    def reference(self) -> float | None:
        """τ+ as DCL defines it, the share of the negatives the loss saw that share the anchor's class: the
        measured in-batch share where the record holds one, else the label prior (its expectation under
        uniformly drawn batches)."""
        return self.measured_share if self.measured_share is not None else self.label_prior

    @property
    def reference_source(self) -> str:
        return MEASURED if self.measured_share is not None else LABEL_PRIOR

    def relative_error(self, value: float) -> float:
        return abs(value - self.reference) / self.reference


def prior_hparam(loss: str) -> HParam | None:
    """The hyper-parameter that sets ``loss``'s class prior (τ+, α); None for a loss without one, or unknown here."""
    import losses

    return losses.spec(loss).prior_hparam if loss in losses.available() else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _share(value: Any) -> bool:
    """A τ+ (a label prior, an estimate): a number in (0, 1]; the page divides by it."""
    return _number(value) and 0 < value <= 1


def _fraction(value: Any) -> bool:
    """A measured share of the negatives: a number in [0, 1] (0 where no negative shared the anchor's class)."""
    return _number(value) and 0 <= value <= 1


def record_problem(record: RunRecord) -> str | None:
    """What of the free-form fields the page reads (``details``, ``info``, ``curve``, the prior's value in
    ``loss_params``) does not have the type the page needs, as ``field: must be ...``; None when all do. A record of
    another machine or a collaborator can hold anything there, and the record model leaves them free."""
    prior = prior_hparam(record.loss) if record.loss != "infonce" else None
    if prior is not None:
        value = record.loss_params.get(prior.name)
        if value != "auto" and not _number(value):
            return f"loss_params.{prior.name}: must be a number or 'auto', got {value!r:.40}"
        estimator = record.loss_params.get("prior_estimator")
        if estimator is not None and not isinstance(estimator, str):
            return f"loss_params.prior_estimator: must be a string, got {estimator!r:.40}"
    details, info = record.details, record.info
    checks: list[tuple[str, Any, Callable[[Any], bool], str]] = [
        ("details.label_prior", details.get("label_prior"), _share, "a number in (0, 1]"),
        ("details.label_classes", details.get("label_classes"), lambda v: type(v) is int and v > 0,
         "a positive integer"),
        ("details.class_structure", details.get("class_structure"),
         lambda v: isinstance(v, dict) and all(_number(x) for x in v.values()), "an object of numbers"),
        ("info.prior", info.get("prior"), lambda v: isinstance(v, dict), "an object"),
        *((f"info.{key}", info.get(key), _fraction, "a number in [0, 1]") for key in SHARE_KEYS),
    ]
    share = next((k for k in SHARE_KEYS if info.get(k) is not None), None)
    if share and info[share] == 0 and prior is not None and record.loss_params.get(prior.name) == "auto":
        return (f"info.{share}: is 0, the τ+ that this auto run's estimate is judged against (no negative shared "
                "the anchor's class): its relative error is undefined")
    if isinstance(info.get("prior"), dict):
        checks.append(("info.prior.final", info["prior"].get("final"), _share, "a number in (0, 1]"))
    for i, point in enumerate(record.curve):
        if "prior" in point:
            checks += [(f"curve[{i}].epoch", point.get("epoch"), _number, "a number"),
                       (f"curve[{i}].prior", point["prior"], _share, "a number in (0, 1]")]
        if "prior_seconds" in point:
            checks.append((f"curve[{i}].prior_seconds", point["prior_seconds"], _number, "a number"))
    for name, value, check, kind in checks:
        if value is not None and not check(value):
            return f"{name}: must be {kind}, got {value!r:.40}"
    return None


def refuse_malformed(records: Iterable[RunRecord]) -> None:
    """UserError naming the first record (its file) whose fields the page reads are malformed (:func:`record_problem`),
    before anything is written: the page's one rule for bad input."""
    for record in records:
        problem = record_problem(record)
        if problem:
            raise UserError(f"{record.run_id}.json: the class-prior page cannot read this record: {problem}; "
                            "nothing was written")


def classify(record: RunRecord) -> tuple[tuple[str, ...], str | None]:
    """(settings, estimator) of a record: its loss's prior against the label prior and the paper default."""
    if record.loss == "infonce":
        return ("baseline",), None
    prior = prior_hparam(record.loss)
    if prior is None:
        return (), None
    value = record.loss_params.get(prior.name)
    if value == "auto":
        return ("auto",), record.loss_params.get("prior_estimator")
    label_prior = record.details.get("label_prior")
    settings = []
    if label_prior is not None and math.isclose(float(value), float(label_prior), rel_tol=1e-3):
        settings.append("true")
    if math.isclose(float(value), prior.default):
        settings.append("default")
    return tuple(settings), None


def to_run(record: RunRecord, group: Group | None = None) -> Run:
    """The run of ``record``; ``group``, the experiment it was kept in, says what that group left out."""
    settings, estimator = classify(record)
    details = record.details
    prior = record.info.get("prior") or {}
    trajectory = [(float(p["epoch"]), float(p["prior"])) for p in record.curve if "prior" in p]
    return Run(domain=record.domain, dataset=record.dataset, classes=details.get("label_classes"),
               loss=record.loss, settings=settings, estimator=estimator, seed=record.seed,
               value=float(record.metrics[record.primary_metric]),
               higher_is_better=record.higher_is_better, label_prior=details.get("label_prior"),
               estimate=prior.get("final"),
               measured_share=next((record.info[k] for k in SHARE_KEYS if record.info.get(k) is not None), None),
               class_structure=details.get("class_structure"),
               trajectory=trajectory,
               estimate_seconds=[float(p["prior_seconds"]) for p in record.curve if "prior_seconds" in p],
               total_seconds=record.timings.get("total_s", 0.0), data=digest(record, DATA),
               other_data=group is not None and group.mixed_data,
               mixed_code=group is not None and group.mixed_code)


def study_runs(records: list[RunRecord]) -> tuple[list[Run], int, int]:
    """(runs, diverged, left out): the runs of ``records`` as the leaderboard pages keep them (a page must not average
    a setting's seeds over different data or code, nor count a seed run twice): per experiment, the newest code's
    records that read its newest record's data, a seed's latest record; and of those, one setting per cell
    (:func:`one_setting`). Of what is kept, the runs whose primary metric is non-finite are counted as diverged,
    not run. UserError, naming it, for a record whose fields the page reads are malformed (:func:`record_problem`).
    Left out: the records of older code, of other data, a seed's earlier run, or another setting. The
    runs keep the order of ``records`` (the figure draws its curves in it)."""
    refuse_malformed(records)
    groups = group_records(records, keep_empty=True, one_data=True, diverged=True)
    kept: dict[int, Group] = {}
    for group in groups:
        latest = {r.seed: r for r in group.records}  # oldest first: a seed's rerun replaces its earlier record
        kept.update((id(r), group) for r in latest.values())
    chosen = {id(r) for r in one_setting([r for r in records if id(r) in kept])}
    finite = [r for r in records if id(r) in chosen and r.metrics.get(r.primary_metric) is not None]
    runs = [to_run(r, kept[id(r)]) for r in finite]
    diverged = len(chosen) - len(finite)
    return runs, diverged, len(records) - len(chosen)


def one_setting(records: list[RunRecord]) -> list[RunRecord]:
    """The records the page's cells hold, one setting each: of a task, those of its newest record's preset and
    overrides (its gains pair a loss's seeds with infonce's); of a task's loss at one setting of its prior (a
    cell), those of the newest one's other hyper-parameters (the estimator's ``prior_every`` and
    ``prior_momentum``, a loss's own). The page's cells do not say which setting they hold: pooled, a seed of two
    settings counted once, and a mean mixed them."""
    def newest(key: Callable[[RunRecord], Hashable], what: Callable[[RunRecord], str],
               members: list[RunRecord]) -> list[RunRecord]:
        latest: dict[Hashable, RunRecord] = {}
        for r in sorted(members, key=lambda r: (utc_iso(r.finished_at), r.run_id)):
            latest[key(r)] = r
        return [r for r in members if what(r) == what(latest[key(r)])]

    def task(r: RunRecord) -> Hashable:
        return (r.domain, r.dataset, r.details.get("label_classes"))

    def setting(r: RunRecord) -> str:
        return json.dumps([r.preset, r.overrides], sort_keys=True, default=str)

    def cell(r: RunRecord) -> Hashable:
        return (task(r), r.loss, classify(r))

    def other_params(r: RunRecord) -> str:
        prior = prior_hparam(r.loss)
        skip = {"prior_estimator", prior.name if prior else None}
        return json.dumps({k: v for k, v in r.loss_params.items() if k not in skip}, sort_keys=True, default=str)

    return newest(cell, other_params, newest(task, setting, records))


def task_label(task: tuple[str, str, int | None]) -> str:
    domain, dataset, classes = task
    return f"{domain} / {dataset}" + (f" / C={classes}" if classes is not None else "")
