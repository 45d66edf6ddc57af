"""The report's figures, drawn with matplotlib's Agg backend (no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)


def cd_diagram(mean_ranks: dict[str, float], cd: float, path: Path) -> None:
    """A critical-difference diagram (Demšar 2006): losses on a rank axis, best (rank 1) on the left; losses
    whose mean ranks differ by less than ``cd`` are joined by a thick bar; the CD is drawn above the axis."""
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cliques(ranks: list[float], cd: float) -> list[tuple[float, float]]:
    """Maximal runs of sorted ranks whose spread is below the critical difference."""
    spans: list[tuple[float, float]] = []
    for i, low in enumerate(ranks):
        j = max(j for j in range(i, len(ranks)) if ranks[j] - low < cd)
        if j > i and not any(a <= low and ranks[j] <= b for a, b in spans):
            spans.append((low, ranks[j]))
    return spans


def improvement_bars(per_domain: dict[str, dict[str, float]], path: Path) -> bool:
    """Grouped bars: mean relative improvement (%) over the baseline per loss, one group per domain.
    Returns False (and draws nothing) when there is nothing to plot."""
    domains = [d for d in sorted(per_domain) if per_domain[d]]
    losses = sorted({loss for d in domains for loss in per_domain[d]})
    if not losses:
        return False
    width = 0.8 / len(losses)
    fig, ax = plt.subplots(figsize=(max(5, 1.5 * len(domains) * max(1, len(losses) / 4)), 3.5))
    for i, loss in enumerate(losses):
        xs = [d_i + (i - (len(losses) - 1) / 2) * width for d_i, d in enumerate(domains) if loss in per_domain[d]]
        ys = [per_domain[d][loss] for d in domains if loss in per_domain[d]]
        ax.bar(xs, ys, width=width, label=loss)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(domains)), domains)
    ax.set_ylabel("relative improvement over baseline (%)")
    ax.legend(fontsize=8, ncols=min(4, len(losses)))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
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
    ax.set_ylabel("|estimate − true| / true")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def history_lines(series: list[tuple[str, list[tuple[float, float, bool]]]], path: Path) -> bool:
    """Small multiples, one panel per setting: its mean over the versions (oldest left) with ± one std over seeds
    as error bars, and a red ring on each version that is a step. False, with nothing written, when empty."""
    if not series:
        return False
    cols = min(4, len(series))
    rows = -(-len(series) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.2 * rows), squeeze=False)
    for ax, (title, points) in zip(axes.flat, series):
        xs = range(1, len(points) + 1)
        ax.errorbar(xs, [m for m, _, _ in points], yerr=[s for _, s, _ in points], marker="o", ms=3, lw=1,
                    capsize=2)
        steps = [(x, m) for x, (m, _, step) in zip(xs, points) if step]
        if steps:
            ax.scatter(*zip(*steps), s=80, facecolors="none", edgecolors="tab:red", zorder=3)
        ax.set_title(title, fontsize=7)
        ax.set_xticks(list(xs))
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(series):]:
        ax.axis("off")
    fig.supxlabel("version (oldest first); red ring: a step", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
