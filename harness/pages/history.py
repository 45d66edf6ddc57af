"""``harness history``: each setting's primary metric over the versions of the code that ran it.

A *setting* is what a command asks for (``harness.groups.command_key``: domain, dataset, method, loss and its
hyper-parameters, preset, overrides, primary metric); a *version* is one code (``RunRecord.code``: a source digest,
or for records written before the digest was recorded, a commit), ordered by its commit date, then by when it
last ran (an edited tree after the commit it edits). The page
``history.md`` gives, for each setting that more than one version ran, a row per version (seeds, mean ± std,
the change from the version before it) and marks a **step**: a change whose two-sided test (``harness.stats``,
paired where the later version's seeds are among the earlier's, else Welch) has a p below :data:`ALPHA` after
Holm's correction over every step on the page. The figure ``history.png`` draws each such setting's mean over
the versions with its seed spread (± one std) and the steps marked. Settings run by one version only are
counted, not drawn. A version that diverged on every seed (a non-finite primary metric) is a row that says so,
with no change measured to or from it, and a gap in the figure. A version whose seeds ran different configs or
read different data is refused (UserError), never averaged.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from domains.errors import UserError
from domains.files import write_atomic
from harness import stats
from harness.compare.sides import seeds_text
from harness.groups import (
    DATA,
    Group,
    cell,
    code_order,
    command_key,
    group_name,
    group_records,
    refuse_unsummable,
    seeds_by,
    too_large,
)
from harness.numbers import decimals, mean_std
from harness.pages import figures, generated
from harness.records import RunRecord, load_record_files
from harness.tables import Markup, escape, markdown

MARKER = generated.marker("history")
FIGURE = "history.png"
NAME = re.compile(re.escape(FIGURE))  # the link to it in a page of ours
ALPHA = 0.05


@dataclass
class Point:
    """One version of one setting."""

    group: Group
    change: stats.Change | None = None  # against the version before
    p_adjusted: float = math.nan

    @property
    def step(self) -> bool:
        return self.p_adjusted < ALPHA


def version_order(group: Group) -> tuple:
    """Where a version goes among a setting's versions: the order of :func:`harness.groups.code_order` (commit date,
    then version, then its last run, so that an edited tree comes after the commit it edits, whatever the digests),
    then the code itself (some order for a tie)."""
    return (max(code_order(group.records).values()), group.records[-1].code)


def refuse_mixed(version: Group) -> None:
    """UserError when one version's seeds of a setting ran different configs or read different data (a data set
    changed under the same code): their mean is no one experiment's, and a step to or from it means nothing."""
    for part, what in (("config", "ran different configs"), (DATA, "read different data")):
        seeds = seeds_by(version.records, part)
        if len(seeds) > 1:
            raise UserError(f"{group_name(version)}, version {version_label(version)}: its seeds {what} ("
                            + "; ".join(f"{h}: seed(s) {seeds_text(s)}" for h, s in sorted(seeds.items()))
                            + "); a version's seeds must be one experiment: rerun them alike or move the others "
                            "away; nothing was written")


def settings(records: list[RunRecord]) -> list[list[Point]]:
    """Per setting run by at least two versions, its versions in order (oldest first); UserError where a version
    mixes experiments (:func:`refuse_mixed`)."""
    by_setting: dict[str, list[RunRecord]] = {}
    for record in records:
        by_setting.setdefault(command_key(record), []).append(record)
    out = []
    for members in by_setting.values():
        versions = group_records(members, key=lambda r: r.code, keep_empty=True)
        if len(versions) > 1:
            for version in versions:
                refuse_mixed(version)
            out.append([Point(g) for g in sorted(versions, key=version_order)])
    out.sort(key=lambda points: points[-1].group.sort_key())
    return out


def refuse_unplottable(history: list[list[Point]]) -> None:
    """UserError (:func:`harness.groups.too_large`) when a setting's means ± std span more than a float holds (9e307
    then -9e307, one seed each): its axis has no finite length, where matplotlib stopped with a traceback."""
    for points in history:
        ends = [pt.group.mean + side * (pt.group.std if pt.group.n > 1 else 0.0)
                for pt in points if pt.group.values for side in (-1, 1)]
        if ends and not math.isfinite(max(ends) - min(ends)):
            group = points[-1].group
            records = [r for pt in points for r in pt.group.records]
            raise UserError(f"{too_large(group, group.primary_metric, records, 'a figure')}; nothing was written")


def test_steps(history: list[list[Point]]) -> None:
    """Each version against the one before it; Holm's correction over every step of the page."""
    tested = []
    for points in history:
        for before, point in zip(points, points[1:]):
            if not (before.group.values and point.group.values):  # a diverged version has no mean to compare
                continue
            try:
                point.change = stats.compare_values(before.group.values, point.group.values)
            except OverflowError:  # each version's values average, their differences do not (9e307, -9e307)
                records = [*before.group.records, *point.group.records]
                raise UserError(f"{too_large(point.group, point.group.primary_metric, records, 'a test')}; nothing "
                                "was written") from None
            if not math.isnan(point.change.p):
                tested.append(point)
    for point, p in zip(tested, stats.adjust([pt.change.p for pt in tested], "holm")):
        point.p_adjusted = p


def version_label(group: Group) -> str:
    return f"{group.code_label()} ({max(r.code_time() for r in group.records)[:10]})"


def version_row(point: Point) -> list[str]:
    """A version's cells; one that diverged on every seed says so (``diverged on 3 of 3 seeds``)."""
    g = point.group
    if not g.values:
        return [version_label(g), str(g.n), cell(g), "–", "–", ""]
    digits = decimals(g.mean)
    change = "–" if point.change is None else f"{point.change.change:+.{digits}f}"
    p = stats.p_text(point.p_adjusted, ALPHA)
    return [version_label(g), str(g.n), mean_std(g.mean, g.std), change, p,
            Markup("**step**") if point.step else ""]


def page(history: list[list[Point]], single: int, figure: str | None) -> str:
    steps = sum(pt.step for points in history for pt in points)
    # Holm's correction counts the changes a test could judge: one from or to a single seed has no p.
    tested = sum(pt.change is not None and not math.isnan(pt.change.p) for points in history for pt in points)
    lines = [
        MARKER, "", "# History", "",
        f"Each setting's primary metric over the versions of the code that ran it: {len(history)} settings ran with "
        f"more than one version ({single} with one only, not shown). A version is one source digest, or for records "
        "written before the digest was recorded, one commit; versions are ordered by commit date. Change: against "
        "the version before (paired where its seeds are among the earlier version's, else Welch's t-test over all "
        "seeds, two-sided). **step**: its p after Holm's correction over the "
        f"{tested} of the {sum(len(p) - 1 for p in history)} changes of this page that have one (a change from or to "
        f"a version with one seed has none) is below {ALPHA} ({steps} step{'s' * (steps != 1)}).", "",
    ]
    if any(not pt.group.values for points in history for pt in points):
        lines += ["A version that diverged on every seed (a non-finite metric) says so; no change is measured to or "
                  "from it.", ""]
    if figure:
        lines += [f"![each setting's metric over versions, ± one std over seeds]({figure})", ""]
    for points in history:
        g = points[-1].group
        title = f"{g.domain} / {g.dataset} / {g.method} / {g.loss_label()} ({g.hparams_label()}), {g.setting_label()}"
        lines += [f"## {escape(title)}", ""]
        cells = [version_row(pt) for pt in points]
        lines += [*markdown(["version (date)", "seeds", g.primary_metric, "change", "p (Holm)", ""], cells), ""]
    return "\n".join(lines)


def write_history(results: Path, out: Path) -> list[Path]:
    """history.md and history.png from the records in ``results``; UserError when no setting has two versions."""
    records = [record for _, record in load_record_files(results)]
    if not records:
        raise UserError(f"no completed records in '{results}'; nothing was written")
    history = settings(records)
    single = len({command_key(r) for r in records}) - len(history)
    if not history:
        raise UserError(f"no setting in '{results}' was run by more than one version of the code; there is no "
                        "history to show, nothing was written")
    refuse_unsummable(pt.group for points in history for pt in points)  # before a page is half written
    test_steps(history)
    refuse_unplottable(history)
    path = out / "history.md"
    figure = out / FIGURE
    generated.refuse_foreign([path], "history")
    generated.refuse_foreign([figure], "history", figures=generated.shown_figures(path, "history", NAME))
    out.mkdir(parents=True, exist_ok=True)
    series = [(f"{pts[-1].group.domain}/{pts[-1].group.dataset} {pts[-1].group.loss} "
               f"{pts[-1].group.hparams_label()}\n{pts[-1].group.setting_label()}", pts[-1].group.primary_metric,
               # a version that diverged on every seed: NaN, a gap in its line
               [(pt.group.mean if pt.group.values else math.nan, pt.group.std if pt.group.n > 1 else 0.0, pt.step)
                for pt in pts])
              for pts in history]
    drawn = figures.history_lines(series, figure)
    write_atomic(path, page(history, single, figure.name if drawn else None))
    return [path, *([figure] if drawn else [])]


def cmd_history(results: str, out: str) -> int:
    for path in write_history(Path(results), Path(out)):
        print(f"wrote {path}")
    return 0

