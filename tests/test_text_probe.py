"""The torch SentEval classifier (domains/text/torch_probe.py): against a naive one-model-at-a-time reference of
SentEval's PyTorch classifier, against scikit-learn's LogisticRegression, and on problems with a known answer."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy.stats import norm

from domains.text import torch_probe as tp
from domains.text.config import TextConfig
from domains.text.senteval import BowEncoder, cross_validate, evaluate_senteval


def _gaussians(n: int, seed: int, shift: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Label 1: x ~ N(+shift, 1), label 0: N(-shift, 1) on the first feature; Bayes accuracy Phi(shift)."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    x = shift * (2.0 * y - 1.0) + rng.standard_normal(n)
    return np.hstack([x[:, None], rng.standard_normal((n, 4))]).astype(np.float32), y


def _reference_senteval_fit(X, y, l2, probe):
    """SentEval's PyTorchClassifier.fit for one model whose training and dev sets are all rows, written the plain
    way (nn.Linear, autograd, torch.optim.Adam with weight_decay, summed cross-entropy) on the same batches."""
    n, dim = X.shape
    linear = torch.nn.Linear(dim, int(y.max()) + 1)
    init = tp._initial_weights(dim, int(y.max()) + 1, probe.seed)
    with torch.no_grad():
        linear.weight.copy_(init[:-1].T)
        linear.bias.copy_(init[-1])
    optimizer = torch.optim.Adam(linear.parameters(), lr=probe.lr, weight_decay=l2)
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    gen = torch.Generator().manual_seed(probe.seed)
    best, best_state, count, nepoch = -1.0, None, 0, 0
    while nepoch <= probe.max_epoch:
        for _ in range(probe.epoch_size):
            perm = torch.randperm(n, generator=gen)
            for i in range(0, n, probe.batch_size):
                idx = perm[i:i + probe.batch_size]
                loss = torch.nn.functional.cross_entropy(linear(Xt[idx]), yt[idx], reduction="sum")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        nepoch += probe.epoch_size
        with torch.no_grad():
            accuracy = float((linear(Xt).argmax(1) == yt).float().mean())
        if accuracy > best:
            best, best_state = accuracy, (linear.weight.detach().clone(), linear.bias.detach().clone())
        else:
            if count >= probe.tenacity:
                break
            count += 1
    return best, best_state


def test_batched_models_match_the_one_model_reference():
    X, y = _gaussians(300, seed=0, shift=0.5)
    probe = tp.TorchProbe(batch_size=32, epoch_size=1, tenacity=2, max_epoch=30)
    l2 = np.array([1e-5, 1e-2])
    everything = np.ones((len(y), 2), dtype=bool)
    W, dev, _, _ = tp.fit_batched(X, y, everything, everything, l2, probe)
    for m in range(2):
        best, (weight, bias) = _reference_senteval_fit(X, y, float(l2[m]), probe)
        assert dev[m] == pytest.approx(best, abs=1e-6)
        assert torch.allclose(W[:-1, :, m], weight.T, atol=1e-4) and torch.allclose(W[-1, :, m], bias, atol=1e-4)


def test_a_model_learns_from_its_own_rows_only():
    """Batching never mixes models: a model trained beside others equals the same model trained alone."""
    X, y = _gaussians(240, seed=1)
    rng = np.random.default_rng(0)
    train = rng.random((240, 3)) < 0.7
    dev = ~train
    probe = tp.TorchProbe(epoch_size=1, tenacity=1, max_epoch=12)
    l2 = np.array([1e-4, 1e-3, 1e-2])
    W, acc, _, _ = tp.fit_batched(X, y, train, dev, l2, probe)
    W1, acc1, _, _ = tp.fit_batched(X, y, train[:, 1:2], dev[:, 1:2], l2[1:2], probe)
    assert acc[1] == pytest.approx(acc1[0]) and torch.allclose(W[:, :, 1], W1[:, :, 0], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cross_validation_agrees_with_sklearn_and_the_bayes_accuracy(seed):
    # SentEval's lr 1e-3 with early stopping needs a few thousand samples to reach the optimum (its tasks have
    # 3.7k-10.7k); with a few hundred it stops short of it
    X, y = _gaussians(3000, seed)
    ours = tp.cross_validate(X, y, 3, tp.TorchProbe())
    reference = cross_validate(X, y, kfold=3)
    assert abs(ours["accuracy"] - reference["accuracy"]) < 2.0  # the same folds; both near the optimum
    assert abs(ours["accuracy"] - 100 * norm.cdf(1.0)) < 2.0  # 3 standard errors at n = 3000
    assert len(ours["fold_accuracies"]) == 3 and set(ours["chosen_l2"]) <= set(tp.L2_GRID)


def test_final_model_agrees_with_sklearn_logistic_regression():
    """Three well-separated classes: the train/test protocol predicts like LogisticRegression (multinomial)."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(4)
    centres = 2.0 * rng.standard_normal((3, 6))
    y = np.arange(3000) % 3
    X = (centres[y] + rng.standard_normal((3000, 6))).astype(np.float32)
    ours = tp.train_test(X[:2400], y[:2400], X[2400:], y[2400:], 3, tp.TorchProbe())
    sk = LogisticRegression(C=1.0, max_iter=1000).fit(X[:2400], y[:2400]).score(X[2400:], y[2400:])
    assert abs(ours["accuracy"] - 100 * sk) < 2.0 and "f1" not in ours


def test_separable_pairs_and_f1():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 8)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    result = tp.train_test(X[:1500], y[:1500], X[1500:], y[1500:], 3, tp.TorchProbe())
    assert result["accuracy"] >= 98.0 and result["f1"] >= 98.0


def test_standardisation_makes_the_result_scale_free():
    """With probe_standardize (off by default: SentEval feeds raw features) the scale of the features no longer
    matters; raw, the same features at 1/1000 of the scale give other fold accuracies."""
    X, y = _gaussians(400, seed=5)
    settings = tp.TorchProbe(max_epoch=20, standardize=True)
    a = tp.cross_validate(X, y, 3, settings)
    b = tp.cross_validate(1e-3 * X, y, 3, settings)
    assert a["fold_accuracies"] == pytest.approx(b["fold_accuracies"], abs=0.5)
    raw = [tp.cross_validate(Z, y, 3, replace(settings, standardize=False))["fold_accuracies"] for Z in (X, 1e-3 * X)]
    assert raw[0] != pytest.approx(raw[1], abs=0.5)


def test_config_rejects_an_unknown_classifier():
    with pytest.raises(ValueError, match="classifier"):
        TextConfig(classifier="svm")


def _random_vectors(tmp_path, sentences, dim=64):
    """A word-vector file with a fixed random vector per word: a dense bag-of-words encoder."""
    words = sorted({w for s in sentences for w in s.lower().split()})
    rng = np.random.default_rng(0)
    path = tmp_path / "vectors.txt"
    path.write_text("".join(f"{w} {' '.join(f'{v:.4f}' for v in rng.standard_normal(dim))}\n" for w in words))
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("standardize,task_bound", [(False, 2.5), (True, 1.5)])
def test_torch_and_sklearn_agree_on_the_senteval_tasks(data_root, tmp_path, standardize, task_bound):
    """Every task in full, both classifiers, a dense 64-d random-vector bag of words, on SentEval's raw features
    and z-scored (about 3 minutes of CPU each on a busy machine; the torch side took 39-42 s of CPU time with one
    thread)."""
    from domains.text.senteval import load_tasks

    cfg = TextConfig(probe_standardize=standardize)
    sentences = [s for t in load_tasks(data_root, cfg) for s in t.train.all_sentences() +
                 (t.test.all_sentences() if t.test else [])]
    encoder = BowEncoder(_random_vectors(tmp_path, sentences))
    tic = time.process_time()
    ours, details = evaluate_senteval(encoder, data_root, cfg, log=lambda _: None)
    torch_cpu_s = time.process_time() - tic
    reference, _ = evaluate_senteval(encoder, data_root, replace(cfg, classifier="sklearn"), log=lambda _: None)
    print(f"torch classifier: {torch_cpu_s:.0f} s of CPU for the six tasks")
    assert {r["classifier"] for r in details["tasks"].values()} == {"torch"}
    gaps = {task: round(ours[task] - reference[task], 2) for task in cfg.senteval_tasks}
    print(f"torch - sklearn, points: {gaps}")
    # Two protocols (SentEval's early-stopped Adam with its L2 grid; scikit-learn's converged fit with its C grid)
    # on the same folds. Measured here, raw: MR -0.19, CR -1.11, SUBJ -0.02, MPQA -0.03, TREC -2.00, MRPC +0.93
    # (Adam at lr 1e-3 under-fits these small-scale mean word vectors, TREC's six classes most); z-scored: MR
    # +0.04, CR -0.95, SUBJ 0.00, MPQA 0.00, TREC +0.20, MRPC +0.35. CR, the smallest task (3,775), stops its final
    # models on a 5% dev split of ~170 sentences: the noisiest.
    assert abs(ours["accuracy"] - reference["accuracy"]) <= 1.0, gaps
    assert all(abs(gap) <= task_bound for gap in gaps.values()), gaps
