"""SentEval readers on the real data, and the protocol on synthetic embeddings with known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

from domains.text.senteval import (
    INNER_CS,
    BowEncoder,
    Classifier,
    cross_validate,
    pair_features,
    select_C,
    train_test,
)
from domains.text.senteval_tasks import read_task


@pytest.mark.parametrize("name, n_train, n_test, counts", [
    ("MR", 10662, None, [5331, 5331]),
    ("CR", 3775, None, [1368, 2407]),
    ("SUBJ", 10000, None, [5000, 5000]),
    ("MPQA", 10606, None, [7294, 3312]),
    ("TREC", 5452, 500, [86, 1162, 1250, 1223, 835, 896]),
    ("MRPC", 4076, 1725, [1323, 2753]),
])
def test_readers_give_the_published_counts(data_root, name, n_train, n_test, counts):
    task = read_task(data_root, name)
    assert len(task.train) == n_train
    assert (len(task.test) if task.test else None) == n_test
    assert np.bincount(task.train.labels).tolist() == counts


def test_blank_lines_are_samples_as_in_senteval(data_root):
    # SentEval reads read().splitlines(): CR's 4 and MPQA's 3 blank lines are empty sentences, which is how the
    # published counts (3,775 and 10,606) arise.
    assert sum(s == "" for s in read_task(data_root, "CR").train.sentences) == 4
    assert sum(s == "" for s in read_task(data_root, "MPQA").train.sentences) == 3
    assert sum(s == "" for s in read_task(data_root, "MR").train.sentences) == 0


def test_trec_latin1_and_test_labels(data_root):
    task = read_task(data_root, "TREC")
    assert any("sister\xf0city" in s for s in task.train.sentences)  # the one latin-1 byte, decoded
    assert np.bincount(task.test.labels).tolist() == [9, 138, 94, 65, 81, 113]
    assert not any(s.split()[0].count(":") for s in task.train.sentences)  # the fine label is dropped


def test_mrpc_header_and_bom(data_root):
    task = read_task(data_root, "MRPC")
    assert np.bincount(task.test.labels).tolist() == [578, 1147]
    everything = task.train.sentences + task.train.second + task.test.sentences + task.test.second
    assert not any("\ufeff" in s or "#1 String" in s for s in everything)
    assert len(task.train.second) == len(task.train.sentences)


def test_samples_are_sorted_like_senteval(data_root):
    split = read_task(data_root, "SUBJ").train
    keys = [(len(s.split()), int(y)) for s, y in zip(split.sentences, split.labels)]
    assert keys == sorted(keys)


def _gaussians(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x ~ N(+1, 1) for label 1 and N(-1, 1) for label 0: the Bayes accuracy is Phi(1) = 84.13%."""
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % 2)
    x = (2.0 * y - 1.0 + rng.standard_normal(n))[:, None]
    noise = 0.01 * rng.standard_normal((n, 3))  # irrelevant features
    return np.hstack([x, noise]), y


def test_cross_validation_reaches_the_bayes_accuracy():
    X, y = _gaussians(1500)
    result = cross_validate(X, y, kfold=3)
    assert abs(result["accuracy"] - 100 * norm.cdf(1.0)) < 3.0  # 3 standard errors at n = 1500
    assert len(result["fold_accuracies"]) == 3 and set(result["chosen_C"]) <= set(INNER_CS)


def test_selection_of_C_matches_grid_search():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold

    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 20))
    y = (X[:, 0] + 0.8 * rng.standard_normal(300) > 0).astype(int)
    Cs = (0.001, 0.01, 0.1, 1.0)
    folds = StratifiedKFold(n_splits=4, shuffle=True, random_state=1111)
    grid = GridSearchCV(LogisticRegression(solver="lbfgs", random_state=1111, max_iter=1000), {"C": list(Cs)},
                        cv=folds, refit=False).fit(X, y)
    C, dev = select_C(X, y, Cs, 4, Classifier(solver="lbfgs"))
    assert C == grid.best_params_["C"]
    assert dev == pytest.approx(100 * grid.best_score_, abs=0.01)


def test_train_test_on_separable_pairs_is_perfect():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((400, 8))
    same = np.arange(400) % 2 == 1
    b = np.where(same[:, None], a, rng.standard_normal((400, 8)))  # paraphrase iff the two vectors are equal
    X = pair_features(a, b)
    assert X.shape == (400, 16)
    result = train_test(X[:300], same[:300].astype(int), X[300:], same[300:].astype(int), kfold=3)
    assert result["accuracy"] == 100.0 and result["f1"] == 100.0


def test_multiclass_train_test_with_both_solvers():
    rng = np.random.default_rng(2)
    y = np.arange(600) % 3
    X = np.eye(3)[y] * 3 + 0.3 * rng.standard_normal((600, 3))
    for solver in ("lbfgs", "liblinear"):
        result = train_test(X[:450], y[:450], X[450:], y[450:], kfold=3, clf=Classifier(solver=solver))
        assert result["accuracy"] == 100.0 and "f1" not in result


def test_bag_of_words_counts_and_sparse_pairs():
    enc = BowEncoder()
    enc.prepare(["the cat sat", "The dog", ""])
    X = enc.encode(["the the cat", "", "unknown"]).toarray()
    vocab = enc.vocab
    expected = np.zeros(len(vocab))
    expected[vocab["the"]], expected[vocab["cat"]] = 2, 1
    assert np.allclose(X[0], expected / np.linalg.norm(expected))
    assert not X[1].any() and not X[2].any()
    pairs = pair_features(enc.encode(["the cat"]), enc.encode(["the dog"])).toarray()
    assert pairs.shape == (1, 2 * len(vocab))
    assert np.isclose(pairs[0, len(vocab) + vocab["the"]], 0.5)  # u * v on the shared word


def test_bag_of_words_with_word_vectors(tmp_path):
    path = tmp_path / "vectors.txt"
    path.write_text("2 2\ncat 1 0\ndog 0 1\n")  # word2vec header, then two vectors
    enc = BowEncoder(str(path))
    enc.prepare(["cat dog", "bird"])
    assert np.allclose(enc.encode(["cat dog", "bird", "cat"]), [[0.5, 0.5], [0, 0], [1, 0]])


@pytest.mark.slow
def test_bag_of_words_matches_published_unigram_baselines(data_root):
    """Full protocol, every task (minutes). Unigram bag-of-words linear classifiers of Wang & Manning (2012,
    Table 3: SVM-uni / MNB-uni): MR 76.2 / 77.9, CR 79.0 / 79.8, SUBJ 90.8 / 88.3, MPQA 86.1 / 85.3."""
    from domains.text.config import TextConfig
    from domains.text.senteval import evaluate_senteval

    metrics, _ = evaluate_senteval(BowEncoder(), data_root, TextConfig(), log=lambda _: None)
    for task, (low, high) in {"MR": (76.2, 77.9), "CR": (79.0, 79.8), "SUBJ": (88.3, 90.8),
                              "MPQA": (85.3, 86.1)}.items():
        assert low - 1.5 <= metrics[task] <= high + 1.5, task
    assert metrics["TREC"] > 80 and metrics["MRPC"] > 68


def test_option_to_run_the_senteval_package(data_root, monkeypatch):
    """The glue to the original package, with a stand-in ``senteval.engine`` (the package is not a dependency)."""
    import os
    import sys
    import types

    from domains.text.config import TextConfig
    from domains.text.senteval import evaluate_senteval

    seen = {}

    class SE:
        def __init__(self, params, batcher, prepare):
            self.params, self.batcher, self.prepare = params, batcher, prepare

        def eval(self, name):
            assert os.path.isdir(os.path.join(self.params["task_path"], "downstream", name))  # SentEval's layout
            self.prepare(self.params, [["a", "b"], ["c"]])
            seen[name] = self.batcher(self.params, [["a", "b"], []])
            return {"acc": 80.0, "devacc": 79.0, **({"f1": 85.0} if name == "MRPC" else {})}

    engine = types.ModuleType("senteval.engine")
    engine.SE = SE
    monkeypatch.setitem(sys.modules, "senteval", types.ModuleType("senteval"))
    monkeypatch.setitem(sys.modules, "senteval.engine", engine)
    cfg = TextConfig(senteval_tasks=("CR", "MRPC"), use_senteval_package=True)
    metrics, details = evaluate_senteval(BowEncoder(), data_root, cfg)
    assert metrics == {"CR": 80.0, "MRPC": 80.0, "MRPC_f1": 85.0, "accuracy": 80.0}
    assert details["protocol"] == "senteval package"
    assert seen["CR"].shape == (2, 3) and not seen["CR"][1].any()  # dense rows, the empty sentence is zero


def test_a_run_reads_each_senteval_task_once(data_root, tmp_path, monkeypatch):
    """``prepare`` read the tasks to refuse labels the protocol cannot score, then every seed's evaluation read them
    again (about a second a run on SentEval's six): a run of two seeds read each task 3 times, now once. What the
    seeds score from the tasks kept is what the protocol scores on tasks read afresh."""
    from domains.text import senteval
    from domains.text.config import TextConfig
    from harness.run import runner

    sets = {"senteval_tasks": "CR,TREC", "senteval_max_samples": "200", "kfold": "2"}
    cfg = TextConfig(senteval_tasks=("CR", "TREC"), senteval_max_samples=200, kfold=2)
    expected, _ = senteval.evaluate_senteval(BowEncoder(), data_root, cfg, log=lambda _: None)
    read = []
    monkeypatch.setattr(senteval, "read_task", lambda root, name: read.append(name) or read_task(root, name))
    request = runner.RunRequest(domain="text", method="bow", dataset="books", loss="infonce", seeds=[0, 1],
                                sets=sets, device="cpu", data_root=str(data_root),
                                results=str(tmp_path / "results"), quiet=True, trackers=[])
    outcomes = runner.execute(request)
    assert [o.status for o in outcomes] == ["completed", "completed"], [o.error for o in outcomes]
    assert sorted(read) == ["CR", "TREC"]
    assert all(o.record.metrics == pytest.approx(expected) for o in outcomes)
