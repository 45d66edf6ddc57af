"""Labels that an evaluation cannot score: the class structure (losses.prior.class_structure) of a set whose classes
are very unbalanced scores every class of it; a graph set (a TU-format set of one's own) or a SentEval task (of one's
own) with a class too small for the classifier's folds, or too few items, is refused before training, where the
trained run failed after it."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.metrics import adjusted_rand_score, silhouette_score
from support import toy_tu
from tiny_domain import harness

from domains.errors import UserError
from domains.graph import evaluate
from harness.cli import main
from losses import prior

# --- the class structure of a large, unbalanced set --------------------------------------------------------------

def _points(labels: np.ndarray) -> torch.Tensor:
    """Every row of class c at the c-th unit vector: rows of a class coincide, classes are sqrt(2) apart."""
    return torch.eye(int(labels.max()) + 1, dtype=torch.float64)[torch.from_numpy(labels)]


@pytest.mark.parametrize("rare", [1, 3])
def test_a_draw_keeps_every_class_of_a_very_unbalanced_set(rare):
    """One row of each of ``rare`` classes among 10,000: the uniform draw of 2,000 rows holds none of them with seed 0
    (checked below), which left one class, and a ValueError after a whole training run. Each rare class now takes a
    row of the common one, so by hand: the 2,000 - rare common rows have silhouette 1 (distance 0 to their own class,
    sqrt(2) to every other), the rare rows, singletons, 0; the Ward cut into 1 + rare clusters is the classes."""
    labels = np.zeros(10_000, dtype=np.int64)
    labels[[137, 4_242, 7_777][:rare]] = np.arange(1, rare + 1)
    drawn = np.random.default_rng(0).choice(len(labels), 2000, replace=False)
    assert set(labels[drawn]) == {0}  # the draw the fix must amend
    found = prior.class_structure(_points(labels), labels, seed=0)
    assert found["class_silhouette"] == pytest.approx((2000 - rare) / 2000, abs=1e-12)
    assert found["class_ari"] == pytest.approx(1.0) and found["zero_rows"] == 0


def test_a_draw_that_holds_every_class_is_scored_as_before():
    """Balanced classes: the rows are the seeded uniform draw the docstring names, scored by scikit-learn's silhouette
    and adjusted Rand index on scipy's Ward cut (what every committed record's class structure was)."""
    rng = np.random.default_rng(5)
    labels = rng.permutation(np.arange(3000) % 3)
    x = rng.normal(size=(3000, 8)) + 3.0 * np.eye(8)[labels]
    rows = np.sort(np.random.default_rng(7).choice(3000, 2000, replace=False))
    unit = x[rows] / np.linalg.norm(x[rows], axis=1, keepdims=True)
    cut = fcluster(linkage(unit, method="ward"), 3, criterion="maxclust")
    found = prior.class_structure(torch.from_numpy(x), labels, seed=7)
    assert found["class_silhouette"] == pytest.approx(silhouette_score(unit, labels[rows]), abs=1e-9)
    assert found["class_ari"] == pytest.approx(adjusted_rand_score(labels[rows], cut), abs=1e-12)


def test_a_draw_that_more_classes_than_rows_leave_unscorable_gives_the_count_alone():
    """39 classes, one of them twice: the set can be scored, a draw of 10 rows (seed 1: ten classes) cannot, and no
    draw can hold a row of every class; the evaluation records what it can, as for all-zero rows."""
    labels = np.array([*range(39), 0])
    assert len(set(labels[np.random.default_rng(1).choice(40, 10, replace=False)])) == 10
    assert prior.class_structure(torch.randn(40, 4), labels, seed=1, sample=10) == {"zero_rows": 0}


@pytest.fixture
def harness_run(tmp_path, run_main, monkeypatch) -> Callable[..., subprocess.CompletedProcess]:
    """``harness_run(*ARGS, fresh=False)``: ``harness run --seeds 0 --quiet ARGS --results tmp_path/results`` with a
    cache of the test's own, called in this process (``run_main``: a refusal or a record, without a fresh
    interpreter's seconds of imports), or with ``fresh`` in a subprocess (each domain's check of what a user sees)."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")

    def call(*args: str, fresh: bool = False) -> subprocess.CompletedProcess:
        argv = ["run", "--seeds", "0", "--quiet", *args, "--results", str(tmp_path / "results")]
        if not fresh:
            return run_main(main, *argv)
        return harness(*argv, timeout=600)

    return call


# --- graph: a TU-format set of one's own -------------------------------------------------------------------------

def _tu_set(tmp_path: Path, labels: list[int]) -> str:
    """``toy_tu``'s first ``len(labels)`` graphs (triangles and 4-paths), labelled ``labels``."""
    raw = toy_tu(tmp_path / "data", "OWN")
    indicator = [int(g) for g in (raw / "OWN_graph_indicator.txt").read_text().split()]
    nodes = sum(g <= len(labels) for g in indicator)
    edges = [line for line in (raw / "OWN_A.txt").read_text().splitlines()
             if max(int(v) for v in line.split(",")) <= nodes]
    (raw / "OWN_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator[:nodes]))
    (raw / "OWN_A.txt").write_text("".join(f"{line}\n" for line in edges))
    (raw / "OWN_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    return "OWN"


def _graph(harness_run: Callable[..., subprocess.CompletedProcess], tmp_path: Path, labels: list[int], *sets: str,
           fresh: bool = False) -> subprocess.CompletedProcess:
    pytest.importorskip("torch_geometric")
    dataset = _tu_set(tmp_path, labels)
    settings = [arg for value in ("epochs=1", "hidden=8", *sets) for arg in ("--set", value)]
    return harness_run("--domain", "graph", "--dataset", dataset, "--loss", "jsd", *settings, "--data-root",
                       str(tmp_path / "data"), fresh=fresh)


@pytest.mark.parametrize(("labels", "sets", "message", "fresh"), [
    # the SVM's default folds (10 outer, 5 inner) leave an outer training fold of one class: a class of one graph;
    # in a subprocess, as a user meets it (the others in this process)
    ([0] * 23 + [1], (), "OWN: svm_folds=10 and svm_inner_folds=5 leave a training fold whose graphs are all of one "
                        "class (the classes have 23, 1 graphs): the SVM needs two classes in each; two classes of "
                        "at least 3 graphs each always give them", True),
    # a class of two graphs: an inner training fold of one class
    ([0] * 22 + [1] * 2, (), "(the classes have 22, 2 graphs)", False),
    # two small classes beside a large one: each outer training fold holds one of them, some inner fold neither
    ([0] * 22 + [1, 2], (), "(the classes have 22, 1, 1 graphs)", False),
    # fewer graphs than the class structure scores, with folds that split them
    ([0, 1] * 4, ("svm_folds=2", "svm_inner_folds=2"), "OWN: 8 graphs; the evaluation's class structure needs at "
                                                       "least 10", False),
])
def test_a_graph_set_the_evaluation_cannot_score_is_refused_before_training(tmp_path, harness_run, labels, sets,
                                                                            message, fresh):
    """Each trained, then failed: 'ValueError: The number of classes has to be greater than one' (the SVM) or
    'class_structure needs at least 10 embeddings'. (A set of one class was refused up front already.)"""
    proc = _graph(harness_run, tmp_path, labels, *sets, fresh=fresh)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "results").exists()  # refused before the run: no record


def test_folds_larger_than_the_largest_class_are_refused_naming_the_set():
    with pytest.raises(UserError) as refused:
        evaluate.check_folds(np.array([0] * 5 + [1] * 5), 10, 5, "OWN")
    assert str(refused.value) == ("OWN: svm_folds=10 and svm_inner_folds=5 cannot split it (its largest class has 5 "
                                  "graphs, about 4 in an outer training fold); use at most svm_folds=5 and "
                                  "svm_inner_folds=4")


def test_a_graph_set_whose_small_class_has_the_graphs_the_refusal_names_runs(tmp_path, harness_run):
    """Three graphs of the small class, as the refusal asks, are enough for every training fold of every seed."""
    proc = _graph(harness_run, tmp_path, [0] * 21 + [1] * 3)
    assert proc.returncode == 0, proc.stderr
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "results").glob("*.json")]
    assert record["status"] == "completed" and 0 <= record["metrics"]["accuracy"] <= 100


@pytest.mark.parametrize("labels", [[0] * 23 + [1], [0] * 22 + [1] * 2, [0] * 21 + [1] * 3, [0] * 22 + [1, 2],
                                    [0] * 14 + [1] * 7 + [2] * 2 + [3]])
@pytest.mark.filterwarnings("ignore:The least populated class")  # scikit-learn's, on the small classes these are
def test_which_graph_labels_leave_a_fold_of_one_class_does_not_depend_on_the_seed(labels):
    """check_folds reads one seed's splits for every seed's: the classes of every training fold, by seed, agree."""
    y = np.array(labels)

    def one_class(seed: int) -> bool:
        return any(len(set(y[rows])) < 2 for outer, _, inner in evaluate._splits(y, seed, 10, 5)
                   for rows in (outer, *(outer[a] for a, _ in inner)))

    assert len({one_class(seed) for seed in range(20)}) == 1


# --- text: SentEval tasks of one's own ---------------------------------------------------------------------------

def _senteval_root(tmp_path: Path, data_root: Path, positive: int, negative: int) -> Path:
    """A data root of one Gutenberg book and a SentEval MR task of ``positive`` and ``negative`` sentences."""
    root = tmp_path / "data"
    (root / "books").mkdir(parents=True)
    (root / "books" / "blake-poems.txt").symlink_to(data_root / "books" / "blake-poems.txt")
    task = root / "senteval" / "MR"
    task.mkdir(parents=True)
    (task / "rt-polarity.pos").write_text("".join(f"a fine film , number {i}\n" for i in range(positive)))
    (task / "rt-polarity.neg").write_text("".join(f"a dull film , number {i}\n" for i in range(negative)))
    return root


ONE_CLASS_FOLD = ("SentEval task MR ({root}/senteval/MR): its 31 training sentences are in classes of 30, 1: kfold=10 "
                  "leaves a training fold of one class, on which a classifier learns to predict that class only")


@pytest.mark.parametrize(("sizes", "sets", "message", "fresh"), [
    # a task of one class: its other file is empty (read only by the evaluation, after the training); in a
    # subprocess, as a user meets it (the others in this process)
    ((30, 0), (), "MR/rt-polarity.neg is empty: restore SentEval's file", True),
    # a class of one sentence, under either classifier: the training folds without it are of one class
    *(((30, 1), (f"classifier={name}",), ONE_CLASS_FOLD, False) for name in ("sklearn", "torch")),
    # fewer sentences than the folds (a subsample for a smoke run): StratifiedKFold refuses to split them
    ((30, 30), ("senteval_max_samples=5",), "its 5 training sentences are in classes of", False),
])
def test_a_senteval_task_the_evaluation_cannot_score_is_refused_before_training(tmp_path, data_root, harness_run,
                                                                               sizes, sets, message, fresh):
    """Each trained quick-thought, then failed: the empty file's UserError, 'ValueError: This solver needs samples of
    at least 2 classes' (scikit-learn; the torch classifier completed, its accuracy that of models that predict one
    class on some folds), or 'Cannot have number of splits n_splits=10 greater than the number of samples'."""
    root = _senteval_root(tmp_path, data_root, *sizes)
    settings = [arg for value in ("senteval_tasks=MR", "max_steps=2", "word_dim=16", "hidden_dim=32", "batch_size=50",
                                  "max_sentences=200", *sets) for arg in ("--set", value)]
    proc = harness_run("--domain", "text", "--dataset", "books", "--loss", "infonce", "--device", "cpu", *settings,
                       "--data-root", str(root), fresh=fresh)
    assert proc.returncode == 2, proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: ") and message.format(root=root) in line
    assert not (tmp_path / "results").exists()  # refused before the run: no record


def test_an_evaluation_without_prepare_refuses_a_one_class_fold_too(tmp_path, data_root):
    """The evaluation reads the tasks itself where no ``prepare`` read them, under the same rule: the torch classifier
    is refused a training fold of one class as in a run, where it fitted models that predict one class."""
    from domains.text.config import TextConfig
    from domains.text.senteval import evaluate_senteval

    class Dense:  # dense rows, so that the torch classifier (not scikit-learn's, for sparse ones) would run
        def prepare(self, sentences) -> None:
            pass

        def encode(self, sentences) -> np.ndarray:
            return np.array([[len(s), "fine" in s] for s in sentences], dtype=np.float32)

    root = _senteval_root(tmp_path, data_root, 30, 1)
    with pytest.raises(UserError, match=r"kfold=10 leaves a training fold of one class"):
        evaluate_senteval(Dense(), root, TextConfig(senteval_tasks=("MR",), classifier="torch"), log=lambda _: None)
