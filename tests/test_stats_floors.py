"""The smallest p a rank test can reach (``Change.min_p``) where values tie, against every split of the seeds: the
gate calls a group within tolerance "unchanged" only if its test could have rejected (``stats.decidable``), and the
tie-free floor let tied groups pass as unchanged where the test never could."""

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
