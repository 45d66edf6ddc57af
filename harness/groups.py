"""Grouping records for leaderboards, reports and comparisons.

A *group* is every completed record of one (domain, dataset, method, loss, loss hyper-parameters, config) and of
one code: the same run but for the seed. A *setting* is a group without its loss: the rows a loss is compared
against share it (same method, same config). Where a method's objective has config keys beyond the loss
(``Domain.method_objective_keys``: Barbano et al.'s alpha and FairKL weight), those belong to the loss's side: the
setting leaves them out, and the labels show them among the hyper-parameters.

Code never mixes silently. Of the records of one experiment, a group takes those of the **newest code**
(:func:`code_classes`): the newest source digest (``RunRecord.code``), ordered by commit date, then by when it
last ran (two edited trees of one commit). Records written
before the source digest was recorded know only their commit; they form one class per package version, older than
any digest, and a group of them whose seeds come from several commits says so (``Group.mixed_code``).

Nor does data. A record holds a fingerprint of the data it read (``RunRecord.data_fingerprint``: the files' hashes,
or a generated set's parameters); seeds of one group that read different data (another data root, another copy or
version of the data set) are no one experiment. ``harness compare`` and ``harness history`` refuse such a group;
the pages (:func:`completed_groups`) keep the seeds that read the data its newest record read and say which
groups left others out (``Group.other_data``).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from domains.base import Domain, split_config
from domains.errors import UserError
from domains.files import hash_jsonable
from harness.numbers import mean_std
from harness.records import RunRecord, domain_or_none, jsonable, load_record_files, utc_iso


@dataclass
class Group:
    """The per-seed primary-metric values of one group, with what describes it."""

    domain: str
    dataset: str
    method: str
    loss: str
    loss_params: dict[str, Any]
    preset: str
    overrides: dict[str, Any]
    config: dict[str, Any]
    primary_metric: str
    higher_is_better: bool
    baseline_loss: str
    version: str
    loss_used: bool = True  # False for evaluation-only methods (e.g. a bag-of-words baseline)
    values: dict[int, float] = field(default_factory=dict)  # seed -> primary metric
    secondary: dict[str, dict[int, float]] = field(default_factory=dict)  # metric -> seed -> value
    nonfinite: set[int] = field(default_factory=set)  # seeds whose primary metric is NaN or infinite
    halted: set[int] = field(default_factory=set)  # of those, seeds whose training diverged (failed records)
    codes: dict[str, str] = field(default_factory=dict)  # RunRecord.code -> its short label, of the members
    conflicts: dict[int, list[RunRecord]] = field(default_factory=dict)  # seed -> its records, where they disagree
    records: list[RunRecord] = field(default_factory=list, repr=False)  # the members, oldest first
    # Records of the group's code left out because they read other data than its newest record (one_data=True)
    other_data: list[RunRecord] = field(default_factory=list, repr=False)
    objective_keys: frozenset[str] = frozenset()  # config keys on the loss's side (Domain.objective_keys)
    # The values of those keys its preset gives (preset_objective); None where today's code does not know it
    preset_objective: dict[str, Any] | None = None

    @property
    def mixed_code(self) -> bool:
        """Whether the seeds come from different code (only records without a source digest can: by commit)."""
        return len(self.codes) > 1

    @property
    def mixed_data(self) -> bool:
        """Whether records of the group's code that read other data were left out of it (``other_data``)."""
        return bool(self.other_data)

    @property
    def data(self) -> frozenset[str]:
        """The digests of the data its members read (:func:`digest`): one, unless its seeds read different data."""
        return frozenset(digest(r, DATA) for r in self.records)

    def code_label(self) -> str:
        labels = sorted(set(self.codes.values()))
        return labels[0] if len(labels) == 1 else f"{len(labels)} commits ({', '.join(labels)})"

    @property
    def key(self) -> str:
        return group_key(self.domain, self.dataset, self.method, self.loss, self.loss_params, self.config)

    @property
    def setting(self) -> str:
        """Identity of everything but the loss and its objective: rows with equal settings are comparable."""
        config = {k: v for k, v in self.config.items() if k not in self.objective_keys}
        return hash_jsonable([self.domain, self.dataset, self.method, config])

    @property
    def objective(self) -> dict[str, Any]:
        """The config's values of the objective's keys (empty where the method has none)."""
        return {k: v for k, v in sorted(self.config.items()) if k in self.objective_keys}

    @property
    def default_objective(self) -> bool | None:
        """Whether the row runs its preset's objective (an override may set a key to the preset's own value);
        None where that is not known (the domain or the preset is not known to today's code)."""
        return None if self.preset_objective is None else self.objective == self.preset_objective

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values.values())

    @property
    def std(self) -> float:
        return statistics.stdev(self.values.values()) if len(self.values) > 1 else math.nan

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def runs(self) -> int:
        """The seeds that ran: those with a finite primary metric and those without (``nonfinite``)."""
        return len(self.values) + len(self.nonfinite)

    @property
    def sign(self) -> float:
        """+1 when higher is better: ``sign * (a - b) > 0`` means a is better than b."""
        return 1.0 if self.higher_is_better else -1.0

    def loss_label(self) -> str:
        return self.loss if self.loss_used else "none (evaluation only)"

    def hparams_label(self) -> str:
        """The loss's hyper-parameters and the objective's overrides (the rest of the objective is the preset's)."""
        params = {**self.loss_params, **{k: v for k, v in self.overrides.items() if k in self.objective_keys}}
        return ", ".join(f"{k}={_short(v)}" for k, v in sorted(params.items())) or "–"

    def setting_label(self) -> str:
        extra = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.overrides.items())
                          if k not in self.objective_keys)
        return f"{self.preset} ({extra})" if extra else self.preset

    def sort_key(self) -> tuple:
        return (self.domain, self.dataset, self.method, self.setting_label(), self.setting,
                json.dumps(self.objective, sort_keys=True, default=str), self.loss != self.baseline_loss, self.loss,
                json.dumps(self.loss_params, sort_keys=True))


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_short(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def version_key(version: str) -> tuple:
    try:
        return (1, Version(version), "")
    except InvalidVersion:
        return (0, Version("0"), version)


DATA = "data_fingerprint"  # the record's field that says what data it read


def digest(record: RunRecord, part: str) -> str:
    """A short digest of a record's ``part``: ``config``, or :data:`DATA` (the data it read). Two records of one
    group with different digests ran different configs or read different data."""
    return hash_jsonable(getattr(record, part))[:12]


def seeds_by(records: Iterable[RunRecord], part: str) -> dict[str, list[int]]:
    """The seeds of ``records`` by the :func:`digest` of their ``part``; more than one key where they differ."""
    seeds: dict[str, list[int]] = {}
    for record in records:
        seeds.setdefault(digest(record, part), []).append(record.seed)
    return seeds


def code_class(record: RunRecord) -> str:
    """The code a group may not mix: the source digest, or for a record without one its package version."""
    return record.code if record.code.startswith("src:") else f"version:{record.version}"


def code_order(records: Iterable[RunRecord]) -> dict[str, tuple]:
    """Each code class of ``records`` and the key that orders it (:func:`code_classes`); two classes with equal
    keys cannot be told apart in time. A class's time is its commit date where one of its records knows it, its
    records' finish time only where none does: a copy of a commit's tree without ``.git`` (as the GPU machine
    runs) records no date, and its later runs must not make that code newer than a commit made after it."""
    records = list(records)
    dated: dict[str, str] = {}
    for record in records:
        if record.commit_date:
            cls = code_class(record)
            dated[cls] = max(dated.get(cls, ""), record.code_time())
    newest: dict[str, tuple] = {}
    for record in records:
        cls = code_class(record)
        key = (cls.startswith("src:"), dated.get(cls, record.code_time()), version_key(record.version),
               utc_iso(record.finished_at))
        newest[cls] = max(newest.get(cls, key), key)
    return newest


def code_classes(records: Iterable[RunRecord]) -> list[str]:
    """The code classes of ``records``, newest last: digests after versions without one, then by the newest
    commit date among their records (else, where none knows it, finish time; both in UTC), then by version, then
    by the last finish time (two edited trees of one commit share its date and version: the one run last is the
    newer), then by the class itself (a page must pick one; ``harness compare`` refuses such a tie)."""
    newest = code_order(records)
    return sorted(newest, key=lambda c: (newest[c], c))


def group_key(domain: str, dataset: str, method: str, loss: str, loss_params: dict[str, Any],
              config: dict[str, Any]) -> str:
    """The identity of a group: a record's ``config`` holds only experiment fields with effective values
    (:func:`harness.records.normalize`), so runtime fields and unresolved ``auto`` values never split one."""
    return hash_jsonable([domain, dataset, method, loss, loss_params, config])


def command_key(record: RunRecord) -> str:
    """What a command asked for, not how the code resolved it (domain, dataset, method, loss and its
    hyper-parameters, preset, overrides, primary metric): a changed default keeps the key."""
    return hash_jsonable([record.domain, record.dataset, record.method, record.loss, record.loss_params,
                          record.preset, record.overrides, record.primary_metric, record.higher_is_better])


def record_key(record: RunRecord) -> str:
    return group_key(record.domain, record.dataset, record.method, record.loss, record.loss_params, record.config)


def group_of(members: list[RunRecord], domains: dict[str, Domain | None], other_data: list[RunRecord] | None = None
             ) -> Group:
    """The group of ``members`` (sorted oldest first, of one code), named by the newest of them, without values
    (the caller reads them). The baseline loss is the one the domain's code names now (so records written before a
    method got its own baseline compare like new ones), the record's own field where the domain cannot be loaded;
    ``domains`` caches the domains loaded so far."""
    newest = members[-1]
    if newest.domain not in domains:
        domains[newest.domain] = domain_or_none(newest.domain)
    dom = domains[newest.domain]
    return Group(
        domain=newest.domain, dataset=newest.dataset, method=newest.method, loss=newest.loss,
        loss_params=newest.loss_params, preset=newest.preset, overrides=newest.overrides, config=newest.config,
        primary_metric=newest.primary_metric, higher_is_better=newest.higher_is_better,
        baseline_loss=dom.baseline_loss_for(newest.method) if dom is not None else newest.baseline_loss,
        version=max((r.version for r in members), key=version_key), loss_used=newest.loss_used, records=members,
        other_data=other_data or [], codes={r.code: r.code_label() for r in members},
        objective_keys=dom.objective_keys(newest.method) if dom is not None else frozenset(),
        preset_objective=preset_objective(dom, newest.preset, newest.method) if dom is not None else None,
    )


def preset_objective(dom: Domain, preset: str, method: str) -> dict[str, Any] | None:
    """The values of ``method``'s objective keys (``Domain.objective_keys``) that ``preset`` runs, as a record's
    config holds them (its experiment part, JSON values: :func:`domains.base.split_config`); None for a preset
    today's code does not know. Unresolved: no objective key takes an ``auto`` value, and if one did, a row would
    only fail to match its preset here (:func:`baseline_for` then keeps the nearest-objective rule)."""
    if preset not in dom.presets:
        return None
    experiment = split_config(dom.config_class(**dom.presets[preset].overrides))[0]
    keys = dom.objective_keys(method)
    return {k: v for k, v in sorted(jsonable(experiment).items()) if k in keys}


def group_records(records: Iterable[RunRecord], *, key: Callable[[RunRecord], str] = record_key,
                  keep_empty: bool = False, one_data: bool = False, diverged: bool = False) -> list[Group]:
    """Completed records grouped on ``key`` (by default everything but seed and code), sorted deterministically.

    Per group only the records of the newest code class are kept (:func:`code_classes`). A seed recorded twice
    keeps its latest record; where the two disagree on the primary metric, ``Group.conflicts`` holds both (a gate
    must not choose between them). ``keep_empty`` keeps groups whose seeds are all non-finite (a gate must see them).
    ``one_data`` keeps, of those, the records that read the data the newest one read (:data:`DATA`), the others in
    ``Group.other_data`` (a page shows one data set's mean and says so); without it a group holds every data its
    code read, for a gate to refuse. ``diverged`` takes in a failed run whose training diverged
    (``RunRecord.diverged``) as a seed whose metric is not finite, as the pages count it (a gate judges failed seeds
    its own way). Each group's fields: :func:`group_of`.
    """
    by_key: dict[str, list[RunRecord]] = {}
    for record in records:
        if (record.has_result if diverged else record.status == "completed"):
            by_key.setdefault(key(record), []).append(record)
    groups = []
    loaded: dict[str, Domain | None] = {}
    for members in by_key.values():
        newest = code_classes(members)[-1]
        members = sorted((r for r in members if code_class(r) == newest),
                         key=lambda r: (utc_iso(r.finished_at), r.run_id))
        other: list[RunRecord] = []
        if one_data:
            data = digest(members[-1], DATA)
            other = [r for r in members if digest(r, DATA) != data]
            members = [r for r in members if digest(r, DATA) == data]
        group = group_of(members, loaded, other_data=other)
        seen: dict[int, RunRecord] = {}
        for record in members:
            earlier = seen.get(record.seed)
            if earlier is not None and earlier.metrics.get(record.primary_metric) != \
                    record.metrics.get(record.primary_metric):
                group.conflicts.setdefault(record.seed, [earlier]).append(record)
            seen[record.seed] = record
            group.values.pop(record.seed, None)
            group.nonfinite.discard(record.seed)
            group.halted.discard(record.seed)
            if record.metrics.get(record.primary_metric) is None:
                group.nonfinite.add(record.seed)
            if record.status == "failed":
                group.halted.add(record.seed)
            for name, value in record.metrics.items():
                if value is None or not math.isfinite(value):
                    continue
                if name == record.primary_metric:
                    group.values[record.seed] = value
                else:
                    group.secondary.setdefault(name, {})[record.seed] = value
        if group.values or keep_empty:
            groups.append(group)
    return sorted(groups, key=Group.sort_key)


def completed_groups(results: Path, empty: str | None = None) -> tuple[list[Group], list[Path]]:
    """The groups of the completed records in the folder ``results``, and the record files read, for the pages,
    with the failed runs whose training diverged as seeds whose metric is not finite (``RunRecord.diverged``). A
    group whose every seed is non-finite is kept: a page must show that those runs diverged, not drop them. A group
    holds the seeds that read its newest record's data (``one_data``): a page never averages different data, and
    marks the groups that left seeds out (``Group.other_data``).

    UserError(``empty``) when there is none, by default "no completed records in '<results>'; nothing was
    written" (a page, a report or a gate built on nothing would look like a result); and when no group has a
    finite primary metric, one that says so."""
    files = [(path, record) for path, record in load_record_files(results, completed_only=False) if record.has_result]
    groups = group_records((record for _, record in files), keep_empty=True, one_data=True, diverged=True)
    if not groups:
        raise UserError(empty if empty is not None else f"no completed records in '{results}'; nothing was written")
    if not any(g.values for g in groups):
        runs, halted = sum(g.runs for g in groups), sum(len(g.halted) for g in groups)
        metrics = " or ".join(sorted({g.primary_metric for g in groups}))
        what = (f"{runs} records ({halted} of runs whose training diverged)" if halted else
                f"{runs} completed record{'s' * (runs != 1)}")
        raise UserError(f"{what} in '{results}', none with a finite {metrics} (every run diverged); nothing was "
                        "written")
    refuse_unsummable(groups)
    return groups, [path for path, _ in files]


def group_name(g: Group) -> str:
    """How a message names a group: its domain, dataset, method, loss, hyper-parameters and setting."""
    return f"{g.domain} / {g.dataset} / {g.method} / {g.loss} ({g.hparams_label()}, {g.setting_label()})"


def too_large(g: Group, what: str, records: Iterable[RunRecord], computing: str = "a mean") -> str:
    """The refusal of ``g``'s ``what`` values (a metric, ``timings.total_s``) that are finite but too large to
    compute ``computing`` with (their sum overflows), naming the ``records`` they came from: the pages'
    (:func:`refuse_unsummable`) and compare's words for one problem."""
    ids = sorted({r.run_id for r in records})
    shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
    return (f"{group_name(g)}: its {what} values are too large to compute {computing} with; check the records' "
            f"values (records {shown})")


def refuse_unsummable(groups: Iterable[Group]) -> None:
    """UserError (:func:`too_large`) when a group's primary or secondary metric or its runs' ``timings.total_s``
    are finite but too large to average (1e308 on every seed: the sum overflows), as compare refuses such values:
    a page would fail midway on them, after writing some of its files."""
    for g in groups:
        runs = [r.timings["total_s"] for r in g.records if "total_s" in r.timings]
        secondary = [(m, list(v.values())) for m, v in sorted(g.secondary.items())]
        for what, values in [(g.primary_metric, list(g.values.values())), *secondary, ("timings.total_s", runs)]:
            if not summable(values):
                raise UserError(f"{too_large(g, what, g.records)}; nothing was written")


def summable(values: list[float]) -> bool:
    """Whether the mean and the standard deviation of ``values`` can be computed: the sum of finite values too
    large (1e308 on every seed) overflows."""
    try:
        if values:
            statistics.fmean(values)
        if len(values) > 1:
            statistics.stdev(values)
    except OverflowError:
        return False
    return True


def baseline_for(group: Group, groups: list[Group]) -> Group | None:
    """The baseline-loss group with the same setting: of several, the one whose objective differs from the
    group's in the fewest keys (none: the same config), then the one with most seeds, then default ordering; none
    for an evaluation-only group, which trained no loss to compare. A group of the baseline loss that runs another
    objective than its preset's is measured against the baseline loss's group that runs the preset's (the most
    seeds, then default ordering), where one ran: nearest, it would be its own baseline, and the change its
    objective makes would show nowhere on the page."""
    if not group.loss_used:
        return None
    candidates = [g for g in groups if g.setting == group.setting and g.loss == group.baseline_loss and g.loss_used]
    if group.loss == group.baseline_loss and group.default_objective is False:
        presets = [g for g in candidates if g.default_objective]
        if presets:
            return max(presets, key=lambda g: g.n)
    return max(candidates, key=lambda g: (-objective_distance(g, group), g.n), default=None)


def objective_distance(a: Group, b: Group) -> int:
    """How many of the objective's keys two groups of one setting set to different values."""
    return sum(a.objective.get(k) != b.objective.get(k) for k in a.objective.keys() | b.objective.keys())


def best(groups: list[Group]) -> list[Group]:
    """The groups with the best mean (several on a tie)."""
    if not groups:
        return []
    top = max(g.sign * g.mean for g in groups)
    return [g for g in groups if g.sign * g.mean == top]


def cell(group: Group) -> str:
    """``mean ± std (n seeds)``; where seeds diverged (a non-finite primary metric), how many of them ran:
    ``mean ± std (1 of 3 seeds; 2 non-finite)``, or ``diverged on 3 of 3 seeds`` where none is finite."""
    ran = "1 seed" if group.runs == 1 else f"{group.runs} seeds"
    if not group.values:
        return f"diverged on {group.runs} of {ran}"
    seeds = f"{group.n} of {ran}; {len(group.nonfinite)} non-finite" if group.nonfinite else ran
    return f"{mean_std(group.mean, group.std)} ({seeds})"
