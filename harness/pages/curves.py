"""Learning curves of the leaderboard rows: one figure per (domain, dataset), ``curves/<domain>-<dataset>.png``
beside the pages, drawn by ``harness leaderboard`` from the records' ``curve``.

A panel per setting of the dataset's table (method, preset and overrides), a line per loss: the mean over the
row's seeds with a band from the lowest to the highest seed. What a curve can show depends on what the domain
logs during training, so each panel plots the first monitor its records have (``MONITORS``): the evaluation
return (rl, with the final evaluation of the record as its last point), the kNN monitor's top-1 (vision), the
online linear classifier's top-1 (the vision biased track), else the training loss (graph, text; on a log scale
where it stays positive, since losses differ in scale: jsd's is ten times infonce's). The x axis is
the finest count the curve has (``X_AXES``): environment steps, optimiser steps, else epochs. Evaluation-only
rows trained nothing and have no curve.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path

from harness.groups import Group
from harness.pages import figures, generated
from harness.pages.tables import latest_by_seed
from harness.records import RunRecord

FOLDER = "curves"
NAME = re.compile(rf"{FOLDER}/[A-Za-z0-9_.-]+\.png")  # a figure's link, as figure_path writes it
X_AXES = (("env_steps", "environment steps"), ("step", "optimiser steps"), ("epoch", "epoch"))
# (curve key, axis label, the record metric that is the same measurement at the end of training, if any)
MONITORS = (("eval_return", "evaluation return", "return"), ("knn_top1", "kNN top-1 (%)", None),
            ("online_top1", "online linear top-1 (%)", None), ("loss", "training loss", None))


MAX_STEM = 150  # the characters of a figure's name kept from its domain and dataset: a file name has 255 bytes


def figure_path(domain: str, dataset: str) -> str:
    """The figure's path relative to the pages (a dataset such as ``hf:org/set`` becomes a plain file name, with
    8 hex digits of the name it stands for, so that ``a b`` and ``a_b`` draw two figures, not one over the other).
    A name longer than :data:`MAX_STEM` is cut there, with the digits of the whole name: a record's dataset is any
    one line of text, and the file's name must fit the file system's limit."""
    name = f"{domain}-{dataset}"
    plain = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    if plain != name or len(plain) > MAX_STEM:
        plain = plain[:MAX_STEM] + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{FOLDER}/{plain}.png"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _has(records: list[RunRecord], key: str, *also: str) -> bool:
    return any(all(_number(p.get(k)) for k in (key, *also)) for r in records for p in r.curve)


def axes(records: list[RunRecord]) -> tuple[tuple[str, str, str | None], tuple[str, str]] | None:
    """The monitor and the x axis of a panel's records; None when no curve has a point to draw."""
    for monitor in MONITORS:
        for x in X_AXES:
            if _has(records, monitor[0], x[0]):
                return monitor, x
    return None


def points(record: RunRecord, x: str, y: str, final: str | None) -> list[tuple[float, float]]:
    """The record's (x, y) points; with ``final``, the record's final metric at the end of training as well."""
    out = [(float(p[x]), float(p[y])) for p in record.curve if _number(p.get(x)) and _number(p.get(y))]
    end = record.info.get(x)
    value = record.metrics.get(final) if final else None
    if _number(value) and _number(end) and (not out or end > out[-1][0]):
        out.append((float(end), float(value)))
    return out


def line(group: Group, x: str, y: str, final: str | None) -> figures.Line | None:
    by_x: dict[float, list[float]] = {}
    for record in latest_by_seed(group).values():
        for px, py in points(record, x, y, final):
            by_x.setdefault(px, []).append(py)
    if not by_x:
        return None
    label = group.loss_label() + ("" if group.hparams_label() == "–" else f" ({group.hparams_label()})")
    return figures.Line(label, [(px, sum(v) / len(v), min(v), max(v)) for px, v in sorted(by_x.items())])


def panels(rows: list[Group]) -> list[figures.Panel]:
    """A panel per setting of ``rows`` (in table order), a line per trained row of it."""
    settings: dict[str, list[Group]] = {}
    for group in rows:
        if group.loss_used and group.values:  # a row that diverged on every seed has no curve to average
            settings.setdefault(group.setting, []).append(group)
    out = []
    for members in settings.values():
        chosen = axes([r for g in members for r in latest_by_seed(g).values()])
        if chosen is None:
            continue
        (y, ylabel, final), (x, xlabel) = chosen
        lines = [ln for g in members if (ln := line(g, x, y, final)) is not None]
        seeds = sorted({g.n for g in members})
        title = (f"{members[0].method}, {members[0].setting_label()} "
                 f"({'/'.join(map(str, seeds))} seed{'s' * (seeds != [1])})")
        positive = all(p[2] > 0 for ln in lines for p in ln.points)
        out.append(figures.Panel(title, xlabel, ylabel + (" (log scale)" if y == "loss" and positive else ""),
                                 lines, log_y=y == "loss" and positive))
    return out


def plan(groups: list[Group]) -> dict[tuple[str, str], tuple[str, list[figures.Panel]]]:
    """The figure of each (domain, dataset) that has a curve to draw: its path relative to the pages, its panels."""
    planned = {}
    for domain, dataset in sorted({(g.domain, g.dataset) for g in groups}):
        shown = panels([g for g in groups if g.domain == domain and g.dataset == dataset])
        if shown:
            planned[(domain, dataset)] = (figure_path(domain, dataset), shown)
    return planned


def drawn_before(out: Path, command: str) -> set[Path]:
    """The figures under ``out/curves/`` that the pages of ours in ``out`` show: those the last run drew."""
    return {path for page in out.glob("*.md") for path in generated.shown_figures(page, command, NAME)}


def write_curves(planned: dict[tuple[str, str], tuple[str, list[figures.Panel]]],
                 out: Path) -> dict[tuple[str, str], str]:
    """Draw the ``planned`` figures under ``out/curves/``. Returns the relative path of each figure drawn, by
    (domain, dataset). The figures no longer drawn are removed once the pages that showed them are replaced
    (:func:`harness.pages.generated.remove_stale`): a page command stopped midway leaves no page without its figure."""
    for (domain, dataset), (path, shown) in planned.items():
        figures.curve_panels(f"{domain} / {dataset}: learning curves (line: mean over seeds; band: lowest to "
                             "highest seed)", shown, out / path)
    return {key: path for key, (path, _) in planned.items()}
