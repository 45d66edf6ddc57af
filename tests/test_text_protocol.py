"""SentEval's protocol (facebookresearch/SentEval, ``senteval/tools/validation.py``, ``binary.py``, ``trec.py``,
``mrpc.py``) on fixed features shaped like each of the six tasks: our evaluation against answers derivable by
hand (both classifiers, with and without standardisation) and against scikit-learn's LogisticRegression run with
SentEval's procedure written out here; the standardisation option, whose statistics never see a held-out row; and
what a record says of the protocol it ran."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold

from domains.base import RunSpec
from domains.errors import UserError
from domains.text import TextDomain
from domains.text import torch_probe as tp
from domains.text.config import TASKS, TextConfig
from domains.text.senteval import Classifier, cross_validate, evaluate_task, train_test
from domains.text.senteval_tasks import Split, Task

SEED = 1111  # SentEval's seed, its folds' random_state
K = 3  # folds (SentEval's default is 5, the papers' 10): the structure is the same, the test 3x faster
CV_TASKS = ("MR", "CR", "SUBJ", "MPQA")


class FixedEncoder:
    """Sentences are row names ("r17") of a fixed feature table."""

    def __init__(self, table: np.ndarray):
        self.table = table

    def prepare(self, sentences) -> None:
        pass

    def encode(self, sentences) -> np.ndarray:
        return self.table[[int(s[1:]) for s in sentences]]


def _fixed_tasks(seed: int, signal: float, noise: float, flip: float, scale: int = 1, dim: int = 24):
    """The six tasks on a fixed table. A row's features say its true class (binary: ±signal on every feature;
    TREC: signal on its class's features; MRPC: the second sentence is the first (paraphrase) or its negation, so
    u * v is +-signal^2), plus Gaussian noise; a share ``flip`` of the labels is then flipped. The tasks have
    ``scale`` times 240-420 training rows. Returns the encoder, the tasks and, per task, the class each row's
    features say (train, test)."""
    rng = np.random.default_rng(seed)
    rows: list[np.ndarray] = []

    def add(features: np.ndarray) -> list[str]:
        start = sum(len(r) for r in rows)
        rows.append(features + noise * rng.standard_normal(features.shape))
        return [f"r{start + i}" for i in range(len(features))]

    def flipped(said: np.ndarray, classes: int) -> np.ndarray:
        turn = rng.random(len(said)) < flip
        return np.where(turn, (said + 1 + rng.integers(0, classes - 1, len(said))) % classes, said)

    tasks, said = {}, {}
    for name, n, share in zip(CV_TASKS, (400, 300, 360, 420), (0.5, 0.64, 0.5, 0.31)):
        n *= scale
        truth = (rng.random(n) < share).astype(np.int64)
        sentences = add(signal * (2.0 * truth - 1.0)[:, None] * np.ones(dim))
        tasks[name] = Task(name, Split(sentences, flipped(truth, 2)))
        said[name] = (truth, None)
    splits = []
    for n in (360 * scale, 120 * scale):
        truth = rng.integers(0, 6, n)
        splits.append((Split(add(signal * np.repeat(np.eye(6)[truth], dim // 6, axis=1)), flipped(truth, 6)), truth))
    tasks["TREC"] = Task("TREC", splits[0][0], splits[1][0])
    said["TREC"] = (splits[0][1], splits[1][1])
    splits = []
    for n in (360 * scale, 120 * scale):
        truth = (rng.random(n) < 0.66).astype(np.int64)  # MRPC's share of paraphrases
        first = signal * rng.choice([-1.0, 1.0], (n, dim))
        a, b = add(first), add(first * (2.0 * truth - 1.0)[:, None])
        splits.append((Split(a, flipped(truth, 2), b), truth))
    tasks["MRPC"] = Task("MRPC", splits[0][0], splits[1][0])
    said["MRPC"] = (splits[0][1], splits[1][1])
    return FixedEncoder(np.vstack(rows).astype(np.float32)), tasks, said


@pytest.mark.parametrize("classifier,standardize", [("sklearn", False), ("torch", False), ("torch", True),
                                                    ("sklearn", True)])
def test_each_task_gives_the_accuracy_derived_from_its_flipped_labels(classifier, standardize):
    """Nearly noiseless features that say each row's class, 6% of labels flipped: any classifier of the protocol
    predicts what the features say, so it errs on exactly the flipped rows. A cross-validated task's accuracy is
    then the mean over SentEval's folds (StratifiedKFold, shuffled, seed 1111) of the unflipped share of each
    held-out fold; TREC's and MRPC's is the unflipped share of the test set, MRPC's F1 that of predicting the
    features' class. The torch classifier gets 4x the rows: it stops early on a 5% split of the training fold,
    and on a dozen rows a model that predicts one class can tie the best there."""
    encoder, tasks, said = _fixed_tasks(0, signal=5.0, noise=0.02, flip=0.06, scale=4 if classifier == "torch" else 1)
    cfg = TextConfig(classifier=classifier, probe_standardize=standardize, kfold=K)
    for name in TASKS:
        task = tasks[name]
        result = evaluate_task(encoder, task, cfg)
        assert result["classifier"] == classifier and result["standardized"] == standardize
        if task.test is None:
            right = said[name][0] == task.train.labels
            folds = StratifiedKFold(K, shuffle=True, random_state=SEED).split(np.zeros(len(right)), task.train.labels)
            expected = [100 * right[test].mean() for _, test in folds]
            assert result["fold_accuracies"] == pytest.approx(expected, abs=1e-9), name
            assert result["accuracy"] == pytest.approx(np.mean(expected), abs=1e-9), name
        else:
            right = said[name][1] == task.test.labels
            assert result["accuracy"] == pytest.approx(100 * right.mean(), abs=1e-9), name
            if name == "MRPC":
                assert result["f1"] == pytest.approx(100 * f1_score(task.test.labels, said[name][1]), abs=1e-9)


class RandomEncoder:
    """Four random features a sentence."""

    def prepare(self, sentences) -> None:
        pass

    def encode(self, sentences) -> np.ndarray:
        return np.random.default_rng(0).standard_normal((len(sentences), 4)).astype(np.float32)


# ---------------------------------------------- SentEval's scikit-learn procedure (validation.py, usepytorch=False)


def _fit(C: float, X: np.ndarray, y: np.ndarray) -> LogisticRegression:
    # SentEval: LogisticRegression(C=reg, random_state=seed); max_iter raised from 100 so that every fit converges
    # (ours uses 1000): the procedure is SentEval's, the optimum the same
    return LogisticRegression(C=C, random_state=SEED, max_iter=1000).fit(X, y)


def _senteval_inner_kfold(X: np.ndarray, y: np.ndarray, k: int) -> tuple[float, float, list[float]]:
    """InnerKFoldClassifier.run: (devacc, acc, the C of each outer fold)."""
    regs = [2.0 ** t for t in range(-2, 4)]
    dev, test, chosen = [], [], []
    for train, held_out in StratifiedKFold(k, shuffle=True, random_state=SEED).split(X, y):
        Xt, yt = X[train], y[train]
        scores = []
        for reg in regs:
            inner = StratifiedKFold(k, shuffle=True, random_state=SEED).split(Xt, yt)
            scores.append(round(100 * np.mean([_fit(reg, Xt[a], yt[a]).score(Xt[b], yt[b]) for a, b in inner]), 2))
        chosen.append(regs[int(np.argmax(scores))])
        dev.append(max(scores))
        test.append(round(100 * _fit(chosen[-1], Xt, yt).score(X[held_out], y[held_out]), 2))
    return round(float(np.mean(dev)), 2), round(float(np.mean(test)), 2), chosen


def _senteval_kfold(X, y, X_test, y_test, k: int) -> tuple[float, float, float, np.ndarray]:
    """KFoldClassifier.run: (devacc, acc, the chosen C, the test predictions)."""
    regs = [2.0 ** t for t in range(-1, 6)]
    folds = list(StratifiedKFold(k, shuffle=True, random_state=SEED).split(X, y))
    scores = [round(100 * np.mean([_fit(reg, X[a], y[a]).score(X[b], y[b]) for a, b in folds]), 2) for reg in regs]
    best = regs[int(np.argmax(scores))]
    model = _fit(best, X, y)
    return max(scores), round(100 * model.score(X_test, y_test), 2), best, model.predict(X_test)


def test_each_task_matches_sentevals_scikit_learn_procedure():
    """Noisy features, where the C chosen matters: our scikit-learn path against SentEval's procedure (SentEval
    rounds each fold's test accuracy to 2 decimals before the mean, we do not: at most 0.005 apart). MRPC's
    reference features are SentEval's ``np.c_[np.abs(A - B), A * B]``."""
    encoder, tasks, _ = _fixed_tasks(1, signal=0.25, noise=1.0, flip=0.0)
    cfg = TextConfig(classifier="sklearn", kfold=K)
    for name in TASKS:
        task = tasks[name]
        ours = evaluate_task(encoder, task, cfg)
        if task.test is None:
            dev, acc, chosen = _senteval_inner_kfold(encoder.encode(task.train.sentences), task.train.labels, K)
            assert ours["chosen_C"] == chosen, name
        else:
            def features(split: Split) -> np.ndarray:
                a = encoder.encode(split.sentences)
                return a if split.second is None else np.c_[np.abs(a - encoder.encode(split.second)),
                                                             a * encoder.encode(split.second)]

            dev, acc, C, predictions = _senteval_kfold(features(task.train), task.train.labels,
                                                       features(task.test), task.test.labels, K)
            assert ours["chosen_C"] == C, name
            if name == "MRPC":
                assert ours["f1"] == pytest.approx(round(100 * f1_score(task.test.labels, predictions), 2), abs=0.006)
        assert ours["accuracy"] == pytest.approx(acc, abs=0.006), name
        assert ours["dev_accuracy"] == pytest.approx(dev, abs=0.006), name


# ------------------------------------------------------------------------------------------ standardisation


def _gaussians(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Label 1: N(+1, 1) on the first feature, label 0: N(-1, 1); four noise features; offsets and scales apart."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    X = np.hstack([(2.0 * y - 1.0 + rng.standard_normal(n))[:, None], rng.standard_normal((n, 4))])
    return (X * [3.0, 0.1, 10.0, 1.0, 2.0] + [5.0, -2.0, 30.0, 0.0, 1.0]).astype(np.float32), y


def test_a_standardised_model_is_a_model_trained_on_features_standardised_by_its_training_rows():
    """The batched fit folds each model's statistics into its weights: the same model as one trained alone on
    features z-scored by the mean and std of its own training rows (its dev rows and the others not counted)."""
    X, y = _gaussians(300, 0)
    rng = np.random.default_rng(1)
    train = rng.random((300, 2)) < 0.7
    dev = ~train & (rng.random((300, 2)) < 0.5)
    settings = tp.TorchProbe(batch_size=32, epoch_size=1, tenacity=2, max_epoch=30)
    l2 = np.array([1e-4, 1e-2])
    W, acc, Xa, _ = tp.fit_batched(X, y, train, dev, l2, replace(settings, standardize=True))
    for m in range(2):
        rows = X[train[:, m]].astype(np.float64)
        Z = ((X - rows.mean(0)) / rows.std(0)).astype(np.float32)
        W1, acc1, Za, _ = tp.fit_batched(Z, y, train[:, m:m + 1], dev[:, m:m + 1], l2[m:m + 1], settings)
        assert acc[m] == pytest.approx(acc1[0], abs=1e-6)
        assert np.allclose((Xa @ W[:, :, m]).numpy(), (Za @ W1[:, :, 0]).numpy(), atol=1e-4)


def test_statistics_come_from_the_training_rows_only():
    X, y = _gaussians(200, 2)
    train = np.zeros((200, 3), dtype=bool)
    train[:120, 0] = train[80:, 1] = train[:120, 2] = True
    mean, std = tp.fold_statistics(X, train)
    planted = X.copy()
    planted[150] = 1e4  # outside the training rows of models 0 and 2, inside those of model 1
    mean2, std2 = tp.fold_statistics(planted, train)
    for m in (0, 2):
        assert np.array_equal(mean[:, m].numpy(), X[:120].astype(np.float64).mean(0))
        assert np.array_equal(mean2[:, m].numpy(), mean[:, m].numpy()) and np.array_equal(std2[:, m], std[:, m])
    assert np.allclose(std[:, 1].numpy(), X[80:].astype(np.float64).std(0))
    assert (std2[:, 1] > 10 * std[:, 1]).all()


def _planted_in_first_fold(X: np.ndarray, y: np.ndarray, kfold: int, size: float) -> np.ndarray:
    """X with a held-out row of the first outer fold moved to ``size`` on its class's side of the first
    (informative) feature: from 50 on, every model that learnt the task predicts its class, however far it is."""
    _, held_out = tp.stratified_folds(y, kfold, SEED)[0]
    row = held_out[0]
    planted = X.copy()
    planted[row] = X.mean(0)
    planted[row, 0] = size * (2.0 * y[row] - 1.0)
    return planted


@pytest.mark.parametrize("classifier", ["torch", "sklearn"])
def test_a_held_out_fold_never_shapes_the_features_of_its_models(classifier):
    """A row of the first outer fold's held-out rows moved far out: that fold's models (inner folds, final fit)
    learn from standardised features whose statistics exclude it, so its accuracy and chosen L2 value are
    unchanged; the other folds, which train on the row, change (the test can fail)."""
    X, y = _gaussians(600, 3)
    near, far = (_planted_in_first_fold(X, y, 5, size) for size in (50.0, 1e4))
    if classifier == "torch":
        settings = tp.TorchProbe(standardize=True, max_epoch=40)
        before, after = (tp.cross_validate(Z, y, 5, settings) for Z in (near, far))
        key = "chosen_l2"
    else:
        before, after = (cross_validate(Z, y, 5, Classifier(standardize=True)) for Z in (near, far))
        key = "chosen_C"
    assert after["fold_accuracies"][0] == before["fold_accuracies"][0] and after[key][0] == before[key][0]
    assert after["fold_accuracies"][1:] != before["fold_accuracies"][1:]


@pytest.mark.parametrize("classifier", ["torch", "sklearn"])
def test_a_test_set_never_shapes_the_training_features(classifier):
    """TREC and MRPC: an outlier in the test set changes no model (the same L2 value, the same dev accuracy)
    and at most its own prediction."""
    X, y = _gaussians(500, 4)
    planted = X[400:].copy()
    planted[0] = 1e4
    if classifier == "torch":
        before, after = (tp.train_test(X[:400], y[:400], Z, y[400:], 5, tp.TorchProbe(standardize=True, max_epoch=40))
                         for Z in (X[400:], planted))
        key = "chosen_l2"
    else:
        before, after = (train_test(X[:400], y[:400], Z, y[400:], 5, Classifier(standardize=True))
                         for Z in (X[400:], planted))
        key = "chosen_C"
    assert after["dev_accuracy"] == before["dev_accuracy"] and after[key] == before[key]
    assert abs(after["accuracy"] - before["accuracy"]) <= 100 / 100 + 1e-9


# ------------------------------------------------------------------------------------- config and records


def test_the_default_protocol_is_senteval_raw_features():
    cfg = TextConfig()
    assert not cfg.probe_standardize and cfg.classifier == "torch" and cfg.kfold == 10 and cfg.eval_seed == SEED
    assert tp.TorchProbe().standardize is False and Classifier().standardize is False


def test_sparse_features_and_the_package_resolve_to_scikit_learn_and_refuse_standardisation():
    domain = TextDomain()
    assert domain.resolve_config(TextConfig(), "bow", "books").classifier == "sklearn"
    assert domain.resolve_config(TextConfig(word_vectors="v.txt"), "bow", "books").classifier == "torch"
    assert domain.resolve_config(TextConfig(use_senteval_package=True), "hf", "books").classifier == "sklearn"
    spec = RunSpec("text", "bow", "books", "infonce", {}, "quick", 0, TextConfig(probe_standardize=True))
    with pytest.raises(UserError, match="probe_standardize=true needs dense features"):
        domain.validate(spec)
    with pytest.raises(ValueError, match="use_senteval_package"):
        TextConfig(probe_standardize=True, use_senteval_package=True)


@pytest.mark.parametrize("classifier,standardize", [("torch", False), ("sklearn", True)])
def test_the_record_names_the_protocol_that_ran(classifier, standardize):
    from domains.text.evaluate import evaluate_synthetic
    from domains.text.senteval import CLASSIFIER_NAMES

    cfg = TextConfig(classifier=classifier, probe_standardize=standardize, synthetic_eval_sentences=200, kfold=3,
                     probe_max_epoch=4)
    _, details = evaluate_synthetic(RandomEncoder(), cfg)
    assert details["standardized"] == standardize and CLASSIFIER_NAMES[classifier] in details["protocol"]
    assert ("z-scored" in details["protocol"]) == standardize
    assert TextDomain().recorded_config({"classifier": classifier, "probe_standardize": standardize},
                                        details) == {"classifier": classifier, "probe_standardize": standardize}


@pytest.mark.parametrize("config,details,ran", [
    ({}, {"protocol": "ours (scikit-learn)", "tasks": {"MR": {"accuracy": 70.0}}}, ("sklearn", False)),
    ({}, {"synthetic": {"accuracy": 80.0}}, ("sklearn", False)),  # before the torch classifier: no label
    ({"classifier": "torch", "probe_standardize": True},
     {"protocol": "ours (SentEval's PyTorch logistic regression, batched (torch))",
      "tasks": {"MR": {"classifier": "torch"}}}, ("torch", True)),
    ({"classifier": "torch", "probe_standardize": True}, {"synthetic": {"classifier": "torch"}}, ("torch", True)),
    ({"classifier": "torch", "probe_standardize": False}, {"synthetic": {"classifier": "torch"}}, ("torch", False)),
    # scikit-learn never standardised before the option reached it, whatever the field said
    ({"classifier": "sklearn", "probe_standardize": True}, {"synthetic": {"classifier": "sklearn"}},
     ("sklearn", False)),
    ({"classifier": "torch", "probe_standardize": True},  # the bag of words' sparse counts went to scikit-learn
     {"protocol": "ours (scikit-learn)", "tasks": {"MR": {"classifier": "sklearn"}}}, ("sklearn", False)),
])
def test_records_from_before_the_protocol_said_what_it_standardised(config, details, ran):
    out = TextDomain().recorded_config({"epochs": 3, **config}, details)
    assert (out["classifier"], out["probe_standardize"]) == ran and out["epochs"] == 3
