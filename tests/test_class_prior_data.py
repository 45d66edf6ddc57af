"""The controlled benchmark of issue 15: each embedded synthetic set takes a class count C with a known class
prior, and every domain's evaluation reports the prior its labels give (``details["label_prior"]`` = Σ_c p_c²).

Checked against independent references: naive counting loops for the prior and the class proportions, networkx's
isomorphism test for the motifs, the graphs' own edges for the motif each one carries, and the data fingerprints
of committed records (digits, biased digits, synthetic-topics) or of the code before C existed (synthetic-motifs,
of which no record is committed). One tiny run per domain at C = 4 goes through the command's ``main``, in this process
(a fresh interpreter per domain paid seconds of imports; the command's own process is other tests')."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from domains.base import label_prior
from domains.errors import UserError
from harness.cli import main

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "leaderboards" / "results"


def naive_prior(labels) -> float:
    counts = Counter(labels)
    n = sum(counts.values())
    return sum((c / n) ** 2 for c in counts.values())


def committed_record(pattern: str) -> dict:
    paths = sorted(COMMITTED.glob(pattern))
    if not paths:
        pytest.skip(f"no committed record {pattern}")
    return json.loads(paths[0].read_text())


# ------------------------------------------------------------------------------------------- the helper


@pytest.mark.parametrize("labels", [
    [0, 0, 0, 1], list("abcabcaab"), np.random.default_rng(0).integers(0, 7, size=501).tolist(), [3] * 5,
])
def test_label_prior_is_a_naive_count(labels):
    out = label_prior(labels)
    assert out["label_prior"] == pytest.approx(naive_prior(labels), rel=1e-12)
    assert out["label_classes"] == len(set(labels))
    if all(isinstance(v, int) for v in labels):
        assert label_prior(torch.tensor(labels)) == out == label_prior(np.array(labels))


def test_label_prior_of_balanced_classes_is_one_over_c():
    for c in (2, 4, 10, 50):
        assert label_prior(np.arange(20 * c) % c) == {"label_prior": pytest.approx(1 / c), "label_classes": c}
    with pytest.raises(ValueError, match="no labels"):
        label_prior([])


# ------------------------------------------------------------------------------------------- graph

def test_two_classes_are_the_house_bowtie_set_of_before():
    pytest.importorskip("torch_geometric")
    import hashlib

    from domains.graph import synthetic

    assert synthetic.params_for(2) is synthetic.PARAMS and synthetic.PARAMS["motifs"] == ["house", "bowtie"]
    # sha256 of PARAMS and of the generated graphs, taken from the code before synthetic_classes existed
    assert synthetic.fingerprint()["sha256"] == synthetic.fingerprint(2)["sha256"] == (
        "2b31190f540bdb34cfade5ebbee472fd36013a1bee7972901bb86cfceb5dae8c")
    digest = hashlib.sha256()
    for graph in synthetic.generate():
        digest.update(graph.edge_index.numpy().tobytes())
        digest.update(graph.y.numpy().tobytes())
    assert digest.hexdigest() == "720eb2466f1fc5f4260033bcea276c224958fc9b8e5024641d178e82b73bc6c0"


@pytest.mark.parametrize("classes", [4, 10, 50])
def test_motifs_are_distinct_connected_of_equal_size_and_nested(classes):
    nx = pytest.importorskip("networkx")
    from domains.graph import synthetic

    params = synthetic.params_for(classes)
    motifs = [nx.Graph(synthetic.motif_edges(name)) for name in params["motifs"]]
    assert len(motifs) == params["classes"] == classes
    assert {(g.number_of_nodes(), g.number_of_edges()) for g in motifs} == {(7, 9)}
    assert all(nx.is_connected(g) for g in motifs)
    assert not any(nx.is_isomorphic(a, b) for a, b in itertools.combinations(motifs, 2))
    assert params["motifs"] == synthetic.params_for(50)["motifs"][:classes]  # a smaller C: a subset
    assert params["graphs"] == max(500, 20 * classes) and params["graphs"] % classes == 0


def test_each_graph_carries_three_copies_of_its_class_motif_and_classes_are_balanced():
    nx = pytest.importorskip("networkx")
    pytest.importorskip("torch_geometric")
    from domains.graph import synthetic

    params = {**synthetic.params_for(10), "graphs": 60, "base_nodes": [8, 12]}
    graphs = synthetic.generate(params)
    labels = [int(g.y) for g in graphs]
    assert Counter(labels) == {c: 6 for c in range(10)}
    for graph, label in zip(graphs, labels):
        edges = {tuple(e) for e in graph.edge_index.T.tolist()}
        base = graph.num_nodes - 3 * 7
        for copy in range(3):
            first = base + copy * 7
            inside = nx.Graph([(a - first, b - first) for a, b in edges if first <= a < first + 7 and
                               first <= b < first + 7])
            assert nx.is_isomorphic(inside, nx.Graph(synthetic.motif_edges(params["motifs"][label])))


def test_the_fingerprint_names_c_and_bad_c_is_refused():
    pytest.importorskip("networkx")
    from domains.graph import synthetic
    from domains.graph.config import GraphConfig

    prints = {c: synthetic.fingerprint(c) for c in (2, 4, 10, 50)}
    assert len({p["sha256"] for p in prints.values()}) == 4
    assert prints[10]["params"]["classes"] == 10 and "classes" not in prints[2]["params"]
    with pytest.raises(UserError, match=r"2\.\.107"):
        synthetic.params_for(108)
    with pytest.raises(ValueError, match=r"synthetic_classes\s+Input should be greater than or equal to 2"):
        GraphConfig(synthetic_classes=1)


def test_synthetic_classes_is_refused_on_a_tu_set():
    import domains
    from domains.base import RunSpec
    from domains.graph.config import GraphConfig

    spec = RunSpec("graph", "infograph", "MUTAG", "infonce", {}, "quick", 0, GraphConfig(synthetic_classes=4))
    with pytest.raises(UserError, match="synthetic_classes applies to synthetic-motifs only"):
        domains.get("graph").validate(spec)


@pytest.mark.slow
@pytest.mark.parametrize("classes", [10, 50])
def test_full_motif_sets_have_c_equal_classes(classes):
    pytest.importorskip("torch_geometric")
    from domains.graph import synthetic

    data = synthetic.load_synthetic(classes)
    assert Counter(data.y.tolist()) == {c: max(500, 20 * classes) // classes for c in range(classes)}
    assert label_prior(data.y)["label_prior"] == pytest.approx(1 / classes)


# ------------------------------------------------------------------------------------------- text


def test_topics_have_equal_documents_and_the_prior_of_their_sentences():
    from domains.text.config import TextConfig
    from domains.text.corpus import sentence_labels, synthetic_corpus, synthetic_documents, synthetic_task

    assert [synthetic_documents(TextConfig(synthetic_topics=k)) for k in (2, 3, 4, 10, 50)] == [160, 162, 160, 160,
                                                                                                  400]
    assert synthetic_documents(TextConfig(synthetic_topics=50, synthetic_documents=123)) == 123  # the user's
    cfg = TextConfig(synthetic_topics=50, synthetic_sentences_per_doc=3)
    corpus = synthetic_corpus(cfg)
    assert Counter(corpus.doc_labels.tolist()) == {k: 8 for k in range(50)}
    labels = sentence_labels(corpus)
    assert labels.tolist() == [int(name.split("topic")[1]) for name in corpus.doc_names for _ in range(3)]
    assert label_prior(labels)["label_prior"] == pytest.approx(naive_prior(labels.tolist())) == pytest.approx(1 / 50)
    _, task_labels, _ = synthetic_task(cfg)
    assert Counter(task_labels.tolist()) == {k: 40 for k in range(50)}


def test_a_books_sentence_is_labelled_with_its_book():
    from domains.text.corpus import from_documents, sentence_labels

    corpus = from_documents(["emma", "alice", "hamlet"], [["a."] * 5, ["b."] * 2, ["c."] * 13])
    labels = sentence_labels(corpus)
    assert labels.tolist() == [0] * 5 + [1] * 2 + [2] * 13
    assert label_prior(labels)["label_prior"] == pytest.approx((5 / 20) ** 2 + (2 / 20) ** 2 + (13 / 20) ** 2)


def test_default_topics_keep_the_committed_fingerprint_and_identity():
    import domains
    from domains.text.config import TextConfig
    from domains.text.corpus import synthetic_fingerprint

    record = committed_record("text-synthetic-topics-quickthought-infonce-*.json")
    assert synthetic_fingerprint(TextConfig()) == record["data_fingerprint"]["generator_sha256"]
    resolved = domains.get("text").resolve_config(TextConfig(), "quickthought", "synthetic-topics")
    assert resolved.synthetic_documents == record["config"]["synthetic_documents"] == 160
    assert synthetic_fingerprint(TextConfig(synthetic_topics=10)) != synthetic_fingerprint(TextConfig())


def test_too_few_evaluation_sentences_for_the_topics_is_refused():
    from domains.text.config import TextConfig

    with pytest.raises(ValueError, match=r"synthetic_eval_sentences must be >= 600 \(12 per topic at kfold=10\)"):
        TextConfig(synthetic_topics=50, synthetic_eval_sentences=500)  # was let through, to fail after training
    TextConfig(synthetic_topics=50, synthetic_eval_sentences=600)
    with pytest.raises(ValueError, match=r"synthetic_documents\s+Input should be greater than or equal to 0"):
        TextConfig(synthetic_documents=-1)


# ------------------------------------------------------------------------------------------- vision


def test_default_digits_keep_the_committed_fingerprints():
    pytest.importorskip("sklearn")
    from domains.vision.data import load

    for dataset, pattern in (("digits", "vision-digits-simclr-infonce-*.json"),
                             ("biased-digits", "vision-biased-digits-biased-ce-*.json")):
        record = committed_record(pattern)
        for classes in (0, 10):
            data = load(dataset, REPO, rho=record["config"]["rho"], first_classes=classes)
            assert data.fingerprint == record["data_fingerprint"], (dataset, classes)


@pytest.mark.parametrize("dataset", ["digits", "biased-digits"])
def test_first_classes_keep_those_digits_and_their_colours(dataset):
    pytest.importorskip("sklearn")
    from domains.vision.data import load

    full, four = load(dataset, REPO), load(dataset, REPO, first_classes=4)
    assert four.num_classes == 4 and four.fingerprint["classes"] == 4
    assert four.fingerprint["splits"] != full.fingerprint["splits"]
    for part in ("pretrain", "train", "test"):
        whole, kept = getattr(full, part), getattr(four, part)
        mask = whole.labels < 4
        assert torch.equal(kept.labels, whole.labels[mask]) and torch.equal(kept.images, whole.images[mask])
        if whole.bias is not None:
            assert torch.equal(kept.bias, whole.bias[mask])  # the ten-class colouring, restricted
    labels = four.pretrain.labels.tolist()
    assert set(labels) == {0, 1, 2, 3}
    assert label_prior(four.pretrain.labels)["label_prior"] == pytest.approx(naive_prior(labels))
    assert label_prior(four.pretrain.labels)["label_prior"] == pytest.approx(0.25, abs=1e-3)  # nearly balanced


def test_bad_classes_is_refused_and_default_resolves_to_ten():
    pytest.importorskip("sklearn")
    from domains.vision.config import VisionConfig, resolved
    from domains.vision.data import load

    with pytest.raises(UserError, match="digits has 10 classes"):
        load("digits", REPO, first_classes=11)
    with pytest.raises(UserError, match="classes must lie in 2..10"):
        load("biased-digits", REPO, first_classes=1)
    with pytest.raises(UserError, match="only digits and biased-digits"):
        load("cifar10", REPO, first_classes=4)
    assert resolved(VisionConfig(), "simclr", "digits").classes == 10
    assert resolved(VisionConfig(classes=4), "simclr", "digits").classes == 4
    assert resolved(VisionConfig(), "simclr", "cifar10").classes == 0


# ------------------------------------------------------------------------------------------- end to end

TINY = {
    "graph": ["--set", "synthetic_classes=4", "--set", "epochs=1", "--set", "svm_folds=2", "--set",
              "svm_inner_folds=2"],
    "vision": ["--set", "classes=4", "--set", "epochs=1", "--set", "linear_epochs=1", "--set", "knn_every=0"],
    "text": ["--set", "synthetic_topics=4", "--set", "synthetic_documents=16", "--set", "max_steps=3", "--set",
             "kfold=2", "--set", "synthetic_eval_sentences=40", "--set", "hidden_dim=16", "--set", "word_dim=16"],
}


def naive_graph_share(batch_size: int) -> float:
    """The share of same-class negatives InfoGraph's node anchors saw in epoch 1 of seed 0 on the 4-class motif
    set, by a loop: a node of graph i has every other graph j of its batch as a negative."""
    from domains.graph import synthetic
    from domains.graph.infograph import epoch_batches

    data = synthetic.load_synthetic(4)
    nodes, labels = (data.node_ptr[1:] - data.node_ptr[:-1]).tolist(), data.y.tolist()
    same = total = 0
    for batch in epoch_batches(data.num_graphs, batch_size, 0, 0):
        for i in batch.tolist():
            for j in batch.tolist():
                if i != j:
                    total += nodes[i]
                    same += nodes[i] * (labels[i] == labels[j])
    return same / total


@pytest.mark.parametrize("domain", sorted(TINY))
def test_a_run_at_four_classes_records_the_prior(domain, tmp_path, run_main, monkeypatch):
    pytest.importorskip({"graph": "torch_geometric", "vision": "sklearn", "text": "pysbd"}[domain])
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    results = tmp_path / "results"
    out = run_main(main, "run", "--domain", domain, "--loss", "infonce", "--seeds", "0", "--quiet",
                   "--results", str(results), *TINY[domain])
    assert out.returncode == 0, out.stderr
    (path,) = results.glob("*.json")
    record = json.loads(path.read_text())
    details = record["details"]
    assert details["label_classes"] == 4
    share = record["info"].get("negative_same_class_fraction")
    if domain == "graph":  # the nodes of the batch against its other graphs (InfoGraph, anchor=node)
        assert share == pytest.approx(naive_graph_share(record["config"]["batch_size"]), rel=1e-12)
    if domain == "vision":  # SimCLR: each image against the batch's other images (losses.prior.SameClassShare)
        assert 0 < share < 1
    # vision: the digits 0-3 are nearly balanced (their counts differ by a few images)
    assert details["label_prior"] == pytest.approx(0.25, abs=1e-3 if domain == "vision" else 1e-12)
    # whether the classes are the clusters of the evaluation embeddings (losses.prior.class_structure)
    structure = details["class_structure"]
    assert set(structure) == {"class_silhouette", "class_ari", "zero_rows"}
    assert structure["zero_rows"] == 0  # no embedding of these runs is all zero (a dead row would be left out)
    assert -1 <= structure["class_silhouette"] <= 1 and -1 <= structure["class_ari"] <= 1


def test_eleven_digit_classes_stop_the_run_with_one_line(tmp_path, run_main, monkeypatch):
    """In this process (``main``, what the command calls): a refused run's one line through the CLI is
    test_faults.test_a_mistyped_tu_name_through_the_cli's."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    out = run_main(main, "run", "--domain", "vision", "--loss", "infonce", "--seeds", "0", "--quiet",
                   "--results", str(tmp_path / "results"), "--set", "classes=11")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error:") and "digits has 10 classes" in out.stderr
    assert not list((tmp_path / "results").glob("*.json"))
