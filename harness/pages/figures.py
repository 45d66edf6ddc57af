"""The pages' figures, drawn with matplotlib's Agg backend (no display needed).

Every figure is saved by :func:`save`: a fixed dpi and no ``Software`` entry in the PNG metadata, so the same
records give the same bytes (``tests/test_committed_leaderboards.py`` compares them) for one matplotlib version
(pinned in ``constraints.txt``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from domains.files import write_atomic  # noqa: E402

PLAIN = FuncFormatter(lambda v, _: f"{v:g}")  # tick labels as numbers (2, 30, -10), not powers of ten


def save(fig: plt.Figure, path: Path, dpi: int = 100) -> None:
    """Write ``fig`` as a PNG whose bytes depend on the drawing only, and close it. The file is replaced atomically
    (``write_atomic``), as the pages are: an interrupted page command leaves the old figure, never half a PNG."""
    try:
        write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi, metadata={"Software": None}))
    finally:
        plt.close(fig)


def cd_diagram(mean_ranks: dict[str, float], cd: float, path: Path, title: str) -> None:
    """A critical-difference diagram (Demšar 2006): losses on a rank axis, best (rank 1) on the left; losses
    whose mean ranks differ by less than ``cd`` are joined by a thick bar; the CD is drawn above the axis.
    ``title`` says what the ranks cover (which tasks), so the figure is not read as covering more."""
    names = sorted(mean_ranks, key=lambda n: (mean_ranks[n], n))
    k = len(names)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.35 * k))
    half = (k + 1) // 2
    ax.set_xlim(0.5, k + 0.5)
    ax.set_ylim(-(half + 1), 2)
    ax.hlines(0, 1, k, color="black")
    for r in range(1, k + 1):
        ax.vlines(r, 0, 0.15, color="black")
        ax.text(r, 0.3, str(r), ha="center", va="bottom", fontsize=8)
    ax.hlines(1.3, 1, 1 + cd, color="black", lw=2)
    ax.text(1 + cd / 2, 1.45, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    for i, name in enumerate(names):
        x = mean_ranks[name]
        y = -(i % half + 1) if k > 1 else -1
        left = i < half
        end = 0.6 if left else k + 0.4
        ax.plot([x, x, end], [0, y, y], color="black", lw=0.8)
        ax.text(end, y, f"{name} ({x:.2f})", ha="right" if left else "left", va="center", fontsize=9)
    cliques = _cliques([mean_ranks[n] for n in names], cd)
    for j, (lo, hi) in enumerate(cliques):
        ax.hlines(-0.4 - 0.25 * j, lo - 0.05, hi + 0.05, color="tab:red", lw=3)
    ax.axis("off")
    ax.set_title("\n".join(textwrap.wrap(title, 110)), fontsize=7)
    fig.tight_layout()
    save(fig, path, dpi=120)


def _cliques(ranks: list[float], cd: float) -> list[tuple[float, float]]:
    """Maximal runs of sorted ranks whose spread is below the critical difference."""
    spans: list[tuple[float, float]] = []
    for i, low in enumerate(ranks):
        j = max(j for j in range(i, len(ranks)) if ranks[j] - low < cd)
        if j > i and not any(a <= low and ranks[j] <= b for a, b in spans):
            spans.append((low, ranks[j]))
    return spans


@dataclass
class Improvement:
    """One loss in one domain: its relative improvement (%) over the baseline in each task, and the seed spread
    of each task (the std over seeds of the per-seed relative improvement; None with one seed)."""

    loss: str
    per_task: list[float]
    spread: list[float | None]


def improvement_panels(per_domain: dict[str, list[Improvement]], path: Path) -> bool:
    """One panel per domain (its own y scale, so one domain's outlier cannot flatten another's), one bar per
    loss: the mean over tasks, with ± the mean seed spread as an error bar and each task as a dot. The y axis
    is symmetric-log, linear within ±1%: a run at chance (-60%) and a change of +0.5% are both readable.
    Returns False (and draws nothing) when there is nothing to plot."""
    domains = [d for d in sorted(per_domain) if per_domain[d]]
    if not domains:
        return False
    fig, axes = plt.subplots(1, len(domains), figsize=(max(4.0, 2.6 * len(domains) + 1), 3.6), squeeze=False)
    for ax, domain in zip(axes.flat, domains):
        rows = per_domain[domain]
        xs = range(len(rows))
        means = [sum(r.per_task) / len(r.per_task) for r in rows]
        spreads = [[s for s in r.spread if s is not None] for r in rows]
        errors = [sum(s) / len(s) if s else 0.0 for s in spreads]
        ax.bar(xs, means, yerr=errors, capsize=3, color="tab:blue", alpha=0.6, ecolor="black")
        for x, r in zip(xs, rows):
            ax.scatter([x] * len(r.per_task), r.per_task, s=8, color="black", zorder=3)
        ax.axhline(0, color="black", lw=0.8)
        ax.set_yscale("symlog", linthresh=1.0)
        ax.yaxis.set_major_formatter(PLAIN)
        ax.set_xticks(list(xs), [r.loss for r in rows], rotation=45, ha="right", fontsize=7)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(domain, fontsize=9)
    axes.flat[0].set_ylabel("relative improvement over baseline (%)", fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=100)
    return True


def error_curves(curves: dict[str, list[list[tuple[float, float]]]], path: Path) -> bool:
    """One line per label: the mean over its runs of the relative error at each epoch (each run a list of
    (epoch, error) points), on a log axis, with the goals (25% and a factor 2) as dotted lines. False, with
    nothing written, when there is no point to draw."""
    means = {}
    for label, runs in curves.items():
        by_epoch: dict[float, list[float]] = {}
        for run in runs:
            for epoch, error in run:
                by_epoch.setdefault(epoch, []).append(error)
        if by_epoch:
            means[label] = sorted((e, sum(v) / len(v)) for e, v in by_epoch.items())
    if not means:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, points in sorted(means.items()):
        ax.plot([e for e, _ in points], [max(v, 1e-3) for _, v in points], marker="o", ms=3, label=label)
    ax.axhline(0.25, color="grey", ls=":", lw=1)
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("|estimate − τ+| / τ+  (τ+: the share the loss saw)")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    save(fig, path, dpi=120)
    return True


def wrapped(title: str, width: int) -> str:
    """``title`` with each of its lines wrapped at ``width`` characters (a long setting would run past its panel)."""
    return "\n".join(part for line in title.split("\n") for part in textwrap.wrap(line, width) or [""])


def history_lines(series: list[tuple[str, str, list[tuple[float, float, bool]]]], path: Path) -> bool:
    """Small multiples, one panel per setting (its title, the metric its y axis shows, its points): its mean over
    the versions (oldest left) with ± one std over seeds as error bars, and a red ring on each version that is a
    step. False, with nothing written, when empty."""
    if not series:
        return False
    cols = min(4, len(series))
    rows = -(-len(series) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.2 * rows), squeeze=False)
    for ax, (title, ylabel, points) in zip(axes.flat, series):
        xs = range(1, len(points) + 1)
        ax.errorbar(xs, [m for m, _, _ in points], yerr=[s for _, s, _ in points], marker="o", ms=3, lw=1,
                    capsize=2)
        steps = [(x, m) for x, (m, _, step) in zip(xs, points) if step]
        if steps:
            ax.scatter(*zip(*steps), s=80, facecolors="none", edgecolors="tab:red", zorder=3)
        ax.set_title(wrapped(title, 55), fontsize=7)
        ax.set_ylabel(f"{ylabel} (mean ± std)", fontsize=6)
        ax.set_xticks(list(xs))
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    fig.supxlabel("version (oldest first); red ring: a step", fontsize=8)
    fig.tight_layout()
    save(fig, path, dpi=100)
    return True


@dataclass
class Line:
    """One row of a leaderboard table over training: per x, the mean over seeds and the lowest and highest seed."""

    label: str
    points: list[tuple[float, float, float, float]]  # (x, mean, low, high)


@dataclass
class Panel:
    """The rows of one setting (method and configuration): one line per loss."""

    title: str
    xlabel: str
    ylabel: str
    lines: list[Line]
    log_y: bool = False  # losses of different scale (jsd's beside infonce's) on one axis


def curve_panels(title: str, panels: Sequence[Panel], path: Path) -> None:
    """Small multiples of learning curves, one panel per setting, up to three a row: each line the mean over seeds,
    its band from the lowest to the highest seed. A loss keeps its colour in every panel of the figure."""
    labels = sorted({line.label for panel in panels for line in panel.lines})
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20")
    colours = {label: palette(i % palette.N) for i, label in enumerate(labels)}
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    width = max(6.0, 4.4 * cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.4 * rows + 0.4), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        for line in panel.lines:
            xs = [p[0] for p in line.points]
            colour = colours[line.label]
            ax.plot(xs, [p[1] for p in line.points], color=colour, lw=1.2, marker="o" if len(xs) < 12 else None,
                    ms=3, label=line.label)
            if any(p[2] != p[3] for p in line.points):
                ax.fill_between(xs, [p[2] for p in line.points], [p[3] for p in line.points], color=colour,
                                alpha=0.2, lw=0)
        ax.set_title("\n".join(textwrap.wrap(panel.title, 60)), fontsize=7)
        ax.set_xlabel(panel.xlabel, fontsize=7)
        ax.set_ylabel(panel.ylabel, fontsize=7)
        if panel.log_y:
            ax.set_yscale("log")
            low, high = ax.get_ylim()
            # 1, 2, 5 in each decade over a short range; decades only over a long one
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0) if high <= 100 * low else (1.0,)))
            ax.yaxis.set_major_formatter(PLAIN)
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=6)
        ax.legend(fontsize=5.5, loc="best")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("\n".join(textwrap.wrap(title, int(16 * width))), fontsize=9)
    fig.tight_layout()
    save(fig, path, dpi=80)
