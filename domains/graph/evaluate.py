"""The SVM protocol of InfoGraph (``evaluate_embedding.svc_classify``), used by HCL and PUCL too.

On the frozen graph embeddings: an outer stratified ``folds``-fold cross-validation (shuffled, seeded);
on each training fold, scikit-learn's ``SVC`` with its defaults, as InfoGraph's code calls it (``SVC()``:
RBF kernel, gamma "scale" = 1 / (n_features · Var(X))), with C chosen from {1e-3, ..., 1e3} by an inner
stratified ``inner_folds``-fold cross-validation (the best mean inner accuracy wins, ties going to the
smaller C, as GridSearchCV does), refit on the whole training fold and scored on the test fold. The
metric is the mean test accuracy over the outer folds, in percent. Like InfoGraph, the embeddings are
used as they are; ``standardize=True`` puts a StandardScaler (fit on the training data only) before the
SVC.

Where this departs from the code behind published rows (sunfanyunn/InfoGraph and joshr17/HCL,
``evaluate_embedding.svc_classify``): "scale" is ``SVC()``'s default only since scikit-learn 0.22
(December 2019). Before it, ``SVC()`` used gamma = 1 / n_features ("auto"), so InfoGraph's own runs (its
ICLR 2020 submission predates 0.22) most likely had an RBF width that ignores the embeddings' scale. On
unscaled sum-pooled embeddings the two widths differ by the features' variance (about 5,600 on DD), and
so do the results: measured once (jsd, 20 epochs, seed 0, this nested CV), DD scores 70.8 with "scale"
and 58.7 (its majority class, C = 1e-3 in every fold) with "auto". Which one a later paper's rows used
depends on its scikit-learn, which its code does not pin. ``svm_gamma="auto"`` runs the older width.
Their inner search is ``GridSearchCV(..., cv=5)``: unshuffled stratified folds (of a data set shuffled once
at load); ours are shuffled and seeded, the same partition in distribution.

The inner search is written out rather than run through GridSearchCV: the same fits, half the
overhead on these small problems (hundreds of fits of a few milliseconds each).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from domains.errors import UserError
from domains.graph.config import C_GRID


def _fit_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
               c: float, standardize: bool, gamma: str = "scale") -> float:
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    if standardize:
        scaler = StandardScaler().fit(x_train)
        x_train, x_test = scaler.transform(x_train), scaler.transform(x_test)
    return float(SVC(C=c, gamma=gamma).fit(x_train, y_train).score(x_test, y_test))


def check_folds(y: np.ndarray, folds: int, inner_folds: int, dataset: str) -> None:
    """UserError when the labels ``y`` (of ``dataset``) cannot be split as :func:`svm_protocol` splits them:
    scikit-learn's StratifiedKFold refuses more folds than the largest class has members (on the whole set for the
    outer CV, on an outer training fold for the inner one), and the SVM refuses a training fold of a single class
    (after the training): a class of 1 or 2 graphs leaves some."""
    counts = np.bincount(y) if len(y) else np.zeros(0, dtype=np.int64)
    if np.count_nonzero(counts) < 2:
        raise UserError(f"{dataset}: all {len(y)} graphs have the same class label: the SVM protocol needs at "
                        "least two classes")
    largest = int(counts.max())
    in_training_fold = largest * (folds - 1) // folds
    if folds > largest or inner_folds > in_training_fold:
        raise UserError(f"{dataset}: svm_folds={folds} and svm_inner_folds={inner_folds} cannot split it "
                        f"(its largest class has {largest} graphs, about {in_training_fold} in an outer "
                        f"training fold); use at most svm_folds={largest} and svm_inner_folds={in_training_fold}")
    # How many graphs of each class a fold holds does not depend on the seed (StratifiedKFold deals each class's
    # graphs out as evenly as it can; the seed only picks which), so one seed's splits stand for every seed's.
    with warnings.catch_warnings():  # a class with fewer graphs than folds: refused below only where it matters
        warnings.filterwarnings("ignore", "The least populated class", UserWarning)
        one_class = any(len(np.unique(y[rows])) < 2 for outer, _, inner in _splits(y, 0, folds, inner_folds)
                        for rows in (outer, *(outer[a] for a, _ in inner)))
    if one_class:
        sizes = ", ".join(str(int(n)) for n in sorted(counts[counts > 0], reverse=True))
        # a class of n graphs keeps n - ceil(n / folds) in every outer training fold; 2 there keep 1 in every inner one
        enough = next(n for n in range(2, 3 * folds) if n - -(-n // folds) >= 2)
        raise UserError(f"{dataset}: svm_folds={folds} and svm_inner_folds={inner_folds} leave a training fold "
                        f"whose graphs are all of one class (the classes have {sizes} graphs): the SVM needs two "
                        f"classes in each; two classes of at least {enough} graphs each always give them")


def _splits(y: np.ndarray, seed: int, folds: int, inner_folds: int
            ) -> Iterator[tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, np.ndarray]]]]:
    """The protocol's splits of the labels ``y``: each outer fold's training and test rows, and the inner folds
    (training and validation rows, indices into the outer training rows) that choose its C."""
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.RandomState(seed)
    for train_idx, test_idx in StratifiedKFold(folds, shuffle=True, random_state=seed).split(y, y):
        inner = StratifiedKFold(inner_folds, shuffle=True, random_state=rng.randint(2**31 - 1))
        yield train_idx, test_idx, list(inner.split(y[train_idx], y[train_idx]))


def svm_protocol(x: np.ndarray, y: np.ndarray, seed: int, *, folds: int = 10, inner_folds: int = 5,
                 cs: Sequence[float] = C_GRID, standardize: bool = False, gamma: str = "scale",
                 n_jobs: int = 1) -> dict[str, Any]:
    """Nested-CV SVM accuracy: {"accuracy" (mean %), "accuracy_fold_std", "fold_accuracy" (%), "chosen_C"}."""
    from joblib import Parallel, delayed

    parallel = Parallel(n_jobs=n_jobs)
    fold_acc, chosen = [], []
    for train_idx, test_idx, inner in _splits(y, seed, folds, inner_folds):
        xt, yt = x[train_idx], y[train_idx]
        scores = parallel(delayed(_fit_score)(xt[a], yt[a], xt[b], yt[b], c, standardize, gamma)
                          for c in cs for a, b in inner)
        mean = np.asarray(scores).reshape(len(cs), len(inner)).mean(axis=1)
        best = float(cs[int(np.argmax(mean))])  # argmax: the first (smallest) C among ties
        fold_acc.append(100.0 * _fit_score(xt, yt, x[test_idx], y[test_idx], best, standardize, gamma))
        chosen.append(best)
    return {"accuracy": float(np.mean(fold_acc)), "accuracy_fold_std": float(np.std(fold_acc)),
            "fold_accuracy": fold_acc, "chosen_C": chosen}
