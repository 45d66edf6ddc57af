"""The class-prior page's tables (:mod:`harness.pages.prior`): how close each ``auto`` estimate comes to the τ+ its
run saw, what each setting of the prior gains over infonce (a paired t-test over the seeds), and what the estimate
costs, each from the study's runs (:class:`harness.pages.prior_runs.Run`). A value is marked as the leaderboard
marks it (:func:`marks`): ‡ where its seeds come from several commits, ¶ where seeds on other data were left out or
where a gain is against infonce runs that read other data.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from scipy import stats

from harness import tables
from harness.numbers import fmt, spread
from harness.pages.prior_runs import LOSSES, SYNTHETIC, Run, task_label
from harness.pages.tables import MIXED, OTHER_DATA
from harness.stats import p_text

ALPHA = 0.05
NOT_SHOWN_WORSE = "within noise (not shown worse, nor better)"  # a paired test's p >= ALPHA: no evidence either way
AUTO_DEFAULT = "auto (kmeans)"  # the default estimator's column: the one the goal is judged on


def marks(runs: list[Run], base: list[Run] | None = None) -> str:
    """The marks after a value over ``runs`` (against ``base``, for a change): ‡ where their seeds or ``base``'s come
    from several commits; ¶ where seeds on other data were left out of them or of ``base``, or where ``runs`` and
    ``base`` read different data (the change is the data's as well as the loss's)."""
    base = base or []
    code = any(r.mixed_code for r in [*runs, *base])
    apart = bool(base) and {r.data for r in runs} != {r.data for r in base}
    data = apart or any(r.other_data for r in [*runs, *base])
    return (MIXED if code else "") + (OTHER_DATA if data else "")


def _one_or_spread(values: list[float]) -> str:
    """One value where the runs agree (a label prior; text's fixed batches), else their mean ± std; as every page
    prints them (:func:`harness.numbers.fmt`), so a prior, below 1, to 4 decimals and its std to the mean's."""
    return fmt(values[0]) if values and len(set(values)) == 1 else spread(values)


def _structure(runs: list[Run]) -> str:
    """The mean class silhouette and ARI of the runs that recorded them (losses.prior.class_structure)."""
    measured = [r.class_structure for r in runs if r.class_structure and "class_ari" in r.class_structure]
    if not measured:
        return "–"
    return (f"{statistics.fmean(m['class_silhouette'] for m in measured):.2f} / "
            f"{statistics.fmean(m['class_ari'] for m in measured):.2f} (n={len(measured)})")


def _reference_cell(runs: list[Run]) -> str:
    """The mean reference τ+ of ``runs`` and where it comes from (measured, label prior, or how many of each)."""
    sources = [r.reference_source for r in runs]
    kinds = sorted(set(sources))
    where = kinds[0] if len(kinds) == 1 else ", ".join(f"{sources.count(k)} {k}" for k in kinds)
    return f"{fmt(statistics.fmean(r.reference for r in runs))} ({where})"


def estimation_lines(runs: list[Run], synthetic: bool) -> list[str]:
    """Per task, loss and estimator: the label prior, the measured share of same-class negatives where the
    records hold it, the reference τ+ each run is judged against (:attr:`Run.reference`), the final auto
    estimate over runs, its mean relative error to each run's reference, and for the synthetic sets whether it
    meets the goal (25% at C ≤ 10, a factor 2 above; every run). Two columns say whether the classes are the
    clusters of the evaluation's embeddings (silhouette of the class partition, and the adjusted Rand index of a
    cut into C clusters with the classes), in the auto runs and in infonce's of the same task (a representation no
    estimate has steered), where the records have it. A row per loss too: the loss shapes the embeddings the
    estimate reads (HCL's hardness weighting, and the estimate itself, feed back)."""
    cells: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if "auto" in run.settings and run.estimate is not None and run.reference is not None \
                and (run.dataset in SYNTHETIC) == synthetic:
            cells[(run.task, run.loss, run.estimator)].append(run)
    if not cells:
        return ["No `auto` run has records here yet.", ""]
    rows = []
    for (task, loss, estimator), members in sorted(
            cells.items(), key=lambda kv: (kv[0][0][0], kv[0][0][1], kv[0][0][2] or 0, kv[0][1], kv[0][2] or "")):
        errors = [r.relative_error(r.estimate) for r in members]
        labelled = [r.label_prior for r in members if r.label_prior is not None]
        row = [task_label(task), loss, estimator, len(members), _one_or_spread(labelled),
               _one_or_spread([r.measured_share for r in members if r.measured_share is not None]),
               _reference_cell(members), spread([r.estimate for r in members]) + marks(members),
               f"{statistics.fmean(errors):.0%}"]
        baseline = [r for r in runs if r.loss == "infonce" and r.task == task]
        row += [_structure(members), _structure(baseline)]
        if synthetic:
            classes = task[2] or 0
            ratio = max(max(r.estimate / r.reference, r.reference / r.estimate) for r in members)
            met = max(errors) <= 0.25 if classes <= 10 else ratio <= 2.0
            row.append(f"{'met' if met else 'missed'} ({'≤ 25%' if classes <= 10 else 'within ×2'}, every run)")
        rows.append(row)
    columns = ["task", "loss", "estimator", "runs", "label prior", "measured same-class share of the negatives",
               "τ+ the loss saw (from)", "auto estimate (final)", "mean relative error to τ+",
               "classes as clusters (silhouette / ARI): these runs", "in infonce's embeddings"]
    return [*tables.markdown(columns + (["goal"] if synthetic else []), rows), ""]


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], float]:
    """The per-seed differences a − b over the seeds both have, and the paired t-test's p-value."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    p = float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue) if len(seeds) > 1 else math.nan
    return diffs, p


def by_seed(runs: list[Run]) -> dict[int, float]:
    return {r.seed: r.value for r in runs}


def gain_lines(runs: list[Run]) -> tuple[list[str], list[str]]:
    """The gains over infonce per task, loss and setting; and the verdict lines of dcl auto against dcl at the
    paper default (at least as good within noise: not worse by a paired t-test at ALPHA)."""
    table = defaultdict(list)
    for run in runs:
        for setting in run.settings:
            table[(run.task, run.loss, f"auto ({run.estimator})" if setting == "auto" else setting)].append(run)
    tasks = sorted({r.task for r in runs if r.dataset in SYNTHETIC}, key=lambda t: (t[0], t[1], t[2] or 0))
    autos = sorted({key[2] for key in table if key[2].startswith("auto")}, key=lambda a: a != AUTO_DEFAULT)
    columns = ["true", *autos, "default"]
    rows: list[list[str]] = []
    verdicts: list[str] = []
    for task in tasks:
        infonce = table.get((task, "infonce", "baseline"), [])
        base = by_seed(infonce)
        if not base:
            continue
        for loss in LOSSES:
            cells = []
            for setting in columns:
                members = table.get((task, loss, setting), [])
                if not members:
                    cells.append("not run")
                    continue
                diffs, p = paired(by_seed(members), base)
                sign = 1.0 if members[0].higher_is_better else -1.0
                mark = ("†" if p < ALPHA else "") + marks(members, infonce)
                cells.append(f"{sign * statistics.fmean(diffs):+.2f}{mark} (n={len(diffs)})" if diffs else "–")
            if set(cells) != {"not run"}:
                rows.append([task_label(task), loss, *cells])
        auto_runs, default_runs = table.get((task, "dcl", AUTO_DEFAULT), []), table.get((task, "dcl", "default"), [])
        auto, default = by_seed(auto_runs), by_seed(default_runs)
        if len(set(auto) & set(default)) >= 2:
            diffs, p = paired(auto, default)
            mean = statistics.fmean(diffs)
            verdict = NOT_SHOWN_WORSE if not p < ALPHA else "better" if mean >= 0 else "worse"
            verdicts.append(f"{task_label(task)}: dcl auto − dcl default = {mean:+.2f}"
                            f"{marks(auto_runs, default_runs)} over "
                            f"{len(diffs)} seeds (paired t-test p = {p_text(p, ALPHA)}): {verdict}")
    if not rows:
        return ["No synthetic task has records of infonce and a debiased loss yet.", ""], verdicts
    headers = [f"Δ at {'the label prior' if c == 'true' else c + ' prior'}" for c in columns]
    return [*tables.markdown(["task", "loss", *headers], rows), ""], verdicts


def cost_lines(runs: list[Run]) -> list[str]:
    """The estimate's share of a run's time over every ``auto`` run, then per domain: the estimates a run
    takes, the seconds of one, and the share (the sum of the curve's ``prior_seconds`` over ``timings.total_s``).
    A run's first estimate is shown apart, and so is the share without it: it also imports the clustering
    libraries, a cost paid once per process that dominates the share of a short run."""
    auto = [r for r in runs if "auto" in r.settings and r.total_seconds > 0]
    if not auto:
        return ["No `auto` run has records here yet.", ""]
    shares = [r.prior_seconds / r.total_seconds for r in auto]
    rows = []
    for domain in sorted({r.domain for r in auto}):
        members = [r for r in auto if r.domain == domain]
        estimates = [len(r.trajectory) for r in members]
        share = [r.prior_seconds / r.total_seconds for r in members]
        later = [s for r in members for s in r.estimate_seconds[1:]]
        rows.append([domain, len(members), f"{statistics.fmean(estimates):.0f}",
                     f"{sum(r.prior_seconds for r in members) / max(sum(estimates), 1):.3f}",
                     f"{statistics.fmean(r.estimate_seconds[0] for r in members if r.estimate_seconds):.3f}",
                     f"{statistics.fmean(later):.3f}" if later else "–",
                     f"{statistics.fmean(r.total_seconds for r in members):.1f}",
                     f"{statistics.fmean(share):.1%}", f"{max(share):.1%}",
                     f"{statistics.fmean(sum(r.estimate_seconds[1:]) / r.total_seconds for r in members):.1%}"])
    return [f"The estimates cost {statistics.fmean(shares):.1%} of a run's time on average (at most "
            f"{max(shares):.1%}) over the {len(auto)} `auto` runs (the sum of the curve's `prior_seconds` over the "
            "record's `timings.total_s`); goal ≤ 5%. A run's first estimate also imports scipy's hierarchical "
            "clustering and scikit-learn, once per process (the evaluation's class-structure diagnostic imports "
            "most of them anyway), so it is shown apart, with the share of the later estimates alone.", "",
            *tables.markdown(["domain", "auto runs", "estimates a run", "seconds an estimate", "the first",
                              "each later", "seconds a run", "mean share", "largest share",
                              "mean share of the later ones"], rows), ""]


