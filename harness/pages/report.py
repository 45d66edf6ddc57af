"""``harness report``: the cross-modality comparison of losses.

A *task* is one (domain, dataset, method, setting) with at least two losses; each loss enters a task with its best
hyper-parameter setting there. Per loss, per domain and overall: the mean rank (1 = best, ties averaged), the win
rate against the task's baseline loss, and the mean relative improvement over it, ``sign · (loss − baseline) /
|baseline|`` in percent, where the baseline is the baseline loss's row the domain pages take the loss's row's Δ
against (``harness.groups.baseline_for``: of several, the nearest objective). A Friedman test
(scipy.stats.friedmanchisquare) over a set of ≥3 losses sharing ≥2 tasks (found greedily: not always the largest),
decided by Iman and Davenport's F from its χ² (Demšar 2006: the χ² test is conservative at few tasks), with the
Nemenyi critical difference drawn as a CD diagram; the page and the diagram name the domains and datasets that block
covers, which may be fewer than the report's. A figure of the relative improvement per domain (a panel each, the
seed spread as error bars, a symmetric-log axis so a run at chance does not hide the others); written to
``report.md`` with the PNG figures beside it. A loss that diverged on every seed of a task (a non-finite primary
metric) ranks last there and loses to the baseline rather than vanish from it; the page lists the rows with
non-finite seeds.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from filelock import FileLock
from scipy import stats

from domains.base import counted
from domains.errors import UserError
from domains.files import refuse_link, write_atomic
from harness.groups import Group, baseline_for, completed_groups
from harness.pages import figures, generated
from harness.pages.tables import MIXED, MIXED_WHY, OTHER_CODE, code_note, other_code
from harness.stats import p_text
from harness.tables import bullet, escape, markdown

MARKER = generated.marker("report")
CD_PNG, BARS_PNG = "report_cd.png", "report_improvement.png"
FIGURES = re.compile(f"{re.escape(CD_PNG)}|{re.escape(BARS_PNG)}")  # the links to them in a report of ours
ALPHA = 0.05
FEW_SEEDS = "°"  # a comparison with a row of fewer than MIN_SEEDS seeds
MIN_SEEDS = 3
MARKS = (OTHER_CODE, MIXED, FEW_SEEDS)  # in the order a cell shows them


@dataclass
class Task:
    domain: str
    dataset: str
    label: str
    baseline_loss: str
    sign: float
    values: dict[str, float] = field(default_factory=dict)  # loss -> mean primary metric (best hyper-parameters)
    seeds: dict[str, dict[int, float]] = field(default_factory=dict)  # loss -> its per-seed values there
    diverged: set[str] = field(default_factory=set)  # losses that ran here but diverged on every seed
    rows: dict[str, Group] = field(default_factory=dict, repr=False)  # loss -> the row it enters with
    # loss (not the baseline loss) -> the baseline loss's row its row is compared with, as on the domain pages
    # (harness.groups.baseline_for): of several, not always the one the baseline loss enters with
    bases: dict[str, Group] = field(default_factory=dict, repr=False)

    @property
    def losses(self) -> list[str]:
        """Every loss that ran in the task, finite or diverged."""
        return sorted({*self.values, *self.diverged})

    def score(self, loss: str) -> float:
        """The loss's mean in the better direction (higher is better); -inf for a loss that diverged."""
        return self.sign * self.values[loss] if loss in self.values else -math.inf

    def ranks(self, among: list[str] | None = None) -> dict[str, float]:
        """1 for the best loss (ties averaged); losses that diverged share the last ranks."""
        names = sorted(among if among is not None else self.losses)
        ranked = stats.rankdata([-self.score(n) for n in names])
        return dict(zip(names, map(float, ranked)))

    def beats_baseline(self, loss: str) -> bool | None:
        """Whether ``loss`` did better than the task's baseline: by its relative improvement where both are
        finite; a loss that diverged loses, and one that did not beats a baseline row (``bases``) that diverged.
        None where there is nothing to compare (no baseline, the baseline itself, or a baseline mean of 0)."""
        if loss == self.baseline_loss or self.baseline_loss not in self.losses or loss not in self.losses:
            return None
        if loss in self.diverged:
            return False
        base = self.bases.get(loss)
        if base is not None and not base.values:
            return True
        relative = self.relative(loss)
        return None if relative is None else relative > 0

    def relative(self, loss: str) -> float | None:
        """100 · sign · (loss − baseline) / |baseline|, the baseline being the mean of the row ``bases`` holds."""
        base = self.bases.get(loss)
        if base is None or not base.values or base.mean == 0 or loss not in self.values:
            return None
        return 100.0 * self.sign * (self.values[loss] - base.mean) / abs(base.mean)

    def seed_spread(self, loss: str) -> float | None:
        """The std over seeds of the per-seed relative improvement, 100 · sign · (value_s − baseline) / |baseline|
        (the baseline's mean); None where ``relative`` is, or with one seed."""
        values = list(self.seeds.get(loss, {}).values())
        if self.relative(loss) is None or len(values) < 2:
            return None
        base = abs(self.bases[loss].mean)
        return statistics.stdev(100.0 * self.sign * v / base for v in values)

    def marks(self, loss: str) -> str:
        """What weakens the comparison of ``loss`` with the baseline, as the domain pages mark it: rows of other
        code (‖), a row pooled from several commits (‡), a row of fewer than :data:`MIN_SEEDS` seeds (°)."""
        row, base = self.rows.get(loss), self.bases.get(loss)
        if row is None or base is None or not base.values:
            return ""
        found = {OTHER_CODE: other_code(row, base), MIXED: row.mixed_code or base.mixed_code,
                 FEW_SEEDS: min(row.n, base.n) < MIN_SEEDS}
        return "".join(mark for mark in MARKS if found[mark])


def build_tasks(groups: list[Group]) -> list[Task]:
    tasks: dict[str, Task] = {}
    for g in groups:
        if not g.loss_used:  # evaluation-only rows rank no loss
            continue
        task = tasks.setdefault(g.setting, Task(g.domain, g.dataset, task_label(g), g.baseline_loss, g.sign))
        if not g.values:
            task.diverged.add(g.loss)
        elif g.loss not in task.values or g.sign * g.mean > g.sign * task.values[g.loss]:
            task.values[g.loss] = g.mean
            task.seeds[g.loss] = dict(g.values)
            task.rows[g.loss] = g
    for task in tasks.values():  # a loss with a finite setting of its hyper-parameters enters with it
        task.diverged -= set(task.values)
        # Its row is compared with the baseline loss's row its domain page takes its Δ against: the baseline
        # loss's best row may run another objective (text's objective=authors, vision's fairkl_lambda).
        task.bases = {loss: base for loss, row in task.rows.items()
                      if loss != task.baseline_loss and (base := baseline_for(row, groups)) is not None}
    # A task with one loss compares nothing; it would only hand that loss a rank of 1.
    return sorted((t for t in tasks.values() if len(t.losses) >= 2), key=lambda t: t.label)


def task_label(group: Group) -> str:
    return f"{group.domain}/{group.dataset}/{group.method}/{group.setting_label()}"


@dataclass
class Summary:
    loss: str
    tasks: int
    mean_rank: float
    relative: list[float]  # relative improvement over the baseline, one per task where both are finite
    wins: list[bool]  # whether it beat the baseline, one per task that has one (Task.beats_baseline)
    marked: list[str] = field(default_factory=list)  # Task.marks of each task of ``relative`` that has any

    @property
    def win_rate(self) -> float | None:
        return sum(self.wins) / len(self.wins) if self.wins else None

    @property
    def mean_relative(self) -> float | None:
        return statistics.fmean(self.relative) if self.relative else None


def summarise(tasks: list[Task]) -> list[Summary]:
    """One summary per loss, sorted by mean rank."""
    ranks = [t.ranks() for t in tasks]
    rows = []
    for loss in sorted({name for t in tasks for name in t.losses}):
        mine = [r[loss] for r in ranks if loss in r]
        compared = [t for t in tasks if t.relative(loss) is not None]
        rel = [t.relative(loss) for t in compared]
        wins = [x for t in tasks if (x := t.beats_baseline(loss)) is not None]
        marked = [m for t in compared if (m := t.marks(loss))]
        rows.append(Summary(loss, len(mine), statistics.fmean(mine), rel, wins, marked))
    return sorted(rows, key=lambda r: (r.mean_rank, r.loss))


def friedman_block(tasks: list[Task]) -> tuple[list[str], list[Task]]:
    """Losses (≥3) that share ≥2 tasks, and those tasks: drop the least covered loss until the rest do (greedy:
    not always the largest such set); else empty."""
    losses = sorted({name for t in tasks for name in t.losses})
    while len(losses) >= 3:
        shared = [t for t in tasks if all(name in t.losses for name in losses)]
        if len(shared) >= 2:
            return losses, shared
        coverage = {name: sum(name in t.losses for t in tasks) for name in losses}
        losses.remove(min(losses, key=lambda n: (coverage[n], n)))
    return [], []


def nemenyi_cd(k: int, n: int, alpha: float = ALPHA) -> float:
    """Critical difference of mean ranks: q_alpha · sqrt(k (k+1) / (6 n)), q from the studentized range."""
    q = stats.studentized_range.ppf(1 - alpha, k, np.inf) / math.sqrt(2)
    return float(q * math.sqrt(k * (k + 1) / (6 * n)))


def iman_davenport(chi2: float, n: int, k: int) -> tuple[float, float]:
    """Iman and Davenport's F = (N - 1) χ²_F / (N (k - 1) - χ²_F) from Friedman's χ²_F over N tasks and k losses,
    and its p on k - 1 and (k - 1)(N - 1) degrees of freedom: Demšar (2006) prefers it to the χ² test, which is
    conservative at few tasks. χ²_F is at most N (k - 1), reached where every task ranks the losses alike: F is
    infinite there and p = 0 (rounding can leave χ²_F a hair either side, a huge or a negative F)."""
    room = n * (k - 1) - chi2
    if room <= 1e-9 * n * (k - 1):
        return math.inf, 0.0
    f = (n - 1) * chi2 / room
    return f, float(stats.f.sf(f, k - 1, (k - 1) * (n - 1)))


def _table(rows: list[Summary]) -> list[str]:
    cells = []
    for r in rows:
        win = "–" if r.win_rate is None else f"{100 * r.win_rate:.0f}% ({len(r.wins)})"
        gain = "–" if r.mean_relative is None else f"{r.mean_relative:+.2f}%"
        found = "".join(r.marked)
        marked = "–" if not r.relative else f"{len(r.marked)} of {len(r.relative)}" + (
            f" ({''.join(m for m in MARKS if m in found)})" if found else "")
        cells.append([r.loss, str(r.tasks), f"{r.mean_rank:.2f}", win, gain, marked])
    return markdown(["loss", "tasks", "mean rank", "win rate vs baseline (tasks)", "mean relative improvement",
                     "marked comparisons"], cells)


def marks_legend(tasks: list[Task]) -> list[str]:
    """The legend of the marks the page shows (after a relative improvement, and in the task list); nothing where
    it shows none."""
    shown = "".join(t.marks(loss) for t in tasks for loss in t.losses)
    notes = {OTHER_CODE: code_note(True),
             MIXED: f"{MIXED} marks one with a row whose seeds come from {MIXED_WHY}.",
             FEW_SEEDS: f"{FEW_SEEDS} marks one with a row of fewer than {MIN_SEEDS} seeds: one seed has no spread, "
                        "and against a baseline near chance (a small |baseline|) a relative improvement is large "
                        "by construction."}
    found = [notes[mark] for mark in MARKS if mark in shown]
    if not found:
        return []
    return ["**Marked comparisons:** of the tasks behind a mean relative improvement, how many compare the loss's "
            "row with the baseline's where the domain pages mark one of them, and with which marks; the task list "
            "below marks each. " + " ".join(found), ""]


def task_losses(task: Task) -> list[str]:
    """Each loss of ``task`` with its seeds and, against the baseline, the marks of :meth:`Task.marks`; the
    baseline loss's row it is compared with where that is not the row the baseline loss enters with."""
    out = []
    for name in task.losses:
        if name in task.diverged:
            out.append(f"{name} (diverged)")
            continue
        role = "baseline, " if name == task.baseline_loss else ""
        base = task.bases.get(name)
        other = base is not None and base is not task.rows.get(task.baseline_loss)
        against = f", against {base.loss} ({base.hparams_label()})" if other else ""
        out.append(f"{name} ({role}{counted(task.rows[name].n, 'seed')}{task.marks(name)}{against})")
    return out


def coverage(tasks: list[Task]) -> str:
    """The domains and datasets of ``tasks``: "graph (DD, MUTAG), vision (digits)"."""
    domains = sorted({t.domain for t in tasks})
    return ", ".join(f"{d} ({', '.join(sorted({t.dataset for t in tasks if t.domain == d}))})" for d in domains)


def improvements(tasks: list[Task], domain: str) -> list[figures.Improvement]:
    """Per loss of ``domain`` (sorted), its relative improvement and seed spread in each task with a baseline."""
    mine = [t for t in tasks if t.domain == domain]
    rows = []
    for loss in sorted({name for t in mine for name in t.values}):
        with_base = [t for t in mine if t.relative(loss) is not None]
        if with_base:
            rows.append(figures.Improvement(loss, [t.relative(loss) for t in with_base],
                                            [t.seed_spread(loss) for t in with_base]))
    return rows


def row_label(group: Group) -> str:
    """A row of a task as the report's notes name it: the task, the loss and its hyper-parameters where it has
    any, escaped."""
    params = group.hparams_label()
    return f"{escape(task_label(group))}: {escape(group.loss)}{'' if params == '–' else f' ({escape(params)})'}"


def nonfinite_lines(groups: list[Group]) -> list[str]:
    """The note on the seeds whose primary metric was NaN or infinite (diverged), with the rows that have them;
    nothing where there is none."""
    rows = [g for g in groups if g.loss_used and g.nonfinite]
    if not rows:
        return []
    items = [bullet(f"{row_label(g)}, {len(g.nonfinite)} of {g.runs} seeds non-finite") for g in rows]
    return [f"**Non-finite seeds.** {sum(len(g.nonfinite) for g in rows)} runs ended with a NaN or infinite primary "
            "metric (diverged). A loss that diverged on every seed of a task (at each of its hyper-parameter "
            "settings there) ranks last in it (ties averaged) and loses to the baseline (a baseline that diverged "
            "loses to every other loss); it has no relative improvement there. A loss that diverged on some seeds "
            "enters with the mean of its finite seeds, which flatters it. The rows with non-finite seeds:", "",
            *items, ""]


def data_lines(groups: list[Group], tasks: list[Task]) -> list[str]:
    """The note on the rows of the tasks that left seeds on other data out (``Group.other_data``) and on the tasks
    whose losses read different data; nothing where there is neither."""
    labels = {t.label for t in tasks}
    rows = [g for g in groups if g.loss_used and task_label(g) in labels]
    data: dict[str, set[frozenset[str]]] = {}
    for g in rows:
        data.setdefault(task_label(g), set()).add(g.data)
    partial = [g for g in rows if g.mixed_data]
    mixed = sorted(label for label, digests in data.items() if len(digests) > 1)
    if not partial and not mixed:
        return []
    lines = ["**Seeds on other data.** The seeds of a row that read other data than its newest record (their "
             "records' data fingerprints differ: another data root, or another copy or version of the data set) "
             "are left out of its mean, which is over one data set, as `harness compare` and `harness history` "
             "refuse to average them. Tasks whose losses read different data rank and compare the data's effect "
             "as well as the losses'.", ""]
    lines += [bullet(f"{row_label(g)}, {len({r.seed for r in g.other_data})} seeds on other data left out")
              for g in partial]
    lines += [bullet(f"{escape(label)}: its losses read different data") for label in mixed]
    return [*lines, ""]


def write_report(results: Path, out: Path) -> Path:
    groups, _ = completed_groups(results)
    tasks = build_tasks(groups)
    if not tasks:  # a page of no comparison would look like a report
        raise UserError(f"no task in '{results}' has records of two losses (one domain, dataset, method and "
                        "setting): nothing to compare; nothing was written")
    domains = sorted({t.domain for t in tasks})
    names = escape(", ".join(domains)) or "none"
    lines = [
        MARKER, "", "# Cross-modality report", "",
        f"{len(tasks)} tasks over {len(domains)} domains ({names}). A task is one (domain, "
        "dataset, method, setting) with at least two losses; each loss enters a task with its best hyper-parameter "
        "setting there, which favours losses that have hyper-parameters. Mean rank: 1 is the best loss of a task "
        "(ties averaged); a task of k losses ranks them 1 to k, so a mean rank over tasks of other sizes does not "
        "compare losses that ran on different tasks (the Friedman test below compares them on tasks they share). "
        "Win rate and relative improvement are against the baseline loss in the same task (the "
        "method's own where it has one, else the domain's), its row that the loss's row takes its Δ against on "
        "the domain's page (where a method's objective has keys beyond the loss, the row nearest in them; the "
        "task list names it where it is not the row the baseline loss enters with); a tie with the baseline is no "
        "win; relative improvement = (loss − baseline) / |baseline| in the better direction, in percent.", "",
        *nonfinite_lines(groups),
        *data_lines(groups, tasks),
    ]
    lines += ["## Overall", "", *_table(summarise(tasks)), "", *marks_legend(tasks)]
    lines += ["## Per domain", ""]
    for domain in domains:
        lines += [f"### {escape(domain)}", "", *_table(summarise([t for t in tasks if t.domain == domain])), ""]
    lines += ["## Friedman test and critical difference", ""]
    block_losses, block = friedman_block(tasks)
    per_domain = {d: improvements(tasks, d) for d in domains}
    bars = any(per_domain.values())
    path = out / "report.md"
    drawn = {out / name for name, draw in ((CD_PNG, bool(block)), (BARS_PNG, bars)) if draw}
    previous = generated.shown_figures(path, "report", FIGURES)
    generated.refuse_foreign([path], "report")
    generated.refuse_foreign(sorted(drawn), "report", figures=previous)
    out.mkdir(parents=True, exist_ok=True)
    refuse_link(out / ".report.lock", out)  # a lock file that is a link could point anywhere
    with FileLock(str(out / ".report.lock")):
        if block:
            matrix = [[t.score(name) for t in block] for name in block_losses]
            chi2, chi2_p = stats.friedmanchisquare(*matrix)
            f, p = iman_davenport(float(chi2), len(block), len(block_losses))
            df = (len(block_losses) - 1, (len(block_losses) - 1) * (len(block) - 1))
            mean_ranks = np.mean([[t.ranks(block_losses)[n] for n in block_losses] for t in block], axis=0)
            cd = nemenyi_cd(len(block_losses), len(block))
            covered = coverage(block)
            figures.cd_diagram(dict(zip(block_losses, map(float, mean_ranks))), cd, out / CD_PNG,
                               f"Mean ranks over the {len(block)} tasks where all {len(block_losses)} losses have "
                               f"records: {covered}")
            left = sorted({t.domain for t in tasks} - {t.domain for t in block})
            lines += [f"Friedman test (scipy.stats.friedmanchisquare) over {len(block_losses)} losses "
                      f"({escape(', '.join(block_losses))}) on the {len(block)} tasks where all have records: "
                      f"χ² = {chi2:.3f}, p = {p_text(chi2_p, ALPHA)}. Iman and Davenport's F from it decides, as "
                      "Demšar (2006) recommends (the χ² test is conservative at few tasks): "
                      f"F = {f:.3f} on {df[0]} and {df[1]} degrees of freedom, p = {p_text(p, ALPHA)}. "
                      f"Nemenyi critical difference at α = {ALPHA}: CD = {cd:.3f} (mean ranks closer than CD are "
                      "joined by a bar)."
                      + ("" if p < ALPHA else " The Iman-Davenport test does not reject that the losses rank alike (p "
                         f"≥ {ALPHA}), so by Demšar's procedure no pair differs; the diagram shows the mean ranks.")
                      , "",
                      f"**What it covers:** {escape(covered)}"
                      + (f"; no task of {escape(', '.join(left))} has records of all of them."
                         if left else ".") + " The tables above rank every task; this test only these.", "",
                      f"![critical difference diagram]({CD_PNG})", ""]
        else:
            lines += ["Too few tasks for a Friedman test: it needs at least 3 losses that share at least 2 tasks.", ""]
        lines += ["## Relative improvement per domain", ""]
        if bars:
            figures.improvement_panels(per_domain, out / BARS_PNG)
            lines += ["One panel per domain, each on its own scale. Bar: a loss's mean relative improvement over the "
                      "baseline across the domain's tasks (the tables' figure); dots: each task; error bar: ± the "
                      "seed spread (per task, the std over seeds of the per-seed relative improvement against the "
                      "baseline's mean; averaged over the tasks with more than one seed). The y axis is "
                      "symmetric-log, linear within ±1%, so a run at chance level and a change of a fraction of a "
                      "percent are both readable.", "", f"![relative improvement per domain]({BARS_PNG})", ""]
        else:
            lines += ["No task has both a baseline and another loss yet.", ""]
        lines += ["## Tasks", ""]
        lines += [*[bullet(f"{escape(t.label)}: {escape(', '.join(task_losses(t)))}") for t in tasks], ""]
        write_atomic(path, "\n".join(lines))
        generated.remove_stale(previous, drawn)  # once no page shows them
    return path


def cmd_report(results: str, out: str) -> int:
    page = write_report(Path(results), Path(out))
    for path in [page, *sorted(generated.shown_figures(page, "report", FIGURES))]:  # as leaderboard lists its files
        print(f"wrote {path}")
    return 0
