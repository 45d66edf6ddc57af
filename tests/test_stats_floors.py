"""The smallest p a rank test can reach (``Change.min_p``) where values tie or scipy approximates, against every
split of the seeds or every sign of the pairs: the gate calls a group within tolerance "unchanged" only if its test
could have rejected (``stats.decidable``), and the exact tie-free floors let such groups pass where it never could."""

from __future__ import annotations

import itertools

import pytest

from harness import stats
from harness.stats import compare_values, decidable, min_p

TIED_SAMPLES = [  # (baseline, candidate)
    ([1.0, 1.0, 2.0], [1.0, 2.0, 2.0]),  # the split [1, 1, 1] | [2, 2, 2] is the only extreme one: 2/C(6, 3)
    ([0.81, 0.81, 0.82, 0.82], [0.81, 0.82, 0.82, 0.82]),
    ([1.0, 2.0, 2.0, 3.0], [2.0, 2.0, 3.0]),
    ([5.0, 5.0, 5.0, 5.0, 6.0], [5.0, 7.0]),
    ([1.0, 1.0, 2.0, 2.0], [2.0, 3.0, 3.0, 3.0]),
]


def _smallest_p_over_every_split(base: list[float], cand: list[float]) -> float:
    pooled = base + cand
    splits = itertools.combinations(range(len(pooled)), len(cand))
    return min(stats._mannwhitney_p([pooled[i] for i in chosen], [v for i, v in enumerate(pooled) if i not in chosen])
               for chosen in splits)


def _mannwhitney(base: list[float], cand: list[float]) -> stats.Change:
    return compare_values(dict(enumerate(base)), {s + 100: v for s, v in enumerate(cand)}, "mannwhitney")


@pytest.mark.parametrize(("base", "cand"), TIED_SAMPLES)
def test_mann_whitneys_floor_with_ties_is_its_smallest_p_over_every_split(base, cand):
    assert _mannwhitney(base, cand).min_p == pytest.approx(_smallest_p_over_every_split(base, cand), rel=1e-12)


@pytest.mark.parametrize(("base", "cand"), TIED_SAMPLES)
def test_past_the_enumeration_cap_the_floor_is_the_normal_approximations_smallest_p(base, cand, monkeypatch):
    monkeypatch.setattr(stats, "PERMUTATION_VALUES_MAX", 0)
    floor = _mannwhitney(base, cand).min_p
    assert floor == pytest.approx(_smallest_p_over_every_split(base, cand), rel=1e-12)


def test_a_tied_group_whose_test_could_never_reject_is_not_decidable():
    """Four seeds a side: tie-free, 2/C(8, 4) = 0.029 < 0.05; but of the 70 splits of three 0.81s and five 0.82s,
    10 are as extreme as the most extreme, so no split's p goes below 0.143, and the gate listed such a group as
    unchanged."""
    base, cand = [0.81, 0.81, 0.82, 0.82], [0.81, 0.82, 0.82, 0.82]
    assert min_p("mannwhitney", 4, 4, 0) < 0.05 <= _smallest_p_over_every_split(base, cand)
    change = _mannwhitney(base, cand)
    assert change.min_p == pytest.approx(10 / 70) and change.p >= change.min_p
    assert not decidable(change, 0.05, 1, "holm")
    assert decidable(_mannwhitney([0.81] * 4, [0.82] * 4), 0.05, 1, "holm")  # one extreme split: 2/70


def _wilcoxon(diffs: list[float]) -> stats.Change:
    return compare_values({s: 0.0 for s in range(len(diffs))}, dict(enumerate(diffs)), "wilcoxon")


def _smallest_p_over_every_sign(diffs: list[float]) -> float:
    return min(stats._wilcoxon_p([sign * d for sign, d in zip(signs, diffs)])
               for signs in itertools.product((1, -1), repeat=len(diffs)))


@pytest.mark.parametrize("diffs", [[1.0, 1.0, 2.0, 2.0, 3.0], [0.0, 1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.0, 5.0]])
def test_wilcoxons_floor_with_ties_or_zeros_stays_two_in_two_to_the_nonzero_pairs(diffs):
    """Exact (no zeros) or counting every sign (zeros), only the same sign on every pair reaches the largest
    rank sum, tied |d| or not."""
    nonzero = sum(d != 0 for d in diffs)
    assert _wilcoxon(diffs).min_p == 2 / 2**nonzero == pytest.approx(_smallest_p_over_every_sign(diffs))


def test_wilcoxons_floor_under_the_normal_approximation_is_its_p_at_the_same_sign_on_every_pair(monkeypatch):
    """With a zero among 14 pairs scipy takes its normal approximation, whose p cannot go below 0.0015: 2/2^13 =
    0.00024 called the group decidable among 34 groups (Holm's lone level 0.05/34 = 0.00147)."""
    diffs = [0.0, *map(float, range(1, 14))]
    change = _wilcoxon(diffs)
    assert change.min_p == pytest.approx(0.0014738, rel=1e-4) and change.p >= change.min_p
    assert min_p("wilcoxon", 14, 14, 13) < stats.lone_level(0.05, 34, "holm") < change.min_p
    assert not decidable(change, 0.05, 34, "holm")
    monkeypatch.setattr(stats, "WILCOXON_SIGNS_MAX", 3)  # every sign of 6 pairs, under the normal approximation
    few = [0.0, 1.0, 1.0, 2.0, 3.0, 3.0]
    assert _wilcoxon(few).min_p == pytest.approx(_smallest_p_over_every_sign(few), rel=1e-12)
