"""The statistics of a change between two groups of seeds: the test, the smallest p it can reach, the interval of the
change and its standardised effect, and the correction for testing many groups at once.

Used by ``harness compare`` (the gate) and ``harness history`` (step changes between versions). Every test is
scipy's; this module only chooses one, and says when it cannot decide: a rank test on few seeds cannot reach a
small p whatever the data (Mann-Whitney U at 3 seeds a side: p >= 0.1; tied values can raise that floor), which asv
reports as the minimum p reachable, and which makes a group *untestable* rather than "unchanged". A t-test can
reach any p, but at few seeds and a wide spread only for a large change: :func:`detectable` gives the smallest change
it could have called significant, so that a report says what a group's seeds can see.
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

TESTS = {
    "auto": (
        "a paired t-test on the seeds both sides have where they share at least 2 and the candidate has no other, "
        "else Welch's t-test"
    ),
    "paired-t": "a paired t-test (scipy.stats.ttest_rel) on the seeds both sides have",
    "wilcoxon": (
        "a Wilcoxon signed-rank test (scipy.stats.wilcoxon, exact up to 100 pairs; where some pair's difference is 0, "
        "every sign of each pair counted up to 13 pairs, else the normal approximation) on the seeds both sides have"
    ),
    "welch": "Welch's t-test (scipy.stats.ttest_ind, equal_var=False)",
    "mannwhitney": (
        "a Mann-Whitney U test (scipy.stats.mannwhitneyu, exact up to 100 seeds a side; with tied values, a "
        "permutation test of U over every split of the seeds, scipy.stats.permutation_test, while the splits hold at "
        "most 4 million values: 10 seeds a side)"
    ),
}
PAIRED = ("paired-t", "wilcoxon")
# The rank tests' p is exact up to this many seeds a side (pairs), scipy's normal approximation above: its exact
# Mann-Whitney distribution took 0.02 s at 100 seeds a side and 5 s at 200 on the development machine.
EXACT_MAX = 100
# scipy's exact Mann-Whitney distribution assumes no ties; with ties, every split of the seeds is counted while the
# splits hold at most this many values together (10 seeds a side: 184,756 splits of 20, about a second and 30 MB),
# else its tie-corrected normal approximation.
PERMUTATION_VALUES_MAX = 4_000_000
# With zero differences, scipy's Wilcoxon test counts every sign of each pair up to this many pairs (2^13 signs, within
# its default 9999 resamples), else takes its normal approximation.
WILCOXON_SIGNS_MAX = 13
CORRECTIONS = {
    "holm": "Holm's step-down correction (family-wise error rate)",
    "bh": "the Benjamini-Hochberg correction (false discovery rate, scipy.stats.false_discovery_control)",
    "none": "no correction for the number of groups",
}


@dataclass(frozen=True)
class Change:
    """The change ``candidate - baseline`` of one group, and what the test says of it (two-sided)."""

    test: str  # the test actually used (auto resolved)
    n_base: int
    n_cand: int
    n_pairs: int  # seeds used in pairs (paired tests), else 0
    change: float  # difference of the means (paired: mean of the differences)
    low: float  # 95% interval of the change (t-based; NaN where it cannot be computed)
    high: float
    effect: float  # standardised: paired d_z = mean(d)/sd(d); unpaired Cohen's d (pooled sd); NaN if undefined
    p: float  # NaN: the test cannot run (fewer than 2 seeds)
    min_p: float  # the smallest p the test can reach at these sample sizes and tied values (1.0: it cannot run)
    se: float = math.nan  # the t-tests' standard error of the change (0 where neither side varies); NaN otherwise
    df: float = math.nan  # and its degrees of freedom (Welch-Satterthwaite for Welch's test)


def _constant_p(a: list[float], b: list[float]) -> float | None:
    """Where neither side varies (a deterministic run), any difference is real: p = 0, else 1."""
    if len(set(a)) <= 1 and len(set(b)) <= 1:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    return None


def p_text(p: float, alpha: float = 0.05) -> str:
    """``p`` to 3 significant digits, or more where those would put it on the other side of ``alpha`` (0.049996
    printed as 0.05 beside a mark that says p < 0.05); "–" for NaN."""
    if math.isnan(p):
        return "–"
    for digits in range(3, 18):
        text = f"{p:.{digits}g}"
        if (float(text) < alpha) == (p < alpha):
            return text
    return repr(p)


def min_p(test: str, n_base: int, n_cand: int, n_pairs: int) -> float:
    """The smallest two-sided p the test can give at these sizes: 0 for the t-tests (continuous) with at least 2
    values a side (pairs), 2/2^n for the exact Wilcoxon test on n pairs (those whose difference is not 0: the test
    leaves the others out), 2/C(n1+n2, n1) for the exact Mann-Whitney U test without ties; 1 where the test cannot
    run. Where the test that runs is not one of those exact ones, :func:`compare_values` takes the floor from the
    values: Mann-Whitney's with tied values (:func:`_tied_mannwhitney_floor`), Wilcoxon's normal approximation
    (:func:`_wilcoxon_method`)."""
    if test in PAIRED:
        if n_pairs < 2:
            return 1.0
        return 0.0 if test == "paired-t" else min(1.0, math.ldexp(1.0, 1 - n_pairs))
    if min(n_base, n_cand) < 2:
        return 1.0
    # int / int: exact for any seed count (2.0 / 2**1100 or a float of C(600, 300) would overflow)
    return 0.0 if test == "welch" else min(1.0, 2 / math.comb(n_base + n_cand, n_base))


def compare_values(base: dict[int, float], cand: dict[int, float], test: str = "auto") -> Change:
    """The change between two groups' per-seed values (seed -> metric) under ``test`` (see :data:`TESTS`)."""
    pairs = len(set(base) & set(cand))
    if test == "auto":  # a pairing would leave the candidate's extra seeds out of the change
        test = "paired-t" if pairs >= 2 and set(cand) <= set(base) else "welch"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zero variance, small samples: scipy warns and returns nan
        if test in PAIRED:
            return _paired_change(base, cand, test)
        return _unpaired_change(base, cand, test)


def _paired_change(base: dict[int, float], cand: dict[int, float], test: str) -> Change:
    seeds = sorted(set(base) & set(cand))
    a, b = [base[s] for s in seeds], [cand[s] for s in seeds]
    diffs = [y - x for x, y in zip(a, b)]
    if not all(math.isfinite(d) for d in diffs):  # finite values a float apart (1e308 - -1e308): statistics breaks
        raise OverflowError("a per-seed difference is too large for a float")
    change = statistics.fmean(diffs) if diffs else math.nan
    # the Wilcoxon test leaves out the pairs whose difference is 0 (scipy's zero_method "wilcox")
    floor = min_p(test, len(base), len(cand), len(seeds) if test == "paired-t" else sum(d != 0 for d in diffs))
    if len(seeds) < 2:
        return Change(test, len(base), len(cand), len(seeds), change, math.nan, math.nan, math.nan, math.nan, floor)
    sd = statistics.stdev(diffs)
    result = stats.ttest_rel(b, a)
    interval = result.confidence_interval(0.95)
    low, high = float(interval.low), float(interval.high)
    if test == "wilcoxon" and floor < 1 and _wilcoxon_method(diffs) == "asymptotic":
        # Exact, or counting every sign, the floor is 2/2^n whatever the ties among |d|: only the same sign on every
        # pair reaches the largest rank sum (every rank is positive), which scipy's exact table gives 1/2^n a side.
        # The normal approximation's floor is its p there (13 pairs and a zero: 0.0015, not 2/2^13 = 0.00024).
        floor = _wilcoxon_p([abs(d) for d in diffs])
    if sd == 0:  # the same shift on every seed: real, but a rank test's p cannot go below its floor
        p, low, high = (1.0 if change == 0 else floor), change, change
    elif test == "paired-t":
        p = float(result.pvalue)
    else:
        p = _wilcoxon_p(diffs)
    effect = change / sd if sd > 0 else math.nan
    se = sd / math.sqrt(len(seeds)) if test == "paired-t" else math.nan
    return Change(test, len(base), len(cand), len(seeds), change, low, high, effect, p, floor, se, len(seeds) - 1)


def _wilcoxon_method(diffs: list[float]) -> str | stats.PermutationMethod:
    """scipy's Wilcoxon test as :data:`TESTS` says: its exact distribution up to EXACT_MAX pairs where no
    difference is 0 (the table assumes none); with zeros, every sign of each pair counted up to WILCOXON_SIGNS_MAX
    pairs, as scipy's "auto" does; else its normal approximation."""
    if len(diffs) > EXACT_MAX or (0 in diffs and len(diffs) > WILCOXON_SIGNS_MAX):
        return "asymptotic"
    return "exact" if 0 not in diffs else stats.PermutationMethod()


def _wilcoxon_p(diffs: list[float]) -> float:
    """Two-sided p of a Wilcoxon signed-rank test of the differences (pairs whose difference is 0 left out)."""
    return float(stats.wilcoxon(diffs, method=_wilcoxon_method(diffs)).pvalue)


def _unpaired_change(base: dict[int, float], cand: dict[int, float], test: str) -> Change:
    a, b = list(base.values()), list(cand.values())
    n1, n2 = len(a), len(b)
    change = statistics.fmean(b) - statistics.fmean(a) if a and b else math.nan
    floor = min_p(test, n1, n2, 0)
    if min(n1, n2) < 2:
        return Change(test, n1, n2, 0, change, math.nan, math.nan, math.nan, math.nan, floor)
    if test == "mannwhitney" and _ties(a + b):
        floor = _tied_mannwhitney_floor(sorted(a + b), n2)
    pooled = math.sqrt(((n1 - 1) * statistics.variance(a) + (n2 - 1) * statistics.variance(b)) / (n1 + n2 - 2))
    welch = stats.ttest_ind(b, a, equal_var=False)
    interval = welch.confidence_interval(0.95)
    low, high = float(interval.low), float(interval.high)
    constant = _constant_p(a, b)
    if constant is not None:
        p, low, high = max(constant, floor), change, change
    elif test == "welch":
        p = float(welch.pvalue)
    else:
        p = _mannwhitney_p(b, a)
    effect = change / pooled if pooled > 0 else math.nan
    se, df = _welch_se_df(a, b) if test == "welch" else (math.nan, math.nan)
    return Change(test, n1, n2, 0, change, low, high, effect, p, floor, se, df)


def _mannwhitney_p(b: list[float], a: list[float]) -> float:
    """Two-sided p of a Mann-Whitney U test of ``b`` against ``a``: scipy's exact distribution without ties (up to
    EXACT_MAX a side: at 200 it takes seconds), which ignores ties where there are some (at [2, 3, 3, 3] against
    [1, 1, 2, 2] it gave 0.057 where counting every split gives 0.086); so with ties, every split of the seeds,
    up to PERMUTATION_VALUES_MAX values in all, else the tie-corrected normal approximation."""
    n1, n2 = len(b), len(a)
    if not _ties(a + b):
        method = "exact" if max(n1, n2) <= EXACT_MAX else "asymptotic"
        return float(stats.mannwhitneyu(b, a, alternative="two-sided", method=method).pvalue)
    if _splits_enumerable(n1, n2):
        return float(stats.permutation_test((b, a), _u_statistic, permutation_type="independent", vectorized=True,
                                            n_resamples=math.inf, alternative="two-sided").pvalue)
    return float(stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic").pvalue)


def _ties(values: list[float]) -> bool:
    return len(set(values)) < len(values)


def _splits_enumerable(n1: int, n2: int) -> bool:
    """Whether the permutation test of :func:`_mannwhitney_p` counts every split of n1 + n2 tied values."""
    return math.comb(n1 + n2, n1) * (n1 + n2) <= PERMUTATION_VALUES_MAX


def _tied_mannwhitney_floor(pooled: list[float], n: int) -> float:
    """The smallest p :func:`_mannwhitney_p` gives on any split of the ``pooled`` values (sorted; some tie) into
    ``n`` and the rest: at one of the two most extreme splits, where ``n`` takes the smallest or the largest values
    (U furthest from its mean). [1, 1, 1, 2, 2, 2, 2, 2] cannot go below p = 0.143 at 4 seeds a side, where the
    tie-free 2/C(8, 4) = 0.029 would call a group decidable at 0.05."""
    smallest, largest = pooled[:n], pooled[-n:]
    if _splits_enumerable(n, len(pooled) - n):
        # The permutation test's p there is 2 * (splits as extreme) / (all splits), and a split is as extreme only
        # when it holds the same values (any other has a midrank sum further from the end). Counted rather than
        # tested: the test enumerates every split (about a second at 10 seeds a side) and would run twice more.
        as_extreme = min(_splits_holding(smallest, pooled), _splits_holding(largest, pooled))
        return min(1.0, 2 * as_extreme / math.comb(len(pooled), n))
    # the normal approximation's p falls as U moves from its mean, and its variance depends only on the pooled ties
    return min(_mannwhitney_p(smallest, pooled[n:]), _mannwhitney_p(largest, pooled[:-n]))


def _splits_holding(part: list[float], pooled: list[float]) -> int:
    """How many subsets of ``pooled`` hold the same values as ``part``: the ways to pick its copies of each value."""
    return math.prod(math.comb(pooled.count(v), part.count(v)) for v in set(part))


def _u_statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """Mann-Whitney's U of ``x`` (midranks for ties), along ``axis``, for :func:`scipy.stats.permutation_test`."""
    ranks = stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
    n = x.shape[axis]
    return np.take(ranks, range(n), axis=axis).sum(axis=axis) - n * (n + 1) / 2


def _welch_se_df(a: list[float], b: list[float]) -> tuple[float, float]:
    """Welch's standard error of the difference of the means, and its Welch-Satterthwaite degrees of freedom."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    if se == 0:
        return 0.0, float(len(a) + len(b) - 2)
    return se, (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))


def detectable(change: Change, level: float) -> float:
    """The smallest absolute change the t-test could have called significant at ``level`` (two-sided) with this
    group's seeds and spread: ``t(1 - level/2, df) * se``. 0 where neither side varies (any change is real); NaN
    for the rank tests (their steps are ranks, not metric units) and where the test cannot run."""
    if math.isnan(change.se) or math.isnan(change.df) or change.df < 1:
        return math.nan
    return 0.0 if change.se == 0 else float(stats.t.ppf(1 - level / 2, change.df) * change.se)


def adjust(p_values: list[float], correction: str) -> list[float]:
    """The p-values adjusted for testing them together (:data:`CORRECTIONS`), in the given order."""
    m = len(p_values)
    if correction == "none" or m == 0:
        return list(p_values)
    if correction == "bh":
        return [float(v) for v in stats.false_discovery_control(p_values, method="bh")]
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):  # Holm: the k-th smallest p times (m - k + 1), kept monotone
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def lone_level(alpha: float, n_tests: int, correction: str) -> float:
    """The uncorrected p a lone significant group needs among ``n_tests`` after the correction (alpha / n_tests for
    Holm and Benjamini-Hochberg, alpha without one)."""
    return alpha if correction == "none" else alpha / max(1, n_tests)


def decidable(change: Change, alpha: float, n_tests: int, correction: str) -> bool:
    """Whether the test could call this group significant at all: its smallest reachable p is below the level a
    lone significant group needs after the correction (:func:`lone_level`)."""
    return not math.isnan(change.p) and change.min_p < lone_level(alpha, n_tests, correction)
