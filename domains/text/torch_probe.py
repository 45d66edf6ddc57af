"""SentEval's PyTorch logistic regression (``senteval/tools/classifier.py``, ``validation.py``), with every model
of a task's protocol trained at once as one batched linear layer, on any device.

SentEval's facts, kept: a linear layer (``nn.Linear`` init, the same seed for every model), summed cross-entropy,
Adam (lr 1e-3) whose ``weight_decay`` is the L2 value (on weight and bias), the L2 grid 10^-5, ..., 10^-2
(``[10**t for t in range(-5, -1)]``), batches of 64, an "epoch" of ``epoch_size`` = 4 passes, then the dev
accuracy; the best model so far is kept, and training stops at the (tenacity + 1)-th epoch without improvement
(tenacity 5; the count is never reset) or after ``max_epoch`` = 200 passes. The L2 value is chosen by the mean
dev accuracy (percent, rounded to 2 decimals, ties to the smaller value) over an inner stratified k-fold whose
held-out fold is also the early-stopping set; the final model is fitted on the whole training set with 5% of it
(SentEval's permutation with the seed) held out for early stopping.

The summed cross-entropy is what SentEval's code asks for (``loss_fn.size_average = False``), and what it got on
the PyTorch of its time (0.2-0.4.0). From PyTorch 0.4.1 on, a loss reads its ``reduction``, fixed when it is
built, so that assignment does nothing and SentEval run today averages over the batch
(tests/test_protocol_facts.py). Adam ignores a constant scale of the loss, so the two differ only in what
an L2 value means: averaged, weight decay l weighs as l·64 does here (64: the batch). Measured once (CR, 300-d SVD
of bag-of-words features, 10-fold): 77.09 with our grid, 77.14 with the grid times 64, different values chosen.

Features are fed raw, as SentEval feeds them. On request (``standardize``, the config's ``probe_standardize``)
each model sees its features z-scored with the mean and standard deviation of the rows it learns from (its own
training set: an inner fold's training rows, or the 95% of a training fold left after the validation split), so
that no held-out row shapes the features of the model that is scored on it (``fold_statistics``).

What differs, for speed: all models (outer fold x inner fold x L2 value, and each outer fold's final model for every
L2 value, so nothing waits for the selection) share one sequence of batches of the task's rows, and a model learns
only from the rows of its own training set (on average 52-61 of each 64). Each model's update is still its own Adam
step on its own loss (``tests/test_text_probe.py`` checks one against a plain nn.Linear + Adam loop). Models that
have stopped leave the batch. Permutations and the initial weights come from CPU generators, so the CPU and a GPU
train on the same batches; the device is synchronised once per epoch, never per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

L2_GRID = tuple(10.0 ** t for t in range(-5, -1))  # validation.py, the usepytorch branch


@dataclass(frozen=True)
class TorchProbe:
    """The classifier's settings (SentEval's defaults) and the device it trains on."""

    device: str = "cpu"
    seed: int = 1111
    batch_size: int = 64
    lr: float = 1e-3
    epoch_size: int = 4
    tenacity: int = 5
    max_epoch: int = 200
    validation_split: float = 0.05
    l2_grid: tuple[float, ...] = L2_GRID
    standardize: bool = False  # z-score each model's features by its training rows (SentEval: raw features)


def fold_statistics(X: np.ndarray, train_mask: np.ndarray, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Each model's feature means and standard deviations [d, M] (float64, a zero deviation read as 1), from the rows
    of X [N, d] where ``train_mask[:, m]`` holds and from no other: the rows a model is scored on never shape its
    features. Computed once per distinct training set (the L2 values of a fold share theirs)."""
    sets, inverse = np.unique(train_mask, axis=1, return_inverse=True)
    X64 = torch.as_tensor(X).to(device, torch.float64)
    mean = torch.empty(X.shape[1], sets.shape[1], dtype=torch.float64, device=device)
    std = torch.empty_like(mean)
    for j in range(sets.shape[1]):
        rows = X64[torch.as_tensor(np.flatnonzero(sets[:, j])).to(device)]
        mean[:, j], std[:, j] = rows.mean(0), rows.std(0, unbiased=False)
    index = torch.as_tensor(inverse.reshape(-1)).to(device)
    return mean[:, index], torch.where(std > 0, std, 1.0)[:, index]


Scaling = tuple[Tensor, Tensor]  # a model's feature means and 1 / standard deviations, each [d, 1, M], float32


def on_raw_features(W: Tensor, scaling: Scaling | None) -> Tensor:
    """Weights [d + 1, C, M] that score raw rows as W scores standardised ones: (x - mean) / std · w + b equals
    x · (w / std) + (b - mean · w / std). So the models train on standardised features without the features of
    every model being built (one copy of X serves them all)."""
    if scaling is None:
        return W
    mean, inv_std = scaling
    V = torch.cat([W[:-1] * inv_std, W[-1:]])
    V[-1] -= (mean * V[:-1]).sum(0)
    return V


def _to_standardised(grad: Tensor, scaling: Scaling | None) -> Tensor:
    """The gradient with respect to W of a loss whose gradient with respect to ``on_raw_features(W)`` is ``grad``."""
    if scaling is None:
        return grad
    mean, inv_std = scaling
    grad[:-1] = (grad[:-1] - mean * grad[-1:]) * inv_std
    return grad


def _initial_weights(dim: int, n_classes: int, seed: int) -> Tensor:
    """nn.Linear's default init (uniform in ±1/sqrt(dim) for weight and bias), as [dim + 1, n_classes]."""
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / dim ** 0.5
    return (torch.rand(dim + 1, n_classes, generator=gen, dtype=torch.float64) * 2 - 1).mul_(bound).float()


def _adam(W: Tensor, lr: float) -> torch.optim.Adam:
    """Adam over the models' weights; weight decay is added to the gradient per model, as SentEval's Adam adds
    its ``weight_decay``. Fused: one kernel per step, on the CPU as on CUDA."""
    return torch.optim.Adam([W], lr=lr, fused=True)


def _compacted(W: Tensor, optimizer: torch.optim.Adam, keep: Tensor, lr: float) -> tuple[Tensor, torch.optim.Adam]:
    """The columns ``keep`` of W with their Adam state."""
    state = optimizer.state[W]
    kept = W.detach()[:, :, keep].contiguous()
    out = _adam(kept, lr)
    out.state[kept] = {"step": state["step"].clone(), "exp_avg": state["exp_avg"][:, :, keep].contiguous(),
                       "exp_avg_sq": state["exp_avg_sq"][:, :, keep].contiguous()}
    return kept, out


def with_ones(X: np.ndarray, device: torch.device | str) -> Tensor:
    """X [N, d] as float32 with a ones column appended (the bias input), on ``device``: [N, d + 1]."""
    return torch.cat([torch.as_tensor(X, dtype=torch.float32), torch.ones(len(X), 1)], dim=1).to(device)


def fit_batched(X: np.ndarray, y: np.ndarray, train_mask: np.ndarray, dev_mask: np.ndarray, l2: np.ndarray,
                probe: TorchProbe) -> tuple[Tensor, np.ndarray, Tensor, int]:
    """Train M early-stopped logistic regressions on the rows of X [N, d]: model m learns from the rows where
    ``train_mask[:, m]`` holds and stops on its accuracy over ``dev_mask[:, m]``, with weight decay ``l2[m]``;
    with ``probe.standardize`` on features z-scored by the statistics of its training rows (``fold_statistics``).
    Returns each model's best weights [d + 1, C, M] (bias last) on raw features, its best dev accuracy (fraction)
    [M], X with the ones column on the device (to score other rows with ``predict``) and the number of passes run."""
    device = torch.device(probe.device)
    n, dim = X.shape
    n_classes = int(y.max()) + 1
    n_models = train_mask.shape[1]
    Xa = with_ones(X, device)
    labels = torch.as_tensor(y, dtype=torch.long).to(device)
    onehot = F.one_hot(labels, n_classes).float()
    train_w = torch.as_tensor(train_mask, dtype=torch.float32).to(device)  # [N, M]
    dev_w = torch.as_tensor(dev_mask, dtype=torch.float32).to(device)
    dev_n = dev_w.sum(0).clamp(min=1)
    decay = torch.as_tensor(l2, dtype=torch.float32).to(device)[None, None, :]
    scaling = None
    if probe.standardize:
        mean, std = fold_statistics(X, train_mask, device)
        scaling = mean[:, None, :].float(), (1.0 / std)[:, None, :].float()
    every_model = scaling

    # models last: the softmax over a few classes then runs along a strided axis, not a tiny contiguous one
    W = _initial_weights(dim, n_classes, probe.seed).to(device)[:, :, None].repeat(1, 1, n_models)
    optimizer = _adam(W, probe.lr)
    best_W = W.clone()
    best = torch.full((n_models,), -1.0, device=device)
    count = torch.zeros(n_models, dtype=torch.long, device=device)
    cols = torch.arange(n_models, device=device)  # the models still training: the columns of W, in order
    gen = torch.Generator().manual_seed(probe.seed)
    passes = 0
    while passes <= probe.max_epoch:
        order = torch.cat([torch.randperm(n, generator=gen) for _ in range(probe.epoch_size)]).to(device)
        for start in range(0, n * probe.epoch_size, probe.batch_size):
            end = min(start + probe.batch_size, (start // n + 1) * n)  # a batch never spans two passes
            rows = order[start:end]
            xb = Xa[rows]
            logits = (xb @ on_raw_features(W, scaling).view(dim + 1, -1)).view(len(rows), n_classes, -1)
            # d(summed cross-entropy)/d(logits), zero on the rows outside a model's training set
            g = (torch.softmax(logits, 1) - onehot[rows, :, None]) * train_w[rows, None, :]
            grad = _to_standardised((xb.T @ g.view(len(rows), -1)).view_as(W), scaling)
            W.grad = grad.add_(W * decay)
            optimizer.step()
        passes += probe.epoch_size
        with torch.no_grad():
            accuracy = ((predict(Xa, on_raw_features(W, scaling)) == labels[:, None]).float() * dev_w).sum(0) / dev_n
            improved = accuracy > best[cols]
            best[cols] = torch.where(improved, accuracy, best[cols])
            best_W[:, :, cols] = torch.where(improved, W, best_W[:, :, cols])
            keep = improved | (count[cols] < probe.tenacity)
            count[cols] += (~improved).long()
        n_keep = int(keep.sum())  # the one host sync of an epoch
        if n_keep == 0:
            break
        if n_keep < len(cols):  # stopped models leave the batch: the work follows the models still training
            cols, train_w, dev_w, dev_n = cols[keep], train_w[:, keep], dev_w[:, keep], dev_n[keep]
            decay = decay[:, :, keep]
            scaling = None if scaling is None else (scaling[0][:, :, keep], scaling[1][:, :, keep])
            W, optimizer = _compacted(W, optimizer, keep, probe.lr)
    return on_raw_features(best_W, every_model), best.cpu().numpy(), Xa, passes


def predict(Xa: Tensor, W: Tensor) -> Tensor:
    """Class predictions [N, M] of every model W [d + 1, C, M] for rows Xa [N, d + 1] (ones column last)."""
    return (Xa @ W.view(Xa.shape[1], -1)).view(Xa.shape[0], W.shape[1], W.shape[2]).argmax(1)


def stratified_folds(y: np.ndarray, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """SentEval's folds: (train rows, held-out rows) of a shuffled stratified k-fold of the labels y, seeded."""
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def rounded_best(scores) -> tuple[int, float]:
    """Index and score of the best candidate from its fold accuracies (fractions), one row per candidate:
    SentEval's selection, the mean in percent rounded to 2 decimals, ties to the first candidate."""
    means = [round(100 * float(np.mean(row)), 2) for row in scores]
    best = int(np.argmax(means))
    return best, means[best]


def _validation_split(rows: np.ndarray, probe: TorchProbe) -> tuple[np.ndarray, np.ndarray]:
    """SentEval's ``validation_split``: np.random seeded with the seed, one permutation, the first 5% are dev."""
    permutation = np.random.RandomState(probe.seed).permutation(len(rows))
    n_dev = int(probe.validation_split * len(rows))
    return rows[permutation[n_dev:]], rows[permutation[:n_dev]]


class _Models:
    """The columns of the batched model: one (train rows, dev rows, L2) triple each."""

    def __init__(self, n_rows: int):
        self.n_rows = n_rows
        self.train: list[np.ndarray] = []
        self.dev: list[np.ndarray] = []
        self.l2: list[float] = []

    def add(self, train: np.ndarray, dev: np.ndarray, l2: float) -> int:
        self.train.append(train)
        self.dev.append(dev)
        self.l2.append(l2)
        return len(self.l2) - 1

    def masks(self) -> tuple[np.ndarray, np.ndarray]:
        train = np.zeros((self.n_rows, len(self.l2)), dtype=bool)
        dev = np.zeros_like(train)
        for m, (tr, dv) in enumerate(zip(self.train, self.dev)):
            train[tr, m] = True
            dev[dv, m] = True
        return train, dev

    def fit(self, X: np.ndarray, y: np.ndarray, probe: TorchProbe) -> tuple[Tensor, np.ndarray, Tensor, int]:
        train, dev = self.masks()
        return fit_batched(X, y, train, dev, np.asarray(self.l2), probe)


def cross_validate(X: np.ndarray, y: np.ndarray, kfold: int, probe: TorchProbe) -> dict[str, Any]:
    """InnerKFoldClassifier: outer stratified k-fold; in each training fold the L2 value by an inner k-fold."""
    grid = probe.l2_grid
    models = _Models(len(y))
    plan = []
    for train_idx, test_idx in stratified_folds(y, kfold, probe.seed):
        folds = stratified_folds(y[train_idx], kfold, probe.seed)
        inner = [[models.add(train_idx[tr], train_idx[te], l2) for tr, te in folds] for l2 in grid]
        fit_rows, dev_rows = _validation_split(train_idx, probe)
        final = [models.add(fit_rows, dev_rows, l2) for l2 in grid]
        plan.append((test_idx, inner, final))
    W, dev_acc, Xa, passes = models.fit(X, y, probe)
    predictions = predict(Xa, W).cpu().numpy()
    accuracies, devs, chosen = [], [], []
    for test_idx, inner, final in plan:
        best, dev = rounded_best(dev_acc[np.asarray(inner)])
        accuracies.append(100 * float(np.mean(predictions[test_idx, final[best]] == y[test_idx])))
        devs.append(dev)
        chosen.append(grid[best])
    return {"accuracy": float(np.mean(accuracies)), "dev_accuracy": float(np.mean(devs)),
            "fold_accuracies": accuracies, "chosen_l2": chosen, "models": len(models.l2), "passes": passes}


def train_test(X_train: np.ndarray, y_train: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, kfold: int,
               probe: TorchProbe) -> dict[str, Any]:
    """KFoldClassifier: the L2 value by stratified k-fold on the training set, then test accuracy (F1 if binary)."""
    from sklearn.metrics import f1_score

    grid = probe.l2_grid
    models = _Models(len(y_train))
    folds = stratified_folds(y_train, kfold, probe.seed)
    inner = [[models.add(tr, te, l2) for tr, te in folds] for l2 in grid]
    fit_rows, dev_rows = _validation_split(np.arange(len(y_train)), probe)
    final = [models.add(fit_rows, dev_rows, l2) for l2 in grid]
    W, dev_acc, Xa, passes = models.fit(X_train, y_train, probe)
    best, dev = rounded_best(dev_acc[np.asarray(inner)])
    test = with_ones(X_test, Xa.device)
    predictions = predict(test, W[:, :, final[best]:final[best] + 1].contiguous()).cpu().numpy()[:, 0]
    result = {"accuracy": 100 * float(np.mean(predictions == y_test)), "dev_accuracy": dev, "chosen_l2": grid[best],
              "models": len(models.l2), "passes": passes}
    if y_train.max() == 1:
        result["f1"] = 100 * float(f1_score(y_test, predictions))
    return result
