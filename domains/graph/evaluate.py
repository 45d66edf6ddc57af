"""The SVM protocol of InfoGraph (``evaluate_embedding.svc_classify``), used by HCL and PUCL too.

On the frozen graph embeddings: an outer stratified ``folds``-fold cross-validation (shuffled, seeded);
on each training fold, scikit-learn's ``SVC`` (RBF kernel, gamma "scale": the defaults InfoGraph uses)
with C chosen from {1e-3, ..., 1e3} by ``GridSearchCV`` over an inner stratified ``inner_folds``-fold
split (shuffled, seeded), refit on the whole training fold and scored on the test fold. The metric is
the mean test accuracy over the outer folds, in percent. Like InfoGraph, the embeddings are used as
they are; ``standardize=True`` puts a StandardScaler (fit on the training fold) before the SVC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from domains.graph.config import C_GRID


def svm_protocol(x: np.ndarray, y: np.ndarray, seed: int, *, folds: int = 10, inner_folds: int = 5,
                 cs: Sequence[float] = C_GRID, standardize: bool = False, n_jobs: int = 1) -> dict[str, Any]:
    """Nested-CV SVM accuracy: {"accuracy" (mean %), "fold_accuracy" (%), "chosen_C"}."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    rng = np.random.RandomState(seed)
    fold_acc, chosen = [], []
    outer = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train_idx, test_idx in outer.split(x, y):
        inner = StratifiedKFold(n_splits=inner_folds, shuffle=True, random_state=rng.randint(2**31 - 1))
        model = make_pipeline(StandardScaler(), SVC()) if standardize else make_pipeline(SVC())
        grid = GridSearchCV(model, {"svc__C": list(cs)}, cv=inner, scoring="accuracy", n_jobs=n_jobs)
        grid.fit(x[train_idx], y[train_idx])
        fold_acc.append(100.0 * grid.score(x[test_idx], y[test_idx]))
        chosen.append(float(grid.best_params_["svc__C"]))
    return {"accuracy": float(np.mean(fold_acc)), "accuracy_fold_std": float(np.std(fold_acc)),
            "fold_accuracy": [float(a) for a in fold_acc], "chosen_C": chosen}
