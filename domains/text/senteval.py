"""SentEval's protocol (Conneau & Kiela 2018) on its transfer tasks (read by :mod:`domains.text.senteval_tasks`),
with a classifier in torch (``classifier=torch``, default: SentEval's PyTorch logistic regression, see
``torch_probe``) or scikit-learn (``classifier=sklearn``, the reference, below), on raw features as SentEval feeds
them.

Protocol (SentEval's scikit-learn path, ``senteval/tools/validation.py``; the torch path has the same folds and
structure with its own L2 grid and early stopping, ``torch_probe``):
- MR, CR, SUBJ, MPQA (and the synthetic task): outer stratified k-fold (k = 10); inside each training fold an
  inner stratified k-fold picks the logistic regression's C from {2^-2, ..., 2^3}; the metric is the mean test
  accuracy over the outer folds.
- TREC: C from {2^-1, ..., 2^5} by stratified k-fold on the training set; accuracy on the test set.
- MRPC: the same on the pair features ``[|u - v|, u * v]``; accuracy and F1 (positive class: paraphrase).
The dev score of each C is rounded to 2 decimals before the arg-max, as SentEval does (ties go to the smaller C).
SentEval rounds each fold's test accuracy to 2 decimals before the mean; we keep the unrounded mean (at most 0.005
points apart).
The solver (``eval_solver``, default ``auto``) is liblinear for sparse features (scikit-learn's default when
SentEval was written, one-vs-rest for TREC) and lbfgs for dense embeddings: each is the fast one there. They are
not quite the same model: liblinear also penalises the intercept (as a feature of value 1), lbfgs does not, and
on TREC's six classes lbfgs fits one multinomial (softmax) model where SentEval's scikit-learn of the time fitted
six one-vs-rest ones (``eval_solver=liblinear`` restores that). Sparse features (bag-of-words counts) always take
this path: the torch classifier wants dense rows. lbfgs runs up to ``eval_max_iter`` = 1,000 iterations: SentEval run
on today's scikit-learn gets lbfgs with its default 100, which stops before converging on some features (quick-
thought's on TREC: 3 to 6 points lower, the text page's note).

``probe_standardize=true`` (not SentEval's; off by default) z-scores the dense features of every fit with the mean
and standard deviation of that fit's own training rows (scikit-learn's ``StandardScaler`` in a pipeline here, the
same rule in ``torch_probe``): a held-out fold, a test set or an inner validation fold never shapes the features.
"""

from __future__ import annotations

import importlib
import os
import tempfile
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from domains.errors import UserError
from domains.text import torch_probe
from domains.text.config import TextConfig
from domains.text.senteval_tasks import Split, Task, read_task, subsample

INNER_CS = tuple(2.0 ** t for t in range(-2, 4))  # InnerKFoldClassifier (MR, CR, SUBJ, MPQA)
TRAIN_TEST_CS = tuple(2.0 ** t for t in range(-1, 6))  # KFoldClassifier (TREC, MRPC)


# --------------------------------------------------------------------------------------- protocol


@dataclass(frozen=True)
class Classifier:
    """The protocol's L2-regularised logistic regression, but for its C. Solver ``auto``: liblinear on sparse
    features (bag of words), where it is far faster, and lbfgs on dense embeddings, where liblinear is slow."""

    seed: int = 1111
    solver: str = "auto"
    max_iter: int = 1000
    standardize: bool = False  # z-score the features with the statistics of the rows each fit learns from

    def fit(self, C: float, X, y: np.ndarray):
        from sklearn.linear_model import LogisticRegression
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        solver = self.solver if self.solver != "auto" else "liblinear" if hasattr(X, "tocsr") else "lbfgs"
        model = LogisticRegression(C=C, solver=solver, random_state=self.seed, max_iter=self.max_iter)
        if solver == "liblinear" and len(np.unique(y)) > 2:
            model = OneVsRestClassifier(model)  # liblinear is binary: one-vs-rest, as SentEval's scikit-learn did
        if self.standardize:  # the scaler learns from the rows of this fit; score and predict reuse its statistics
            model = make_pipeline(StandardScaler(), model)
        return model.fit(X, y)


def _fold_score(X, y, train_idx, test_idx, C: float, clf: Classifier) -> float:
    return float(clf.fit(C, X[train_idx], y[train_idx]).score(X[test_idx], y[test_idx]))


def select_C(X, y, Cs: Sequence[float], kfold: int, clf: Classifier, jobs: int = 1) -> tuple[float, float]:
    """The C with the best mean accuracy (percent, rounded to 2 decimals) over a stratified k-fold of (X, y)."""
    from joblib import Parallel, delayed

    folds = torch_probe.stratified_folds(y, kfold, clf.seed)
    scores = Parallel(n_jobs=jobs)(delayed(_fold_score)(X, y, tr, te, C, clf) for C in Cs for tr, te in folds)
    best, dev = torch_probe.rounded_best([scores[i * kfold:(i + 1) * kfold] for i in range(len(Cs))])
    return Cs[best], dev


def cross_validate(X, y: np.ndarray, kfold: int = 10, clf: Classifier = Classifier(),
                   Cs: Sequence[float] = INNER_CS, jobs: int = 1) -> dict[str, Any]:
    """MR/CR/SUBJ/MPQA protocol: outer stratified k-fold, C chosen by an inner k-fold in each training fold."""
    from threadpoolctl import threadpool_limits

    accuracies, devs, chosen = [], [], []
    with threadpool_limits(limits=1):  # many small fits: BLAS threads only contend (6x slower on a busy CPU)
        for train_idx, test_idx in torch_probe.stratified_folds(y, kfold, clf.seed):
            C, dev = select_C(X[train_idx], y[train_idx], Cs, kfold, clf, jobs)
            model = clf.fit(C, X[train_idx], y[train_idx])
            accuracies.append(100 * float(model.score(X[test_idx], y[test_idx])))
            devs.append(dev)
            chosen.append(C)
    return {"accuracy": float(np.mean(accuracies)), "dev_accuracy": float(np.mean(devs)),
            "fold_accuracies": accuracies, "chosen_C": chosen}


def train_test(X_train, y_train: np.ndarray, X_test, y_test: np.ndarray, kfold: int = 10,
               clf: Classifier = Classifier(), Cs: Sequence[float] = TRAIN_TEST_CS, jobs: int = 1) -> dict[str, Any]:
    """TREC/MRPC protocol: C by stratified k-fold on the training set, then accuracy on the test set."""
    from sklearn.metrics import f1_score
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        C, dev = select_C(X_train, y_train, Cs, kfold, clf, jobs)
        predictions = clf.fit(C, X_train, y_train).predict(X_test)
    result = {"accuracy": 100 * float(np.mean(predictions == y_test)), "dev_accuracy": dev, "chosen_C": C}
    if len(np.unique(y_train)) == 2:
        result["f1"] = 100 * float(f1_score(y_test, predictions))
    return result


def pair_features(a, b):
    """``[|u - v|, u * v]`` for dense arrays or scipy sparse matrices."""
    if hasattr(a, "multiply"):
        import scipy.sparse as sp

        return sp.hstack([abs(a - b), a.multiply(b)]).tocsr()
    return np.concatenate([np.abs(a - b), a * b], axis=1)


# ------------------------------------------------------------------------------------ bag of words


class BowEncoder:
    """The bag-of-words baseline (no training). Without word vectors: the L2-normalised word counts over the
    vocabulary of the task's own sentences (SentEval's ``prepare`` sees every sentence of a task, so an encoder
    may build its vocabulary there). With ``word_vectors``: the mean of the sentence's word vectors, zero
    when none is known (SentEval's ``examples/bow.py``)."""

    def __init__(self, word_vectors: str = "", lowercase: bool = True):
        self.word_vectors, self.lowercase = word_vectors, lowercase
        self.vocab: dict[str, int] = {}
        self.vectors: dict[str, np.ndarray] = {}

    def _tokens(self, sentence: str) -> list[str]:
        return (sentence.lower() if self.lowercase else sentence).split()

    def prepare(self, sentences: Sequence[str]) -> None:
        words = sorted({w for s in sentences for w in self._tokens(s)})
        if self.word_vectors:
            from domains.text.models import no_word_known, read_word_vectors

            self.vectors = read_word_vectors(self.word_vectors, set(words))
            if not self.vectors:  # every sentence would be the zero vector: the probe would score chance
                raise no_word_known(self.word_vectors, len(words))
        self.vocab = {w: i for i, w in enumerate(words)}

    def encode(self, sentences: Sequence[str]):
        if self.word_vectors:
            dim = len(next(iter(self.vectors.values()))) if self.vectors else 1
            out = np.zeros((len(sentences), dim), dtype=np.float32)
            for i, s in enumerate(sentences):
                known = [self.vectors[w] for w in self._tokens(s) if w in self.vectors]
                if known:
                    out[i] = np.mean(known, axis=0)
            return out
        import scipy.sparse as sp
        from sklearn.preprocessing import normalize

        rows, cols = [], []
        for i, s in enumerate(sentences):
            for w in self._tokens(s):
                if w in self.vocab:
                    rows.append(i)
                    cols.append(self.vocab[w])
        counts = sp.csr_matrix((np.ones(len(rows), dtype=np.float64), (rows, cols)),
                               shape=(len(sentences), max(len(self.vocab), 1)))
        counts.sum_duplicates()
        return normalize(counts)


# ------------------------------------------------------------------------------------- evaluation


def classifier(cfg: TextConfig) -> Classifier:
    return Classifier(cfg.eval_seed, cfg.eval_solver, cfg.eval_max_iter, cfg.probe_standardize)


def probe(cfg: TextConfig, device: str | Any = "cpu") -> torch_probe.TorchProbe:
    return torch_probe.TorchProbe(str(device), cfg.eval_seed, cfg.probe_batch_size, epoch_size=cfg.probe_epoch_size,
                                  tenacity=cfg.probe_tenacity, max_epoch=cfg.probe_max_epoch,
                                  standardize=cfg.probe_standardize)


def run_protocol(X_train, y_train: np.ndarray, X_test, y_test: np.ndarray | None, cfg: TextConfig,
                 device: str | Any = "cpu") -> dict[str, Any]:
    """The cross-validation protocol (``X_test`` None) or the train/test one, with ``cfg.classifier`` on ``device``
    (sparse features: scikit-learn); the result names the classifier that ran and whether it standardised."""
    if cfg.classifier == "torch" and not hasattr(X_train, "tocsr"):
        settings = probe(cfg, device)
        if X_test is None:
            result = torch_probe.cross_validate(X_train, y_train, cfg.kfold, settings)
        else:
            result = torch_probe.train_test(X_train, y_train, X_test, y_test, cfg.kfold, settings)
        return {**result, "classifier": "torch", "standardized": cfg.probe_standardize, "device": str(device)}
    options = {"kfold": cfg.kfold, "clf": classifier(cfg), "jobs": cfg.eval_jobs}
    if X_test is None:
        result = cross_validate(X_train, y_train, **options)
    else:
        result = train_test(X_train, y_train, X_test, y_test, **options)
    return {**result, "classifier": "sklearn", "standardized": cfg.probe_standardize}


def evaluate_task(encoder, task: Task, cfg: TextConfig, device: str | Any = "cpu") -> dict[str, Any]:
    """Encode one task's sentences (after ``encoder.prepare`` on all of them) and run its protocol."""
    tic = time.perf_counter()
    encoder.prepare(task.train.all_sentences() + (task.test.all_sentences() if task.test else []))

    def features(split: Split):
        first = encoder.encode(split.sentences)
        return pair_features(first, encoder.encode(split.second)) if split.second is not None else first

    X_train = features(task.train)
    X_test = features(task.test) if task.test is not None else None
    encode_s = time.perf_counter() - tic
    result = run_protocol(X_train, task.train.labels, X_test, task.test.labels if task.test else None, cfg, device)
    result.update(n_train=len(task.train), n_test=len(task.test) if task.test else len(task.train),
                  features=int(X_train.shape[1]), encode_s=encode_s, seconds=time.perf_counter() - tic)
    return result


def load_tasks(data_root: Path, cfg: TextConfig) -> list[Task]:
    tasks = []
    for name in cfg.senteval_tasks:
        task = read_task(data_root, name)
        if cfg.senteval_max_samples:
            task = Task(name, subsample(task.train, cfg.senteval_max_samples, cfg.eval_seed),
                        subsample(task.test, cfg.senteval_max_samples, cfg.eval_seed) if task.test else None)
        tasks.append(task)
    return tasks


def checked_tasks(data_root: Path, cfg: TextConfig) -> list[Task]:
    """The SentEval tasks of ``cfg``, read and subsampled (:func:`load_tasks`: a damaged file is named here); UserError,
    before any training, naming the first one the protocol cannot score: ``kfold`` stratified folds need a class of
    ``kfold`` sentences, in the whole training set and in each outer training fold (both classifiers fail on fewer),
    and a training fold of one class is refused for both classifiers: scikit-learn's logistic regression fails on
    it, and the torch one, like SentEval's (sized by the task's classes), fits a model that only ever predicts that
    class, whose accuracy is the share of the class in what it is scored on. SentEval's own tasks have no such
    fold."""
    tasks = load_tasks(data_root, cfg)
    for task in tasks:
        y, k = task.train.labels, cfg.kfold
        sizes = ", ".join(str(n) for n in sorted(np.unique(y, return_counts=True)[1].tolist(), reverse=True))
        where = (f"SentEval task {task.name} ({Path(data_root) / 'senteval' / task.name}): its {len(y)} training "
                 f"sentences are in classes of {sizes}")
        try:
            with warnings.catch_warnings():  # a class with fewer sentences than folds: refused below where it matters
                warnings.filterwarnings("ignore", "The least populated class", UserWarning)
                training = _training_rows(y, k, cfg.eval_seed, cross_validated=task.test is None)
        except ValueError:
            raise UserError(f"{where}: kfold={k} needs a class of at least {k} sentences, in the set and in each "
                            "training fold it splits again; use a smaller kfold, or more sentences") from None
        if any(len(np.unique(y[rows])) < 2 for rows in training):
            raise UserError(f"{where}: kfold={k} leaves a training fold of one class, on which a classifier learns "
                            "to predict that class only (scikit-learn's cannot fit it); give each class more sentences")
    return tasks


def _training_rows(y: np.ndarray, k: int, seed: int, cross_validated: bool) -> list[np.ndarray]:
    """The training rows of every fit the protocol makes on the labels ``y``: each outer training fold (the whole
    training set of a train/test task) and each training part of the k folds on it that choose the L2."""
    outer = torch_probe.stratified_folds(y, k, seed) if cross_validated else [(np.arange(len(y)), None)]
    return [rows for train, _ in outer
            for rows in (train, *(train[a] for a, _ in torch_probe.stratified_folds(y[train], k, seed)))]


def summarise(results: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Metrics: every task's accuracy (and MRPC's F1) and, as ``accuracy``, their mean over the tasks run."""
    metrics = {name: r["accuracy"] for name, r in results.items()}
    if "MRPC" in results and "f1" in results["MRPC"]:
        metrics["MRPC_f1"] = results["MRPC"]["f1"]
    metrics["accuracy"] = float(np.mean([r["accuracy"] for r in results.values()]))
    return metrics


def evaluate_senteval(encoder, data_root: Path, cfg: TextConfig, log=print, device: str | Any = "cpu",
                      tasks: Sequence[Task] | None = None) -> tuple[dict[str, float], dict]:
    """Every task of ``cfg.senteval_tasks`` with our protocol (or the `senteval` package); a torch classifier
    trains on ``device``. ``tasks``: those the run's ``prepare`` read (:func:`checked_tasks`), so that a run reads
    its files once; None reads them here."""
    if cfg.use_senteval_package:
        return run_senteval_package(encoder, data_root, cfg)
    results = {}
    for task in checked_tasks(data_root, cfg) if tasks is None else tasks:
        results[task.name] = evaluate_task(encoder, task, cfg, device)
        log(f"SentEval {task.name}: accuracy {results[task.name]['accuracy']:.2f} "
            f"({results[task.name]['seconds']:.1f}s, {results[task.name]['classifier']})")
    return summarise(results), {"tasks": results, **protocol_details(results.values(), cfg),
                                "subsampled_to": cfg.senteval_max_samples or None}


def classifiers_ran(details: dict[str, Any]) -> set[str]:
    """The classifiers a record's evaluation ran, from its details: each task's ``classifier`` (recorded since the
    torch classifier exists); scikit-learn for a record without one (older, or the senteval package's)."""
    results = [*details.get("tasks", {}).values(), details.get("synthetic", {})]
    return {r["classifier"] for r in results if isinstance(r, dict) and "classifier" in r} or {"sklearn"}


CLASSIFIER_NAMES = {"torch": "SentEval's PyTorch logistic regression, batched (torch)", "sklearn": "scikit-learn"}


def protocol_details(results: Iterable[dict[str, Any]], cfg: TextConfig) -> dict[str, Any]:
    """What a record says of the protocol its tasks ran: ``protocol``, a label naming the classifiers (those of
    ``results``: sparse features go through scikit-learn whatever ``cfg.classifier`` says) and the features, and
    ``standardized``, whether the features were z-scored (``probe_standardize``)."""
    ran = list(dict.fromkeys(r["classifier"] for r in results)) or [cfg.classifier]
    features = "features z-scored by each fit's training rows" if cfg.probe_standardize else "raw features"
    return {"protocol": f"SentEval's protocol ({', '.join(CLASSIFIER_NAMES[c] for c in ran)}; {features})",
            "standardized": cfg.probe_standardize}


def senteval_engine() -> Any:
    """The original SentEval's ``senteval.engine``; a UserError saying how to install it where it does not import.
    (Not :func:`domains.base.require`, which names an extra of this project: SentEval is none, nor on PyPI.)"""
    try:
        return importlib.import_module("senteval.engine")
    except ImportError as exc:
        raise UserError(f"use_senteval_package=true needs the `senteval` package, which does not import ({exc}): "
                        "install it with pip install git+https://github.com/facebookresearch/SentEval, or leave "
                        "use_senteval_package false to use our protocol") from None


def run_senteval_package(encoder, data_root: Path, cfg: TextConfig) -> tuple[dict[str, float], dict]:
    """The original SentEval (``senteval.engine.SE``, scikit-learn classifier)."""
    engine = senteval_engine()

    def batcher(_params, batch):
        out = encoder.encode([" ".join(words) for words in batch])
        return out.toarray() if hasattr(out, "toarray") else out

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(Path(data_root).resolve() / "senteval", Path(tmp) / "downstream")  # SentEval's layout
        params = {"task_path": tmp, "usepytorch": False, "kfold": cfg.kfold, "seed": cfg.eval_seed,
                  "batch_size": cfg.eval_batch_size}
        se = engine.SE(params, batcher, lambda _p, samples: encoder.prepare([" ".join(s) for s in samples]))
        for name in cfg.senteval_tasks:
            out = se.eval(name)
            results[name] = {"accuracy": float(out["acc"]), "dev_accuracy": float(out["devacc"])}
            if "f1" in out:
                results[name]["f1"] = float(out["f1"])
    return summarise(results), {"tasks": results, "protocol": "senteval package", "standardized": False}
