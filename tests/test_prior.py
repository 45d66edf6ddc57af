"""The class-prior estimators (losses/prior.py) against known answers: mixtures with known class
proportions, a naive loop of Best Bin Estimation, and a hand-computed moving average. Every accuracy check
runs several seeds and allows one miss; none rests on one seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import losses
import losses.prior as prior
from losses.prior import ESTIMATORS, PRIOR_RANGE, PriorEstimate, PriorTracker, cluster_prior, estimate_prior, pu_prior

SEEDS = range(4)


def _sphere_mixture(props: list[float], n: int, dim: int, noise: float, seed: int, draws: int = 1
                    ) -> tuple[list[torch.Tensor], np.ndarray]:
    """``draws`` independent points for each of ``n`` class labels (class c with probability props[c]) of
    a Gaussian mixture around random unit centres, with isotropic noise of norm about ``noise``; the
    true τ+ is Σ p_c²."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(len(props), dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.choice(len(props), n, p=np.asarray(props) / sum(props))
    points = [centres[labels] + noise * rng.normal(size=(n, dim)) / math.sqrt(dim) for _ in range(draws)]
    return [torch.tensor(x, dtype=torch.float32) for x in points], labels


def _points(props: list[float], n: int, dim: int, noise: float, seed: int) -> torch.Tensor:
    return _sphere_mixture(props, n, dim, noise, seed)[0][0]


def _geometric(c: int) -> list[float]:
    w = np.geomspace(1.0, 0.1, c)
    return list(w / w.sum())


def _mostly(ratios: list[float], low: float, high: float) -> bool:
    """The median and all but at most one of ``ratios`` lie in [low, high]."""
    inside = [low <= r <= high for r in ratios]
    return low <= float(np.median(ratios)) <= high and sum(inside) >= len(ratios) - 1


# ---- the clustering estimator -----------------------------------------------------------------------

CLUSTER_CASES = {
    "balanced-2": [0.5] * 2, "balanced-4": [0.25] * 4, "balanced-10": [0.1] * 10,
    "unbalanced-2": [0.8, 0.2], "unbalanced-4": [0.55, 0.25, 0.15, 0.05], "unbalanced-10": _geometric(10),
}


@pytest.mark.parametrize("props", CLUSTER_CASES.values(), ids=CLUSTER_CASES.keys())
def test_cluster_prior_within_25_percent_up_to_ten_classes(props):
    true = sum(p * p for p in props) / sum(props) ** 2
    ratios = [cluster_prior(_points(props, 1000, 64, 1.5, seed), seed=seed).value / true for seed in SEEDS]
    assert _mostly(ratios, 0.75, 1.25), ratios


def test_cluster_prior_within_a_factor_two_at_fifty_classes():
    ratios = [cluster_prior(_points([0.02] * 50, 1000, 64, 1.5, seed), seed=seed).value / 0.02
              for seed in SEEDS]
    assert _mostly(ratios, 0.5, 2.0), ratios


def test_cluster_prior_is_sum_of_squared_cluster_fractions_and_reports_its_choice():
    x = _points([0.25] * 4, 600, 32, 1.0, seed=0)
    estimate = cluster_prior(x, seed=0)
    assert isinstance(estimate, PriorEstimate) and estimate.estimator == "kmeans"
    assert estimate.details["clusters"] == 4 and estimate.details["rows"] == 600
    assert 0.0 < estimate.details["silhouette"] <= 1.0
    assert estimate.value == pytest.approx(estimate.details["unclamped"])
    # Scale does not matter (the rows are L2-normalised): the same partition, the same estimate.
    assert cluster_prior(7.0 * x, seed=0).value == pytest.approx(estimate.value)


@pytest.mark.parametrize("seed", range(3))
def test_silhouette_is_scikit_learns(seed):
    """The vectorised silhouette against scikit-learn's, on partitions with a singleton cluster and on
    random ones, over Euclidean distances of unit vectors (what cluster_prior gives it)."""
    from sklearn.metrics import silhouette_score

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(120, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    distances = np.sqrt(np.maximum(2.0 - 2.0 * (x @ x.T), 0.0))
    np.fill_diagonal(distances, 0.0)
    partitions = [rng.integers(0, k, len(x)) for k in (2, 5, 17)]
    partitions.append(np.r_[0, np.ones(len(x) - 1, dtype=int)])  # a singleton cluster scores 0
    partitions.append(np.r_[np.arange(10), rng.integers(10, 13, len(x) - 10)])  # ten singletons
    for labels in partitions:
        labels = np.unique(labels, return_inverse=True)[1]
        assert prior.silhouette(distances, labels) == pytest.approx(
            silhouette_score(distances, labels, metric="precomputed"), abs=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
def test_class_structure_tells_classes_that_are_clusters_from_classes_that_are_not(seed):
    """Separated classes: the class partition has a clear silhouette and the Ward cut at C finds it (ARI near
    1). The same points with the classes drawn at random: no silhouette, ARI near 0. And classes that a strong
    nuisance split hides (the graph case: two groups that cut across four weak classes)."""
    [x], labels = _sphere_mixture([0.25] * 4, 600, 32, 0.5, seed)
    found = prior.class_structure(x, labels, seed=seed)
    assert found["class_ari"] > 0.9 and found["class_silhouette"] > 0.2
    shuffled = np.random.default_rng(seed).permutation(labels)
    chance = prior.class_structure(x, torch.from_numpy(shuffled), seed=seed)
    assert abs(chance["class_ari"]) < 0.05 and chance["class_silhouette"] < 0.0
    rng = np.random.default_rng(seed)
    nuisance = rng.integers(0, 2, 600)
    hidden = np.zeros((600, 32))
    hidden[:, 0] = 10.0 * (2 * nuisance - 1)  # the strong split
    hidden[np.arange(600), 1 + labels] += 0.5  # the weak classes
    hidden += rng.normal(size=hidden.shape)
    masked = prior.class_structure(torch.from_numpy(hidden), labels, seed=seed)
    assert masked["class_ari"] < 0.1 and masked["class_silhouette"] < 0.05


def test_class_structure_subsamples_the_labels_with_the_rows():
    [x], labels = _sphere_mixture([0.5, 0.5], 3000, 16, 0.3, 0)
    assert prior.class_structure(x, labels, sample=500)["class_ari"] > 0.95  # rows and labels drawn together


def test_class_structure_leaves_out_and_counts_all_zero_rows():
    """ReLU features can be all zero for an image (the biased track's head variant): such rows have no
    direction. They are counted and left out, so the scores are those of the other rows, where before the
    evaluation raised after a whole training run. Too few rows left: the count alone."""
    [x], labels = _sphere_mixture([0.5, 0.5], 400, 8, 0.3, 0)
    dead = torch.zeros(7, 8, dtype=x.dtype)
    with_dead = torch.cat([x[:100], dead, x[100:]])
    dead_labels = np.concatenate([labels[:100], np.ones(7, dtype=labels.dtype), labels[100:]])
    found = prior.class_structure(with_dead, dead_labels, seed=3)
    assert found == {**prior.class_structure(x, labels, seed=3), "zero_rows": 7}
    assert prior.class_structure(x, labels)["zero_rows"] == 0
    few = torch.cat([torch.zeros(40, 8), torch.randn(5, 8)])
    assert prior.class_structure(few, np.arange(45) % 2) == {"zero_rows": 40}


@pytest.mark.parametrize(("labels", "message"), [
    (np.zeros(50, dtype=int), "at least 2 classes"),
    (np.arange(49), "49 labels for 50 embeddings"),
])
def test_class_structure_refuses_labels_that_say_nothing(labels, message):
    with pytest.raises(ValueError, match=message):
        prior.class_structure(torch.randn(50, 4), labels)


def test_cluster_prior_subsamples_seeded():
    x = _points([0.1] * 10, 1500, 32, 1.0, seed=1)
    first = cluster_prior(x, seed=3, sample=500)
    assert first.details["rows"] == 500
    assert cluster_prior(x, seed=3, sample=500) == first  # the same seed, the same rows and answer
    assert cluster_prior(x, seed=4, sample=500).value == pytest.approx(0.1, rel=0.25)


def test_cluster_prior_caps_the_number_of_clusters():
    x = _points([0.1] * 10, 600, 32, 1.0, seed=2)
    assert cluster_prior(x, max_clusters=4).details["clusters"] <= 4


def test_cluster_prior_is_clamped_below_one():
    # 997 rows around one direction and 3 far from it: two clusters, Σ p² = 0.994 > 0.99.
    rng = np.random.default_rng(0)
    x = np.concatenate([np.eye(16)[0] + 0.05 * rng.normal(size=(997, 16)),
                        np.eye(16)[1] + 0.05 * rng.normal(size=(3, 16))])
    estimate = cluster_prior(torch.tensor(x), seed=0)
    assert estimate.details["unclamped"] > PRIOR_RANGE[1]
    assert estimate.value == PRIOR_RANGE[1]


# ---- the PU estimator -------------------------------------------------------------------------------

def _pu_sample(alpha: float, seed: int, n_pos: int = 500, n_unl: int = 20_000, family: str = "gauss"
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Labelled positives and an unlabelled mixture whose positives are drawn like them (SCAR)."""
    rng = np.random.default_rng(seed)
    if family == "gauss":
        def pos(n):
            return rng.normal(4.0, 1.0, n)

        def neg(n):
            return rng.normal(0.0, 1.0, n)
    else:  # uniform components that overlap on [0.5, 0.6]
        def pos(n):
            return rng.uniform(0.5, 1.0, n)

        def neg(n):
            return rng.uniform(0.0, 0.6, n)
    hidden = rng.binomial(n_unl, alpha)
    unlabeled = np.concatenate([pos(hidden), neg(n_unl - hidden)])
    return torch.tensor(pos(n_pos)), torch.tensor(rng.permutation(unlabeled))


@pytest.mark.parametrize("family", ["gauss", "uniform"])
@pytest.mark.parametrize("alpha", [0.02, 0.1, 0.3, 0.6])
def test_pu_prior_recovers_the_mixture_proportion_under_scar(alpha, family):
    estimates = [pu_prior(*_pu_sample(alpha, seed, family=family), seed=seed).value for seed in SEEDS]
    # 20%, or 0.01 for small alpha: Gaussian components overlap in their tails, and the negatives' tail
    # above the best bin (about 0.005 of them here) counts as positive.
    margin = max(0.2 * alpha, 0.01)
    assert _mostly(estimates, alpha - margin, alpha + margin), estimates


def _bbe_naive(positive: list[float], unlabeled: list[float], delta: float = 0.1, gamma: float = 0.01) -> float:
    """Garg et al. (2021), Algorithm 1, by a loop over every score as threshold."""
    n_p, n_u = len(positive), len(unlabeled)
    slack = math.sqrt(math.log(4 / delta) / (2 * n_p)) + math.sqrt(math.log(4 / delta) / (2 * n_u))
    best = None
    for c in sorted(set(positive) | set(unlabeled)):
        q_p = sum(s >= c for s in positive) / n_p
        q_u = sum(s >= c for s in unlabeled) / n_u
        if q_p == 0:
            continue
        bound = q_u / q_p + (1 + gamma) / q_p * slack
        if best is None or bound < best[0]:
            best = (bound, q_u / q_p)
    return best[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pu_prior_is_best_bin_estimation(seed):
    positive, unlabeled = _pu_sample(0.3, seed, n_pos=60, n_unl=400, family="uniform")
    positive = torch.round(positive * 50) / 50  # ties, which the sorted form must count as the loop does
    estimate = pu_prior(positive, unlabeled, seed=seed)
    assert estimate.details["unclamped"] == pytest.approx(_bbe_naive(positive.tolist(), unlabeled.tolist()))
    assert estimate.estimator == "pu" and estimate.details["positives"] == 60


def test_pu_prior_subsamples_and_clamps():
    positive, unlabeled = _pu_sample(0.1, 0, n_unl=prior.PU_SAMPLE + 5_000)
    estimate = pu_prior(positive, unlabeled)
    assert estimate.details["unlabeled"] == prior.PU_SAMPLE
    # Every unlabelled score below every positive one: no positive among them, clamped up to the floor.
    estimate = pu_prior(torch.linspace(1, 2, 50), torch.linspace(-2, 0, 500))
    assert estimate.details["unclamped"] == 0.0 and estimate.value == PRIOR_RANGE[0]


# ---- from a Scores object ---------------------------------------------------------------------------

def _views(props: list[float], batch: int, seed: int, view_noise: float | None) -> tuple[torch.Tensor, ...]:
    """Two views of ``batch`` samples of a sphere mixture, their labels and the true τ+ of the batch's
    negatives (the chance that another row shares the anchor's class). With ``view_noise=None`` the second
    view is another sample of the same class (SCAR holds); otherwise both views are the sample plus noise,
    as augmentations are (SCAR fails)."""
    (x, other), labels = _sphere_mixture(props, batch, 64, 1.0, seed, draws=2)
    if view_noise is None:
        z1, z2 = x, other
    else:
        gen = torch.Generator().manual_seed(seed)
        z1 = x + view_noise * torch.randn(batch, 64, generator=gen) / 8
        z2 = x + view_noise * torch.randn(batch, 64, generator=gen) / 8
    counts = np.bincount(labels)
    true = float((counts * (counts - 1)).sum() / (batch * (batch - 1)))
    return z1, z2, torch.as_tensor(labels), true


@pytest.mark.parametrize("classes", [2, 4, 10, 50])
def test_estimate_prior_pu_from_pair_scores_under_scar(classes):
    ratios = []
    for seed in SEEDS:
        z1, z2, _, true = _views([1.0 / classes] * classes, 256, seed, view_noise=None)
        ratios.append(estimate_prior("pu", scores=losses.pair_scores(z1, z2, 0.5), seed=seed).value / true)
    low, high = (0.5, 2.0) if classes == 50 else (0.75, 1.25)
    assert _mostly(ratios, low, high), ratios


def test_augmentation_positives_bias_the_pu_estimate_low():
    """SCAR fails for two views of one instance (closer than two instances of a class): the top bin holds
    the labelled positives but almost none of the hidden ones, and the estimate falls far below τ+."""
    ratios = []
    for seed in SEEDS:
        z1, z2, _, true = _views([0.1] * 10, 256, seed, view_noise=1.0)
        ratios.append(estimate_prior("pu", scores=losses.pair_scores(z1, z2, 0.5), seed=seed).value / true)
    assert _mostly(ratios, 0.0, 0.2), ratios


def test_estimate_prior_reads_no_label():
    z1, z2, y, _ = _views([0.25] * 4, 128, 0, view_noise=None)
    plain = estimate_prior("pu", scores=losses.pair_scores(z1, z2, 0.5), seed=1)
    labelled = estimate_prior("pu", scores=losses.pair_scores(z1, z2, 0.5, labels=y), seed=1)
    assert plain == labelled
    # The temperature divides every logit alike: the order, hence the estimate, does not change.
    assert estimate_prior("pu", scores=losses.pair_scores(z1, z2, 0.1), seed=1).value == pytest.approx(plain.value)


def test_estimate_prior_samples_the_negatives_of_a_large_bank():
    """A MoCo layout with more logits than twice the sample: the negatives are drawn, not copied whole.
    The key of each query is another sample of its class (SCAR), the bank a draw of the mixture."""
    estimates = []
    for seed in SEEDS:
        (first, second), labels = _sphere_mixture([0.1] * 10, 256 + 1024, 32, 1.0, seed, draws=2)
        scores = losses.bank_scores(first[:256], second[:256], first[256:], 0.2)
        assert scores.logits.numel() > 2 * prior.PU_SAMPLE
        estimate = estimate_prior("pu", scores=scores, seed=seed)
        assert estimate.details["unlabeled"] == prior.PU_SAMPLE
        true = float((labels[:256, None] == labels[None, 256:]).mean())
        estimates.append(estimate.value / true)
    assert _mostly(estimates, 0.75, 1.25), estimates


def test_estimate_prior_kmeans_is_cluster_prior():
    x = _points([0.25] * 4, 400, 32, 1.0, seed=0)
    assert estimate_prior("kmeans", embeddings=x, seed=2) == cluster_prior(x, seed=2)
    assert ESTIMATORS[0] == "kmeans" and set(ESTIMATORS) == {"kmeans", "pu"}


# ---- the tracker ------------------------------------------------------------------------------------

def test_tracker_schedule():
    tracker = PriorTracker("pu", 0.1, every=3)
    assert [e for e in range(1, 11) if tracker.due(e)] == [3, 6, 9]
    assert all(PriorTracker("kmeans", 0.1).due(e) for e in range(1, 5))


def test_tracker_smooths_with_an_exponential_moving_average(monkeypatch):
    raws = iter([0.3, 0.1, 0.2])
    monkeypatch.setattr(prior, "estimate_prior",
                        lambda estimator, **kw: PriorEstimate(next(raws), estimator, {"unclamped": 0.0, "rows": 5}))
    tracker = PriorTracker("kmeans", 0.05, every=2, momentum=0.25)
    assert tracker.value == 0.05 and tracker.history == []  # the paper default until the first estimate
    values = [tracker.update(epoch, embeddings=torch.zeros(1, 1)) for epoch in (2, 4, 6)]
    expected = [0.3, 0.25 * 0.3 + 0.75 * 0.1, 0.25 * (0.25 * 0.3 + 0.75 * 0.1) + 0.75 * 0.2]
    assert values == pytest.approx(expected) and tracker.value == pytest.approx(expected[-1])
    assert [h["epoch"] for h in tracker.history] == [2, 4, 6]
    assert [h["raw"] for h in tracker.history] == [0.3, 0.1, 0.2]
    assert [h["smoothed"] for h in tracker.history] == pytest.approx(expected)
    assert all(h["estimator"] == "kmeans" and h["rows"] == 5 for h in tracker.history)


def test_tracker_history_is_a_record_ready_curve():
    z1, z2, _, true = _views([0.1] * 10, 256, 0, view_noise=None)
    scores = losses.pair_scores(z1, z2, 0.5)
    tracker = PriorTracker("pu", 0.5, momentum=0.5, seed=7)
    for epoch in (1, 2):
        tracker.update(epoch, scores=scores)
    first, second = tracker.history
    assert first["smoothed"] == first["raw"]  # the first estimate replaces the default
    assert second["smoothed"] == pytest.approx(0.5 * first["raw"] + 0.5 * second["raw"])
    assert first["raw"] != second["raw"]  # each epoch draws its own subsample (seed + epoch)
    assert tracker.value == pytest.approx(true, rel=0.25)
    assert {"positives", "unlabeled", "threshold"} <= set(first)
    assert all(isinstance(v, (int, float, str)) for h in tracker.history for v in h.values())


# ---- bad input --------------------------------------------------------------------------------------

def test_unknown_estimator_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown prior estimator 'gmm'; valid: kmeans, pu"):
        estimate_prior("gmm", embeddings=torch.randn(20, 4))
    with pytest.raises(ValueError, match=r"valid: kmeans, pu"):
        PriorTracker("silhouette", 0.1)


def test_missing_input_for_the_estimator():
    with pytest.raises(ValueError, match="'kmeans' needs embeddings"):
        estimate_prior("kmeans", scores=losses.pair_scores(torch.randn(8, 4), torch.randn(8, 4), 0.5))
    with pytest.raises(ValueError, match="'pu' needs scores"):
        estimate_prior("pu", embeddings=torch.randn(20, 4))
    with pytest.raises(ValueError, match="scores must be a losses.Scores"):
        estimate_prior("pu", scores=torch.randn(4, 4))


@pytest.mark.parametrize("call, message", [
    (lambda: cluster_prior(torch.randn(0, 8)), "at least 10 embeddings, got 0"),
    (lambda: cluster_prior(torch.randn(9, 8)), "at least 10 embeddings, got 9"),
    (lambda: cluster_prior(torch.randn(40)), r"2-D tensor \[N, d\], got \(40,\)"),
    (lambda: cluster_prior(torch.zeros(20, 8)), "all-zero row"),
    (lambda: cluster_prior(torch.randn(20, 8), max_clusters=1), "max_clusters must be an integer >= 2"),
    (lambda: cluster_prior(torch.randn(20, 8), sample=5), "sample must be an integer >= 10"),
    (lambda: cluster_prior(torch.ones(20, 8, dtype=torch.bool)), "embeddings must be floating point"),
    (lambda: pu_prior(torch.randn(0), torch.randn(100)), "at least 10 positive scores, got 0"),
    (lambda: pu_prior(torch.randn(50), torch.randn(3)), "at least 10 unlabeled scores, got 3"),
    (lambda: pu_prior(torch.randn(5, 2), torch.randn(100)), r"positive must be a 1-D tensor \[N\]"),
    (lambda: pu_prior([0.1] * 20, torch.randn(100)), "positive must be a 1-D tensor"),
    (lambda: estimate_prior("pu", scores=losses.pair_scores(torch.randn(2, 4), torch.randn(2, 4), 0.5)),
     "at least 10 positive scores, got 4"),
])
def test_bad_input_is_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("call, name", [
    (lambda bad: cluster_prior(torch.randn(20, 8).index_put_((torch.tensor([3]),), torch.tensor(bad))),
     "embeddings"),
    (lambda bad: pu_prior(torch.randn(20).index_put_((torch.tensor([3]),), torch.tensor(bad)), torch.randn(50)),
     "positive"),
    (lambda bad: pu_prior(torch.randn(20), torch.randn(50).index_put_((torch.tensor([0]),), torch.tensor(bad))),
     "unlabeled"),
])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_values_raise_non_finite_error(call, name, bad):
    with pytest.raises(losses.NonFiniteError, match=f"{name} contains NaN or infinite values"):
        call(bad)


@pytest.mark.parametrize("kwargs, message", [
    ({"initial": 1.0}, r"initial prior must be a number in \[0.0001, 0.99\]"),
    ({"initial": 0.0}, "initial prior"),
    ({"initial": "0.1"}, "initial prior"),
    ({"initial": 0.1, "every": 0}, "every must be an integer >= 1"),
    ({"initial": 0.1, "every": 1.5}, "every must be an integer >= 1"),
    ({"initial": 0.1, "momentum": 1.0}, r"momentum must be a number in \[0, 1\)"),
    ({"initial": 0.1, "momentum": -0.1}, "momentum"),
])
def test_tracker_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PriorTracker("kmeans", **kwargs)


@pytest.mark.parametrize("epoch", [0, -1, 1.0])
def test_tracker_epochs_count_from_one(epoch):
    tracker = PriorTracker("pu", 0.1)
    with pytest.raises(ValueError, match="epoch must be an integer >= 1"):
        tracker.due(epoch)
    with pytest.raises(ValueError, match="epoch must be an integer >= 1"):
        tracker.update(epoch, scores=None)
