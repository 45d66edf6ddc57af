"""Grouping records for leaderboards, reports and comparisons.

A *group* is every completed record of one (domain, dataset, method, loss, loss hyper-parameters, config):
the same run but for the seed (and, where asked, the version). A *setting* is a group without its loss: the
rows a loss is compared against share it (same method, same config).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from domains.base import Domain, UserError, hash_jsonable
from harness.records import RunRecord, domain_or_none, load_record_files


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

    @property
    def key(self) -> str:
        return group_key(self.domain, self.dataset, self.method, self.loss, self.loss_params, self.config)

    @property
    def setting(self) -> str:
        """Identity of everything but the loss: rows with equal settings are comparable."""
        return hash_jsonable([self.domain, self.dataset, self.method, self.config])

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
    def sign(self) -> float:
        """+1 when higher is better: ``sign * (a - b) > 0`` means a is better than b."""
        return 1.0 if self.higher_is_better else -1.0

    def loss_label(self) -> str:
        return self.loss if self.loss_used else "none (evaluation only)"

    def hparams_label(self) -> str:
        return ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.loss_params.items())) or "–"

    def setting_label(self) -> str:
        extra = ", ".join(f"{k}={_short(v)}" for k, v in sorted(self.overrides.items()))
        return f"{self.preset} ({extra})" if extra else self.preset

    def sort_key(self) -> tuple:
        return (self.domain, self.dataset, self.method, self.setting_label(), self.setting,
                self.loss != self.baseline_loss, self.loss, json.dumps(self.loss_params, sort_keys=True))


def _short(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_short(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def version_key(version: str) -> tuple:
    try:
        return (1, Version(version), "")
    except InvalidVersion:
        return (0, Version("0"), version)


def group_key(domain: str, dataset: str, method: str, loss: str, loss_params: dict[str, Any],
              config: dict[str, Any]) -> str:
    """The identity of a group: a record's ``config`` holds only experiment fields with effective values
    (:func:`harness.records.normalize`), so runtime fields and unresolved ``auto`` values never split one."""
    return hash_jsonable([domain, dataset, method, loss, loss_params, config])


def group_records(records: Iterable[RunRecord], *, version: str | None = None) -> list[Group]:
    """Completed records grouped on everything but seed and version, sorted deterministically.

    ``version=None`` keeps, per group, only the records of the latest version present in that group;
    otherwise only the records of ``version``. A seed recorded twice keeps its latest record. The baseline loss
    is the one the domain's code names now (so records written before a method got its own baseline compare
    like new ones), the record's own field where the domain cannot be loaded.
    """
    by_key: dict[str, list[RunRecord]] = {}
    for record in records:
        if record.status != "completed" or (version is not None and record.version != version):
            continue
        key = group_key(record.domain, record.dataset, record.method, record.loss, record.loss_params, record.config)
        by_key.setdefault(key, []).append(record)
    groups = []
    loaded: dict[str, Domain | None] = {}
    for members in by_key.values():
        latest = max((r.version for r in members), key=version_key)
        members = sorted((r for r in members if r.version == latest), key=lambda r: (r.finished_at, r.run_id))
        first = members[-1]
        if first.domain not in loaded:
            loaded[first.domain] = domain_or_none(first.domain)
        dom = loaded[first.domain]
        baseline = dom.baseline_loss_for(first.method) if dom is not None else first.baseline_loss
        group = Group(
            domain=first.domain, dataset=first.dataset, method=first.method, loss=first.loss,
            loss_params=first.loss_params, preset=first.preset, overrides=first.overrides, config=first.config,
            primary_metric=first.primary_metric, higher_is_better=first.higher_is_better, baseline_loss=baseline,
            version=latest, loss_used=first.loss_used,
        )
        for record in members:
            for name, value in record.metrics.items():
                if value is None or not math.isfinite(value):
                    continue
                if name == record.primary_metric:
                    group.values[record.seed] = value
                else:
                    group.secondary.setdefault(name, {})[record.seed] = value
        if group.values:
            groups.append(group)
    return sorted(groups, key=Group.sort_key)


def completed_groups(results: Path, empty: str | None = None) -> tuple[list[Group], list[Path]]:
    """The groups of the completed records in the folder ``results``, and the record files read.

    UserError(``empty``) when there is none, by default "no completed records in '<results>'; nothing was
    written" (a page, a report or a gate built on nothing would look like a result)."""
    files = load_record_files(results)
    groups = group_records(record for _, record in files)
    if not groups:
        raise UserError(empty if empty is not None else f"no completed records in '{results}'; nothing was written")
    return groups, [path for path, _ in files]


def baseline_for(group: Group, groups: list[Group]) -> Group | None:
    """The baseline-loss group with the same setting (the one with most seeds, then default ordering); none for
    an evaluation-only group, which trained no loss to compare."""
    if not group.loss_used:
        return None
    candidates = [g for g in groups if g.setting == group.setting and g.loss == group.baseline_loss and g.loss_used]
    return max(candidates, key=lambda g: g.n, default=None)


def best(groups: list[Group]) -> list[Group]:
    """The groups with the best mean (several on a tie)."""
    if not groups:
        return []
    top = max(g.sign * g.mean for g in groups)
    return [g for g in groups if g.sign * g.mean == top]


def fmt(value: float, digits: int | None = None) -> str:
    """A metric for tables: 2 decimals from 1 to 1000, 1 above, 4 below 1."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.{decimals(value) if digits is None else digits}f}"


def decimals(value: float) -> int:
    magnitude = abs(value)
    return 1 if magnitude >= 1000 else 2 if magnitude >= 1 else 4


def cell(group: Group) -> str:
    """``mean ± std (n seeds)``."""
    digits = decimals(group.mean)
    seeds = "1 seed" if group.n == 1 else f"{group.n} seeds"
    return f"{fmt(group.mean, digits)} ± {fmt(group.std, digits)} ({seeds})"
