"""Labels that an evaluation cannot score: the class structure (losses.prior.class_structure) of a set whose classes
are very unbalanced scores every class of it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.metrics import adjusted_rand_score, silhouette_score

from losses import prior

# --- the class structure of a large, unbalanced set --------------------------------------------------------------

def _points(labels: np.ndarray) -> torch.Tensor:
    """Every row of class c at the c-th unit vector: rows of a class coincide, classes are sqrt(2) apart."""
    return torch.eye(int(labels.max()) + 1, dtype=torch.float64)[torch.from_numpy(labels)]


@pytest.mark.parametrize("rare", [1, 3])
def test_a_draw_keeps_every_class_of_a_very_unbalanced_set(rare):
    """One row of each of ``rare`` classes among 10,000: the uniform draw of 2,000 rows holds none of them with seed 0
    (checked below), which left one class, and a ValueError after a whole training run. Each rare class now takes a
    row of the common one, so by hand: the 2,000 - rare common rows have silhouette 1 (distance 0 to their own class,
    sqrt(2) to every other), the rare rows, singletons, 0; the Ward cut into 1 + rare clusters is the classes."""
    labels = np.zeros(10_000, dtype=np.int64)
    labels[[137, 4_242, 7_777][:rare]] = np.arange(1, rare + 1)
    drawn = np.random.default_rng(0).choice(len(labels), 2000, replace=False)
    assert set(labels[drawn]) == {0}  # the draw the fix must amend
    found = prior.class_structure(_points(labels), labels, seed=0)
    assert found["class_silhouette"] == pytest.approx((2000 - rare) / 2000, abs=1e-12)
    assert found["class_ari"] == pytest.approx(1.0) and found["zero_rows"] == 0


def test_a_draw_that_holds_every_class_is_scored_as_before():
    """Balanced classes: the rows are the seeded uniform draw the docstring names, scored by scikit-learn's silhouette
    and adjusted Rand index on scipy's Ward cut (what every committed record's class structure was)."""
    rng = np.random.default_rng(5)
    labels = rng.permutation(np.arange(3000) % 3)
    x = rng.normal(size=(3000, 8)) + 3.0 * np.eye(8)[labels]
    rows = np.sort(np.random.default_rng(7).choice(3000, 2000, replace=False))
    unit = x[rows] / np.linalg.norm(x[rows], axis=1, keepdims=True)
    cut = fcluster(linkage(unit, method="ward"), 3, criterion="maxclust")
    found = prior.class_structure(torch.from_numpy(x), labels, seed=7)
    assert found["class_silhouette"] == pytest.approx(silhouette_score(unit, labels[rows]), abs=1e-9)
    assert found["class_ari"] == pytest.approx(adjusted_rand_score(labels[rows], cut), abs=1e-12)


def test_a_draw_that_more_classes_than_rows_leave_unscorable_gives_the_count_alone():
    """39 classes, one of them twice: the set can be scored, a draw of 10 rows (seed 1: ten classes) cannot, and no
    draw can hold a row of every class; the evaluation records what it can, as for all-zero rows."""
    labels = np.array([*range(39), 0])
    assert len(set(labels[np.random.default_rng(1).choice(40, 10, replace=False)])) == 10
    assert prior.class_structure(torch.randn(40, 4), labels, seed=1, sample=10) == {"zero_rows": 0}
