"""The class prior from the data: estimates of τ+ (DCL, HCL) and α (PUCL) that read no label.

τ+ is the chance that a random candidate shares the anchor's class, ``τ+ = Σ_c p_c²`` for class
proportions ``p_c`` (``1/C`` for C balanced classes). Two estimators of the literature, both on what a
training step already has, are offered; :data:`ESTIMATORS` names them, the first being the default:

- ``kmeans`` (:func:`cluster_prior`): cluster the current embeddings, choose the number of clusters by
  the silhouette, and take ``τ+ = Σ_k p_k²`` over the cluster sizes.
- ``pu`` (:func:`pu_prior`): a positive-unlabelled mixture-proportion estimate on the anchor-candidate
  similarities: the anchor-positive scores are the labelled positives, the anchor-negative scores the
  unlabelled mixture whose positive fraction is τ+ (Best Bin Estimation, Garg et al. 2021).

:class:`PriorTracker` refreshes an estimate on a schedule, smooths it and keeps its history for the
record's learning curve. Two things here read labels, for the prior page only: :func:`class_structure`
(an evaluation records with it whether the classes are the cluster structure of its embeddings, which decides
whether the clustering estimate can find them) and :class:`SameClassShare` (a training loop counts with it the
share of its negatives that share the anchor's class: the τ+ an estimate is judged against). Every estimate is
clamped into :data:`PRIOR_RANGE`, inside the ranges the losses accept (``tau_plus`` in [0, 1), ``alpha`` in (0, 1)).

scikit-learn and scipy are imported inside the functions (the loss core imports only torch and numpy at
module level). Errors are ``ValueError``; non-finite inputs raise :class:`losses.NonFiniteError`, as the
losses do, so that a training loop can tell diverged weights from a misuse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from losses.checks import NonFiniteError
from losses.scores import Scores

ESTIMATORS: tuple[str, ...] = ("kmeans", "pu")
"""The estimator names of ``loss.prior_estimator``; the first is the default."""

PRIOR_RANGE: tuple[float, float] = (1e-4, 0.99)
"""Every estimate is clamped into this closed range, which lies inside both ``[0, 1)`` (dcl/hcl
``tau_plus``) and ``(0, 1)`` (pucl ``alpha``): a raw estimate of 1 (one cluster, or a mixture that looks
all positive) would make the debiased negative term ``(neg - τ+·pos)/(1 - τ+)`` divide by zero."""

MIN_ROWS = 10
"""The fewest embeddings :func:`cluster_prior` accepts, and the fewest scores per side :func:`pu_prior`
accepts: below this no partition and no tail fraction means anything."""

PU_SAMPLE = 50_000
"""The most positive and unlabelled scores :func:`pu_prior` keeps (a seeded subsample): they measure a
tail fraction to a binomial standard error of at most 0.5/sqrt(50,000) = 0.002, and sort in milliseconds."""

BBE_DELTA, BBE_GAMMA = 0.1, 0.01
"""Best Bin Estimation's confidence level and slack, the values of Garg et al. (2021)."""


@dataclass(frozen=True)
class PriorEstimate:
    """One estimate: ``value`` clamped into :data:`PRIOR_RANGE`, the ``estimator`` that gave it, and
    ``details``: flat JSON-ready numbers (``unclamped``, sample sizes, the clusters chosen...)."""

    value: float
    estimator: str
    details: dict[str, Any]


def _clamp(raw: float) -> float:
    return min(max(raw, PRIOR_RANGE[0]), PRIOR_RANGE[1])


def _as_numpy(name: str, x: Tensor, dim: int) -> np.ndarray:
    """``x`` detached as float64 numpy, after checking its type, rank and values."""
    if not isinstance(x, Tensor) or x.dim() != dim:
        shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        want = "[N, d]" if dim == 2 else "[N]"
        raise ValueError(f"{name} must be a {dim}-D tensor {want}, got {shape}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be floating point, got {x.dtype}")
    out = x.detach().to("cpu", torch.float64).numpy()
    if not np.isfinite(out).all():
        raise NonFiniteError(f"{name} contains NaN or infinite values")
    return out


def _subsample(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    return x if len(x) <= size else x[np.sort(rng.choice(len(x), size, replace=False))]


def _cluster_grid(k_max: int) -> list[int]:
    """Every k from 2 to 10, then a geometric grid with ratio 1.25 up to ``k_max`` (itself included)."""
    grid = set(range(2, min(10, k_max) + 1))
    k = 10.0
    while k < k_max:
        k *= 1.25
        grid.add(min(round(k), k_max))
    return sorted(grid)


def silhouette(distances: np.ndarray, labels: np.ndarray) -> float:
    """The mean silhouette (Rousseeuw 1987) of ``labels`` (integers from 0) over a precomputed distance matrix,
    the value of ``sklearn.metrics.silhouette_score(distances, labels, metric="precomputed")`` (a singleton
    cluster's member scores 0, as there). The per-cluster distance sums are one product of the matrix with the
    one-hot labels, where scikit-learn reduces the matrix chunk by chunk for every partition: 3-4 times faster
    on 1,024 rows, and :func:`cluster_prior` scores about 20 partitions per estimate."""
    sizes = np.bincount(labels)
    sums = distances @ np.eye(len(sizes))[labels]  # [n, clusters]: each row's distance sum to each cluster
    own_size = sizes[labels]
    rows = np.arange(len(labels))
    own = sums[rows, labels] / np.maximum(own_size - 1, 1)
    means = sums / np.maximum(sizes, 1)
    means[rows, labels] = np.inf
    means[:, sizes == 0] = np.inf
    nearest = means.min(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(own_size > 1, (nearest - own) / np.maximum(own, nearest), 0.0)
    return float(np.nan_to_num(scores).mean())


def _with_every_class(rows: np.ndarray, labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The drawn ``rows`` (sorted), where they miss a class of ``labels``, with one row of each missed class (drawn
    with ``rng``) in place of as many drawn rows of classes they hold more than once (drawn too, so in proportion to
    those classes' shares). A uniform draw can miss a rare class (one image of a class among 10,000): the cut of the
    Ward tree would then count fewer classes than the set has, and a draw of one class would leave nothing to score.
    Rows that hold every class are returned as drawn, and so are rows that the classes outnumber (no draw holds one
    row of each and more rows than classes; :func:`class_structure` then scores what was drawn, or says it cannot)."""
    classes = np.unique(labels)
    missed = np.setdiff1d(classes, labels[rows])
    if not missed.size or len(classes) >= len(rows):
        return rows
    order = rng.permutation(len(labels))
    held, first = np.unique(labels[order], return_index=True)  # the first row of each class in a random order
    added = order[first[np.isin(held, missed)]]
    spare = np.setdiff1d(np.arange(len(rows)), np.unique(labels[rows], return_index=True)[1])  # all but one a class
    dropped = rng.choice(spare, len(missed), replace=False)
    return np.sort(np.concatenate([np.delete(rows, dropped), added]))


def _ward(caller: str, embeddings: Tensor, labels: np.ndarray | None, sample: int, seed: int
          ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """What :func:`cluster_prior` clusters: ``sample`` rows drawn (seeded; the same rows of ``labels``),
    L2-normalised (the losses compare by cosine), their Euclidean distances and their Ward tree."""
    from scipy.cluster.hierarchy import linkage

    if not isinstance(sample, int) or sample < MIN_ROWS:
        raise ValueError(f"sample must be an integer >= {MIN_ROWS}, got {sample!r}")
    if isinstance(embeddings, Tensor) and embeddings.dim() == 2 and len(embeddings) > sample:
        # drawn before the copy to float64: a large evaluation set is never copied whole
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(len(embeddings), sample, replace=False))
        if labels is not None:
            rows = _with_every_class(rows, labels, rng)
        embeddings = embeddings[torch.from_numpy(rows).to(embeddings.device)]
        labels = None if labels is None else labels[rows]
    x = _as_numpy("embeddings", embeddings, 2)
    if len(x) < MIN_ROWS:
        raise ValueError(f"{caller} needs at least {MIN_ROWS} embeddings, got {len(x)}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not (norms > 0).all():
        raise ValueError("embeddings contain an all-zero row, which has no direction to cluster")
    x = x / norms
    distances = np.sqrt(np.maximum(2.0 - 2.0 * (x @ x.T), 0.0))
    np.fill_diagonal(distances, 0.0)
    return x, labels, distances, linkage(x, method="ward")


def class_structure(embeddings: Tensor, labels: Tensor | np.ndarray, *, seed: int = 0, sample: int = 2000
                    ) -> dict[str, float]:
    """How far the classes are the cluster structure of ``embeddings`` [N, d], which decides whether a
    clustering estimate (:func:`cluster_prior`) can find the class prior. It reads ``labels``: evaluations
    record it beside the label prior, for the prior page; nothing in training calls it.

    On the rows :func:`cluster_prior` would cluster (``sample`` drawn with ``seed``, L2-normalised), but with a row
    of every class the draw missed (:func:`_with_every_class`; the draw is unchanged where it holds every class):
    ``class_silhouette``, the silhouette of the class partition (near 0 or below: the classes are not
    clusters, whatever else separates them); ``class_ari``, the adjusted Rand index (Hubert & Arabie 1985,
    `sklearn.metrics.adjusted_rand_score`) between the classes and the cut of the Ward tree into as many
    clusters as there are classes (1: the clusters are the classes; 0: chance).

    ``zero_rows`` counts the all-zero rows, which have no direction: ReLU features can be zero for an image
    (Barbano et al.'s encoder with a head, ``paper-biased-head``). They are left out of the two scores, and where
    fewer than :data:`MIN_ROWS` rows are left, only the count is returned: an evaluation records what it can
    rather than failing a trained run. So it does where more classes than ``sample`` leave a draw of one row a
    class. Labels of one class, or of one row a class, are a ValueError: the data decides it, so a domain
    refuses such labels before training."""
    from scipy.cluster.hierarchy import fcluster
    from sklearn.metrics import adjusted_rand_score

    if isinstance(labels, Tensor):
        labels = labels.detach().cpu().numpy()
    labels = np.asarray(labels).reshape(-1)
    if len(labels) != len(embeddings):
        raise ValueError(f"class_structure: {len(labels)} labels for {len(embeddings)} embeddings")
    zero_rows = 0
    if isinstance(embeddings, Tensor) and embeddings.dim() == 2:
        directed = (embeddings != 0).any(dim=1).cpu().numpy()
        zero_rows = int(len(directed) - directed.sum())
        if zero_rows:
            embeddings, labels = embeddings[torch.from_numpy(directed).to(embeddings.device)], labels[directed]
            if len(labels) < MIN_ROWS or not scorable(labels):
                return {"zero_rows": zero_rows}
    if not scorable(labels):
        raise ValueError(f"class_structure needs at least 2 classes and more rows than classes, got "
                         f"{len(np.unique(labels))} classes")
    _, labels, distances, tree = _ward("class_structure", embeddings, labels, sample, seed)
    if not scorable(labels):  # a draw that more classes than ``sample`` left with too few
        return {"zero_rows": zero_rows}
    classes = np.unique(labels, return_inverse=True)[1]
    k = int(classes.max()) + 1
    cut = fcluster(tree, k, criterion="maxclust")
    return {"class_silhouette": silhouette(distances, classes), "class_ari": float(adjusted_rand_score(classes, cut)),
            "zero_rows": zero_rows}


def scorable(labels: np.ndarray) -> bool:
    """Whether :func:`class_structure` can score rows of these ``labels``: 2 classes or more, more rows than classes
    (the silhouette is undefined otherwise). Domains check their evaluation sets with it before training."""
    return 2 <= len(np.unique(labels)) < len(labels)


def cluster_prior(embeddings: Tensor, *, max_clusters: int = 64, seed: int = 0, sample: int = 2000) -> PriorEstimate:
    """τ+ from the cluster structure of ``embeddings`` [N, d]: ``Σ_k p_k²`` over the sizes of k clusters.

    The embeddings are L2-normalised (the losses compare them by cosine) and ``sample`` rows are drawn
    (seeded by ``seed``). The number of clusters k maximises the mean silhouette (Rousseeuw 1987,
    "Silhouettes: a graphical aid to the interpretation and validation of cluster analysis", on Euclidean
    distances; :func:`silhouette` computes scikit-learn's value faster) over every k from 2 to 10 and a
    geometric grid (ratio 1.25) up to ``max_clusters``, refined by up to 6 further k between the best
    grid point's neighbours. The candidate partitions are the cuts of one Ward tree (Ward 1963,
    `scipy.cluster.hierarchy.linkage`), which minimises the k-means objective greedily; the chosen one is
    then refined by Lloyd's k-means (`sklearn.cluster.KMeans`) from its centroids (the hierarchical
    initialisation of k-means, e.g. Milligan 1980).

    Why this variant: it was the most accurate of those tried on Gaussian mixtures on the sphere (C in
    {2, 4, 10, 12, 14, 30, 50}, balanced, and unbalanced at C = 2, 4, 10; 4 seeds each): within 8% of the
    true τ+ in every case at 2,000 x 128 and at 1,000 x 64 with more overlap, and within 14% at 2,000 x 32.
    k-means from random (k-means++) starts, one per k, chose the number of clusters by silhouette less
    reliably: a start that merges two classes scores k - 1 well (up to 53% off at C = 4, 34% at C = 50;
    three starts per k cost twice the time and were still 19% off at C = 10). The Ward tree gives every k
    from one deterministic O(N²) pass, with no local minimum per k. The eigengap of the normalised affinity
    (von Luxburg 2007, "A tutorial on spectral clustering", with Zelnik-Manor & Perona 2004's local scaling)
    found k exactly for balanced, separated classes but failed on unbalanced ones (small classes give no
    gap: 2.4-4.2 times the true τ+ at C = 10) and on noisier ones at C = 50 (10-25 times), so it is not used.

    Cost: on one CPU core, 0.03 s on 500 x 96 and 0.1 s on 1,024 x 256 (the Ward tree and the ~20
    silhouettes about equal shares); time and memory grow as sample² (``sample=1000`` costs about a quarter
    of the default 2,000).

    Limits: the silhouette is not defined for one cluster, so k >= 2 and on embeddings with no cluster
    structure (early in training) the estimate is about 1/2. ``details["silhouette"]`` says so: about 0.002
    on isotropic Gaussian noise in 128-D, against 0.08-0.3 on the mixtures above.
    """
    from scipy.cluster.hierarchy import fcluster
    from sklearn.cluster import KMeans

    if not isinstance(max_clusters, int) or max_clusters < 2:
        raise ValueError(f"max_clusters must be an integer >= 2, got {max_clusters!r}")
    x, _, distances, tree = _ward("cluster_prior", embeddings, None, sample, seed)
    n = len(x)

    silhouettes: dict[int, float] = {}

    def score(k: int) -> float:
        if k not in silhouettes:
            labels = np.unique(fcluster(tree, k, criterion="maxclust"), return_inverse=True)[1]
            silhouettes[k] = silhouette(distances, labels) if 2 <= labels.max() + 1 < n else -1.0
        return silhouettes[k]

    grid = _cluster_grid(min(max_clusters, n - 1))
    best = max(grid, key=score)
    at = grid.index(best)
    low, high = grid[max(at - 1, 0)], grid[min(at + 1, len(grid) - 1)]
    between = [k for k in range(low + 1, high) if k not in silhouettes]
    if between:
        picks = np.unique(np.linspace(0, len(between) - 1, min(6, len(between))).round().astype(int))
        best = max([best, *(between[i] for i in picks)], key=score)

    labels = fcluster(tree, best, criterion="maxclust")
    centroids = np.stack([x[labels == c].mean(0) for c in np.unique(labels)])
    labels = KMeans(len(centroids), init=centroids, n_init=1, random_state=seed).fit_predict(x)
    p = np.bincount(labels) / n
    raw = float((p**2).sum())
    return PriorEstimate(_clamp(raw), "kmeans", {
        "unclamped": raw, "clusters": int((p > 0).sum()), "silhouette": float(silhouettes[best]), "rows": n,
        "candidates": len(silhouettes)})


def pu_prior(positive: Tensor, unlabeled: Tensor, *, seed: int = 0) -> PriorEstimate:
    """The positive fraction of ``unlabeled`` scores, with ``positive`` scores as the labelled sample.

    Best Bin Estimation (Garg, Wu, Smola, Balakrishnan, Lipton, NeurIPS 2021, "Mixture Proportion
    Estimation and PU Learning: A Modern Approach", Algorithm 1). The unlabelled scores are a mixture
    ``U = α·P + (1 - α)·N``; the positives score high. With ``q_p(c)`` and ``q_u(c)`` the fractions of
    positive and unlabelled scores at or above a threshold c,

        ĉ = argmin_c  q_u(c)/q_p(c) + (1 + γ)/q_p(c) · ( sqrt(log(4/δ)/(2 n_p)) + sqrt(log(4/δ)/(2 n_u)) )
        α̂ = q_u(ĉ) / q_p(ĉ)

    (δ = 0.1, γ = 0.01 as in the paper; the thresholds are the positive scores, where the ratio is
    smallest). In the top bin, if it holds no negatives, ``q_u = α·q_p`` exactly; the second term (a DKW
    bound) keeps the bin large enough to be measured. Here the score itself, a similarity, is the
    classifier the paper trains. ``seed`` draws the subsample of :data:`PU_SAMPLE` scores per side.

    Why this and not a library: pulearn 0.2.0 (maintained) has class-prior estimators
    (``HistogramMatchPriorEstimator``, ``ScarEMPriorEstimator``), but they refit a classifier on the
    features, and on 1-D mixtures with known α (5 seeds each) its histogram match was biased low and noisy
    (α = 0.5 read as 0.32-0.45 on average, standard deviation up to 0.14: a minimum over 10 smoothed
    bins); pu-toolbox 1.11.0's KM2 (Ramaswamy, Scott, Tewari 2016, "Mixture proportion estimation via
    kernel embeddings of distributions") took 1-3 s per estimate on 800 scores per side and read α = 0.02
    as 0.06-0.14. No TIcE (Bekker & Davis 2018) package exists on PyPI. BBE on the same mixtures was
    within 0.015 of α where the components separate, in under a millisecond.

    Assumptions and their bias: (1) SCAR, "selected completely at random" (Elkan & Noto 2008): the
    labelled positives are drawn like the positives hidden in the unlabelled set. Augmentation positives
    (two views of one instance) violate it: they are more similar than two instances of one class, so the
    top bin holds labelled positives but few hidden ones, and α̂ is biased low. On Gaussian mixtures on
    the sphere (128-D, both views the sample plus noise, 2 to 50 classes, batch 256) it read 0-13% of τ+
    (clamped to 1e-4 where the view noise is at most the class spread) and still 30-76% (2 to 10
    classes) when the view noise was three times the class spread; with SCAR positives (a second sample
    of the class) it was within 10% of τ+ at every C. So on augmentation positives, the ``pu`` estimate
    is a lower bound, near 0 once training aligns the views.
    (2) Irreducibility (Blanchard, Lee, Scott 2010): some score range holds positives and no negatives;
    where the two overlap everywhere, α̂ is biased high
    (an estimator of the largest α consistent with the data): with SCAR positives but classes that
    overlap (class noise twice the above) it read 1.1, 1.4 and 2.8 times τ+ at C = 4, 10 and 50.
    """
    p = _as_numpy("positive", positive, 1)
    u = _as_numpy("unlabeled", unlabeled, 1)
    for name, values in (("positive", p), ("unlabeled", u)):
        if len(values) < MIN_ROWS:
            raise ValueError(f"pu_prior needs at least {MIN_ROWS} {name} scores, got {len(values)}")
    rng = np.random.default_rng(seed)
    p = np.sort(_subsample(p, PU_SAMPLE, rng))[::-1]
    u = np.sort(_subsample(u, PU_SAMPLE, rng))
    n_p, n_u = len(p), len(u)
    # The fraction of positives >= p[i]; among tied scores the last counts them all, and gives the smallest ratio.
    q_p = np.arange(1, n_p + 1) / n_p
    q_u = (n_u - np.searchsorted(u, p, side="left")) / n_u
    slack = (1 + BBE_GAMMA) * (math.sqrt(math.log(4 / BBE_DELTA) / (2 * n_p))
                               + math.sqrt(math.log(4 / BBE_DELTA) / (2 * n_u)))
    best = int(np.argmin((q_u + slack) / q_p))
    raw = float(q_u[best] / q_p[best])
    return PriorEstimate(_clamp(raw), "pu", {
        "unclamped": raw, "positives": n_p, "unlabeled": n_u, "threshold": float(p[best]),
        "top_positive_fraction": float(q_p[best])})


def scores_samples(scores: Scores, *, seed: int = 0, size: int = PU_SAMPLE) -> tuple[Tensor, Tensor]:
    """The positive and the negative logits of ``scores`` (1-D, detached, on the CPU), each at most ``size``
    of them: the negatives, which are most of the matrix, are drawn uniformly with replacement (seeded)
    on the logits' device, so that a large bank is never copied whole."""
    if not isinstance(scores, Scores):
        raise ValueError(f"scores must be a losses.Scores, got {type(scores).__name__}")
    logits = scores.logits.detach()
    positive = logits[scores.pos_mask]
    gen = np.random.default_rng(seed)
    if positive.numel() > size:
        positive = positive[torch.from_numpy(gen.choice(positive.numel(), size, replace=False)).to(logits.device)]
    if logits.numel() <= 2 * size:
        negative = logits[scores.neg_mask]
    else:
        flat = torch.from_numpy(gen.integers(0, logits.numel(), 2 * size)).to(logits.device)
        negative = logits.reshape(-1)[flat][scores.neg_mask.reshape(-1)[flat]]
    return positive.cpu(), negative[:size].cpu()


def estimate_prior(estimator: str, *, embeddings: Tensor | None = None, scores: Scores | None = None,
                   seed: int = 0) -> PriorEstimate:
    """One estimate by the named estimator: ``kmeans`` reads ``embeddings`` [N, d] (:func:`cluster_prior`),
    ``pu`` reads the anchor-positive and anchor-negative logits of ``scores`` (:func:`pu_prior`; the
    temperature does not matter, the estimate depends on the order of the scores alone)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown prior estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")
    if estimator == "kmeans":
        if embeddings is None:
            raise ValueError("prior estimator 'kmeans' needs embeddings [N, d]")
        return cluster_prior(embeddings, seed=seed)
    if scores is None:
        raise ValueError("prior estimator 'pu' needs scores (a losses.Scores)")
    positive, negative = scores_samples(scores, seed=seed)
    return pu_prior(positive, negative, seed=seed)


class PriorTracker:
    """The schedule and the smoothing of ``auto`` priors: ``value`` is ``initial`` (the paper's default)
    until the first estimate, which replaces it; each later raw estimate r moves it to
    ``momentum·value + (1 - momentum)·r`` (an exponential moving average, which damps the noise of one
    subsample). Estimates are due at the epochs ``every``, ``2·every``, ... (counted from 1: call
    :meth:`due` and :meth:`update` after an epoch, for the next). ``history`` has one flat, JSON-ready dict
    per estimate, for the record's learning curve."""

    def __init__(self, estimator: str, initial: float, *, every: int = 1, momentum: float = 0.5,
                 seed: int = 0) -> None:
        if estimator not in ESTIMATORS:
            raise ValueError(f"unknown prior estimator {estimator!r}; valid: {', '.join(ESTIMATORS)}")
        if isinstance(initial, bool) or not isinstance(initial, (int, float)) \
                or not PRIOR_RANGE[0] <= initial <= PRIOR_RANGE[1]:
            raise ValueError(f"initial prior must be a number in [{PRIOR_RANGE[0]:g}, {PRIOR_RANGE[1]:g}], "
                             f"got {initial!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an integer >= 1 (epochs between estimates), got {every!r}")
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
            raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}")
        self.estimator = estimator
        self.value = float(initial)
        self.every = every
        self.momentum = float(momentum)
        self.seed = seed
        self.history: list[dict[str, Any]] = []

    @property
    def uses_scores(self) -> bool:
        """Whether the estimator reads a batch's scores (``pu``) rather than embeddings (``kmeans``)."""
        return self.estimator == "pu"

    def state_dict(self) -> dict[str, Any]:
        """The current value and the history, for checkpoints (plain Python: a weights-only load takes it)."""
        return {"value": self.value, "history": [dict(entry) for entry in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])
        self.history = [dict(entry) for entry in state["history"]]

    def due(self, epoch: int) -> bool:
        """Whether an estimate is due after ``epoch`` (counted from 1)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1:
            raise ValueError(f"epoch must be an integer >= 1, got {epoch!r}")
        return epoch % self.every == 0

    def update(self, epoch: int, *, embeddings: Tensor | None = None, scores: Scores | None = None) -> float:
        """Estimate (seeded by ``seed + epoch``), smooth, append to ``history`` and return the new value."""
        self.due(epoch)  # validates the epoch
        estimate = estimate_prior(self.estimator, embeddings=embeddings, scores=scores, seed=self.seed + epoch)
        self.value = estimate.value if not self.history else \
            self.momentum * self.value + (1 - self.momentum) * estimate.value
        self.history.append({"epoch": epoch, "raw": estimate.value, "smoothed": self.value,
                             "estimator": self.estimator, **estimate.details})
        return self.value


class SameClassShare:
    """The share of the negatives a loss saw that share their anchor's class: τ+ as DCL defines it (Chuang et al.
    2020, Sec. 3: the chance that a negative, drawn as the loss draws it, has the anchor's class). It reads labels,
    so only the prior page uses it, after training; nothing in training reads it back.

    Under batches drawn uniformly at random it equals the label prior Σ_c p_c² in expectation (up to the
    O(1/N) of drawing N samples without replacement); where batches are not uniform (text's consecutive
    sentences) it is what the loss really faced. :meth:`add` counts on the labels' device (two integers,
    no wait for the device); :meth:`value` reads them once. :meth:`state_dict` carries the counts across a
    checkpoint (it reads them, so call it where the loop waits for the device anyway)."""

    def __init__(self) -> None:
        self._saved = (0, 0)  # (same-class negatives, negatives) restored from a checkpoint
        self._counts: Tensor | None = None  # the same two, counted on the device since

    def add(self, neg_mask: Tensor, anchor_labels: Tensor, candidate_labels: Tensor) -> None:
        """Count the negatives of one batch: ``neg_mask`` [A, K] (``Scores.neg_mask``) and the class labels of
        its A anchors and K candidates."""
        if anchor_labels.dim() != 1 or candidate_labels.dim() != 1 \
                or neg_mask.shape != (anchor_labels.shape[0], candidate_labels.shape[0]):
            raise ValueError(f"SameClassShare.add: neg_mask {tuple(neg_mask.shape)} does not match the anchor labels "
                             f"{tuple(anchor_labels.shape)} and the candidate labels {tuple(candidate_labels.shape)}")
        same = neg_mask & (anchor_labels[:, None] == candidate_labels[None, :])
        self._add(torch.stack([same.sum(), neg_mask.sum()]))

    def add_batches(self, labels: Tensor) -> None:
        """Count S batches (the rows of ``labels`` [S, B]) whose negatives are every other item of their batch
        (SimCLR: each of an image's views has every view of every other image as negatives, so the share is that
        of the ordered pairs of distinct images), in one pass."""
        if labels.dim() != 2:
            raise ValueError(f"SameClassShare.add_batches: labels must be [batches, batch size], got "
                             f"{tuple(labels.shape)}")
        n, b = labels.shape
        same = (labels[:, :, None] == labels[:, None, :]).sum() - n * b  # ordered pairs, each item with itself out
        self._add(torch.stack([same, torch.tensor(n * b * (b - 1), device=labels.device)]))

    def _add(self, counts: Tensor) -> None:
        """Add (same-class negatives, negatives) to the counts kept on the device."""
        self._counts = counts if self._counts is None else self._counts + counts

    def state_dict(self) -> dict[str, int]:
        same, total = self._saved
        if self._counts is not None:
            same, total = same + int(self._counts[0]), total + int(self._counts[1])
        return {"same": same, "negatives": total}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._saved, self._counts = (int(state["same"]), int(state["negatives"])), None

    def value(self) -> float | None:
        """The share over every batch counted; None before any negative."""
        state = self.state_dict()
        return state["same"] / state["negatives"] if state["negatives"] else None
