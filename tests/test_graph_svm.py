"""The nested-CV SVM protocol on data with a known answer."""

from __future__ import annotations

import numpy as np
import pytest

from domains.graph.config import C_GRID
from domains.graph.evaluate import svm_protocol


def test_separable_classes_give_100_percent():
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1, 2], 40)
    x = rng.randn(120, 6) * 0.3 + np.eye(6)[y] * 5.0  # three far-apart blobs
    res = svm_protocol(x, y, seed=0)
    assert res["accuracy"] == 100.0
    assert res["fold_accuracy"] == [100.0] * 10
    assert len(res["chosen_C"]) == 10 and set(res["chosen_C"]) <= set(C_GRID)


def test_random_labels_give_chance():
    rng = np.random.RandomState(1)
    x = rng.randn(200, 8)
    y = rng.randint(0, 2, 200)
    res = svm_protocol(x, y, seed=0, folds=5, inner_folds=3)
    assert 35.0 < res["accuracy"] < 65.0


def test_inner_search_picks_a_large_C_when_the_margin_needs_it():
    # Two interleaved classes separable only by a flexible boundary: C = 1e-3 gives the majority class.
    rng = np.random.RandomState(2)
    x = rng.uniform(-1, 1, size=(200, 2))
    y = (np.sin(4 * x[:, 0]) > x[:, 1]).astype(int)
    res = svm_protocol(x, y, seed=0, folds=5, inner_folds=3)
    assert min(res["chosen_C"]) >= 1.0
    assert res["accuracy"] > 85.0


def test_seeded_and_standardize_option():
    rng = np.random.RandomState(3)
    y = np.repeat([0, 1], 30)
    x = rng.randn(60, 3) + y[:, None] * 1.5
    a, b = svm_protocol(x, y, seed=5, folds=3), svm_protocol(x, y, seed=5, folds=3)
    assert a == b
    assert len(a["fold_accuracy"]) == 3
    # A feature on a huge scale swamps the RBF kernel unless the features are standardised.
    x_scaled = x * np.array([1e4, 1.0, 1.0])
    raw = svm_protocol(x_scaled, y, seed=5, folds=3)["accuracy"]
    std = svm_protocol(x_scaled, y, seed=5, folds=3, standardize=True)["accuracy"]
    assert std == pytest.approx(svm_protocol(x, y, seed=5, folds=3, standardize=True)["accuracy"])
    assert std >= raw


def test_inner_search_agrees_with_gridsearchcv():
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.svm import SVC

    rng = np.random.RandomState(4)
    y = np.repeat([0, 1], 45)
    x = rng.randn(90, 4) + y[:, None] * 0.8
    ours = svm_protocol(x, y, seed=7, folds=3, inner_folds=3)
    # The same splits (outer seeded by the seed, inner by a RandomState(seed) stream) through GridSearchCV.
    stream = np.random.RandomState(7)
    ref_acc, ref_c = [], []
    for tr, te in StratifiedKFold(3, shuffle=True, random_state=7).split(x, y):
        inner = StratifiedKFold(3, shuffle=True, random_state=stream.randint(2**31 - 1))
        grid = GridSearchCV(SVC(), {"C": list(C_GRID)}, cv=inner, scoring="accuracy").fit(x[tr], y[tr])
        ref_acc.append(100.0 * grid.score(x[te], y[te]))
        ref_c.append(grid.best_params_["C"])
    assert ours["chosen_C"] == ref_c
    assert ours["fold_accuracy"] == pytest.approx(ref_acc)


def test_the_c_grid_extends_past_infographs_top_only_when_asked_and_keeps_the_identity_at_its_default():
    from pydantic import ValidationError

    from domains.base import split_config
    from domains.graph.config import GraphConfig, c_grid

    assert c_grid() == C_GRID and c_grid(GraphConfig().svm_c_top) == C_GRID
    assert c_grid(6) == (*C_GRID, 1e4, 1e5, 1e6)
    assert "svm_c_top" not in split_config(GraphConfig())[0]  # the committed records keep their run ids
    assert split_config(GraphConfig(svm_c_top=5))[0]["svm_c_top"] == 5  # a larger top is another experiment
    with pytest.raises(ValidationError, match="svm_c_top"):
        GraphConfig(svm_c_top=2)  # a grid below InfoGraph's top would drop its C values
