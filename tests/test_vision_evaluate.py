"""Linear evaluation and the kNN monitor on features with a known answer."""

from __future__ import annotations

import pytest
import torch

from domains.vision.evaluate import group_accuracy, knn_top1, linear_eval


def _clusters(n_per: int, classes: int, dim: int, spread: float, seed: int):
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=gen) * 4
    labels = torch.arange(classes).repeat_interleave(n_per)
    return centres[labels] + spread * torch.randn(len(labels), dim, generator=gen), labels


def test_linear_eval_separable_features_reach_100_percent():
    train_f, train_y = _clusters(60, 6, 16, 0.3, seed=0)
    test_f, test_y = _clusters(20, 6, 16, 0.3, seed=0)  # same centres (same generator start), new noise
    test_f = test_f + 0.1 * torch.randn_like(test_f)
    result = linear_eval(train_f, train_y, test_f, test_y, 6, epochs=40, batch_size=32)
    assert result["top1"] == pytest.approx(100.0)
    assert result["top5"] == pytest.approx(100.0)
    assert result["train_top1"] == pytest.approx(100.0)


def test_linear_eval_on_noise_is_at_chance():
    gen = torch.Generator().manual_seed(1)
    train_f, test_f = torch.randn(400, 8, generator=gen), torch.randn(2000, 8, generator=gen)
    train_y, test_y = torch.randint(0, 4, (400,), generator=gen), torch.randint(0, 4, (2000,), generator=gen)
    result = linear_eval(train_f, train_y, test_f, test_y, 4, epochs=20, batch_size=64)
    assert 18.0 < result["top1"] < 32.0  # chance is 25%
    assert result["top5"] == pytest.approx(100.0)  # 4 classes: the top 5 always holds the label


def test_linear_eval_ignores_unlabelled_training_rows():
    train_f, train_y = _clusters(30, 3, 8, 0.2, seed=2)
    noisy = torch.cat([train_f, torch.randn(500, 8) * 10])
    labels = torch.cat([train_y, torch.full((500,), -1)])
    result = linear_eval(noisy, labels, train_f, train_y, 3, epochs=60, batch_size=16)
    assert result["top1"] == pytest.approx(100.0)


def test_knn_matches_a_naive_vote():
    train_f, train_y = _clusters(25, 4, 6, 2.5, seed=3)
    test_f, test_y = _clusters(10, 4, 6, 2.5, seed=4)
    k, t = 7, 0.5
    fast = knn_top1(train_f, train_y, test_f, test_y, 4, k=k, temperature=t, chunk=7)
    tn = train_f / train_f.norm(dim=1, keepdim=True)
    correct = 0
    for x, y in zip(test_f, test_y):
        sims = tn @ (x / x.norm())
        top = sims.topk(k)
        votes = [0.0] * 4
        for s, i in zip(top.values.tolist(), top.indices.tolist()):
            votes[int(train_y[i])] += float(torch.exp(torch.tensor(s / t)))
        correct += int(max(range(4), key=votes.__getitem__) == int(y))
    assert fast == pytest.approx(100.0 * correct / len(test_y))
    # k larger than the bank falls back to all of it
    assert 0 <= knn_top1(train_f, train_y, test_f, test_y, 4, k=10_000) <= 100


def test_group_accuracy_splits_aligned_and_conflicting():
    labels = torch.tensor([0, 1, 2, 3])
    bias = torch.tensor([0, 1, 0, 0])  # the first two are bias-aligned
    pred = torch.tensor([0, 0, 2, 1])
    assert group_accuracy(pred, labels, bias) == {"aligned_top1": 50.0, "conflicting_top1": 50.0}
