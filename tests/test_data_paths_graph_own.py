"""A TU-format set of one's own (not in the TU collection), as a researcher brings it: the messages about its files
name the file (and the line) and point at no download, a ``graph_attributes`` file does not replace the class
labels, node attributes are used only when asked and the record says so, and sets the protocol cannot score are
refused before training. Every set is written by the test (``support.toy_tu``); nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

from support import toy_tu  # noqa: E402

from domains.errors import DatasetMissingError, UserError  # noqa: E402
from domains.graph import data as graph_data  # noqa: E402
from domains.graph.config import GraphConfig  # noqa: E402


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _load(root: Path, name: str = "TOY", **config) -> graph_data.GraphSet:
    return graph_data.load_tu(graph_data.tu_files(name, root, False), GraphConfig(download=False, **config))


def test_only_a_set_of_the_tu_collection_is_sent_to_its_download_url(tmp_path):
    """Every error about one's own set said to restore it from chrsmrrs.com/graphkerneldatasets/<NAME>.zip, a URL
    that does not exist for it."""
    for name in ("MYSET", "MUTAG"):
        raw = toy_tu(tmp_path, name)
        (raw / f"{name}_graph_labels.txt").write_text("active\n" * 24)
        with pytest.raises(UserError, match=rf"{name}_graph_labels\.txt, line 1: 'active'") as err:
            _load(tmp_path, name)
        assert ("graphkerneldatasets" in str(err.value)) is (name == "MUTAG")


@pytest.mark.parametrize("gone", ["graph_labels", "A"])
def test_a_missing_required_file_is_named(tmp_path, gone):
    """The folder held four of the five files and the error said it held none ("did you mean 'COLLAB'?")."""
    raw = toy_tu(tmp_path, "NOLAB")
    (raw / f"NOLAB_{gone}.txt").unlink()
    with pytest.raises(DatasetMissingError, match=rf"^TU dataset 'NOLAB' is incomplete: .*/raw/ has no "
                                                  rf"NOLAB_{gone}\.txt \(every TU set has") as err:
        graph_data.locate_raw("NOLAB", tmp_path, download=True)
    assert "COLLAB" not in str(err.value) and "regression" not in str(err.value)


def test_an_incomplete_folder_is_not_bypassed_by_an_earlier_download(tmp_path, cache):
    """With a download of the same name in the cache, a folder missing graph_labels was skipped without a word and
    the run trained on the download."""
    fetched = cache / "TU" / "download" / "MUTAG" / "raw"  # where tucache.download leaves a download
    fetched.parent.mkdir(parents=True)
    toy_tu(cache, "MUTAG").rename(fetched)
    raw = toy_tu(tmp_path / "data", "MUTAG")
    (raw / "MUTAG_graph_labels.txt").rename(tmp_path / "labels")
    with pytest.raises(DatasetMissingError, match=r"^TU dataset 'MUTAG' is incomplete: .*/data/TU/MUTAG/raw/ has no "
                                                  r"MUTAG_graph_labels\.txt"):
        graph_data.locate_raw("MUTAG", tmp_path / "data", download=False)
    (tmp_path / "labels").rename(raw / "MUTAG_graph_labels.txt")  # complete: the user's folder, not the download
    assert graph_data.locate_raw("MUTAG", tmp_path / "data", download=False) == raw
    for path in raw.iterdir():  # none at all: the earlier download
        path.unlink()
    assert graph_data.locate_raw("MUTAG", tmp_path / "data", download=False) == fetched


def test_a_set_of_regression_targets_is_refused_as_such(tmp_path):
    raw = toy_tu(tmp_path)
    (raw / "TOY_graph_labels.txt").rename(raw / "TOY_graph_attributes.txt")
    with pytest.raises(DatasetMissingError, match=r"has no TOY_graph_labels\.txt .*TOY_graph_attributes\.txt holds "
                                                  r"regression targets"):
        graph_data.locate_raw("TOY", tmp_path, download=False)


def test_graph_attributes_do_not_replace_the_class_labels(tmp_path):
    """PyG's reader takes a graph_attributes file as y whenever it exists (a regression target): the SVM then
    classified its floats cut down to integers (22.9% where the labels gave 85.6%)."""
    raw = toy_tu(tmp_path)
    labels = _load(tmp_path).y
    (raw / "TOY_graph_attributes.txt").write_text("".join(f"{g * 0.37:.2f}\n" for g in range(24)))
    assert _load(tmp_path).y.tolist() == labels.tolist() == [0, 1] * 12


def test_a_set_of_one_class_is_refused_before_training(tmp_path):
    """It trained, then failed in the SVM ("The number of classes has to be greater than one"), exit 1."""
    from tiny_domain import harness

    raw = toy_tu(tmp_path / "data")
    (raw / "TOY_graph_labels.txt").write_text("1\n" * 24)
    proc = harness("run", "--domain", "graph", "--dataset", "TOY", "--loss", "jsd", "--seeds", "0", "--quiet",
                   "--set", "epochs=1", "--set", "svm_folds=2", "--set", "svm_inner_folds=2",
                   "--data-root", str(tmp_path / "data"), "--results", str(tmp_path / "results"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: TOY: all 24 graphs have the same class label: the "
                                                "SVM protocol needs at least two classes"]
    assert not list((tmp_path / "results").glob("*.json"))  # no record: nothing ran


def test_an_edge_from_a_node_that_does_not_exist_is_named_with_its_line(tmp_path):
    """PyG's reader fails on it ("index 98 is out of bounds"), and the message named neither file nor line."""
    raw = toy_tu(tmp_path)
    with open(raw / "TOY_A.txt", "a") as fh:
        fh.write("99, 1\n")
    with pytest.raises(UserError, match=r"TOY_A\.txt, line 145: edge 99, 1 names a node beyond the 84 of the graph "
                                        r"indicator"):
        _load(tmp_path)


def test_a_set_without_any_edge_says_so(tmp_path):
    """PyG's reader failed with "Dimension out of range (expected to be in range of [-1, 0], but got 1)"."""
    raw = toy_tu(tmp_path)
    (raw / "TOY_A.txt").write_text("")
    with pytest.raises(UserError, match=r"TOY_A\.txt is empty: the set has no edges"):
        _load(tmp_path)


def test_a_node_label_that_is_an_id_is_refused_before_its_one_hot_is_built(tmp_path):
    """One label of 20000 among labels 0..6 made one-hot features 20001 wide (memory: nodes x largest label)."""
    from domains.graph.tucheck import NODE_LABEL_WIDTH_MAX

    raw = toy_tu(tmp_path)
    labels = [str(node % 3) for node in range(84)]
    (raw / "TOY_node_labels.txt").write_text("\n".join(labels) + "\n")
    assert _load(tmp_path).num_features == 3
    labels[5] = str(NODE_LABEL_WIDTH_MAX)
    (raw / "TOY_node_labels.txt").write_text("\n".join(labels) + "\n")
    with pytest.raises(UserError, match=rf"TOY_node_labels\.txt: node labels from 0 \(line 1\) to "
                                        rf"{NODE_LABEL_WIDTH_MAX} \(line 6\) would be one-hot features "
                                        rf"{NODE_LABEL_WIDTH_MAX + 1} wide"):
        _load(tmp_path)


def _with_attributes(root: Path, values: list[str]) -> Path:
    """TOY with one line of node attributes per node (``values`` for the first nodes, then ``0.5, 1.5``)."""
    raw = toy_tu(root)
    lines = values + ["0.5, 1.5"] * (84 - len(values))
    (raw / "TOY_node_attributes.txt").write_text("\n".join(lines) + "\n")
    return raw


def test_node_attributes_are_left_out_by_default_and_the_record_says_so(tmp_path):
    """They were dropped while the record said "no node features in the data"."""
    _with_attributes(tmp_path, ["2.0, -1.0"])
    left_out = _load(tmp_path)
    assert left_out.node_features == ("one-hot degree 0..2 (2 node attributes of TOY_node_attributes.txt left out: "
                                      "node_attributes=false)")
    used = _load(tmp_path, node_attributes=True)
    assert used.node_features == "node attributes (2, TOY_node_attributes.txt)"
    assert used.x[:2].tolist() == [[2.0, -1.0], [0.5, 1.5]]


def test_node_attributes_come_before_the_one_hot_labels(tmp_path):
    raw = _with_attributes(tmp_path, [])
    (raw / "TOY_node_labels.txt").write_text("".join(f"{node % 3}\n" for node in range(84)))
    assert _load(tmp_path).node_features == ("one-hot node labels (3); 2 node attributes of TOY_node_attributes.txt "
                                             "left out: node_attributes=false")
    used = _load(tmp_path, node_attributes=True)
    assert used.node_features == "node attributes (2, TOY_node_attributes.txt) and one-hot node labels (3)"
    assert used.x[:2].tolist() == [[0.5, 1.5, 1, 0, 0], [0.5, 1.5, 0, 1, 0]]


def test_node_attributes_that_are_not_finite_or_absent_are_refused_when_asked_for(tmp_path):
    _with_attributes(tmp_path, ["0.5, 1.5", "nan, 1.0"])
    assert _load(tmp_path).num_features == 3  # left out, they cannot harm the run
    with pytest.raises(UserError, match=r"TOY_node_attributes\.txt, line 2: \[nan, 1\.0\] holds a value that is not"):
        _load(tmp_path, node_attributes=True)
    toy_tu(tmp_path, "PLAIN")
    with pytest.raises(UserError, match=r"node_attributes=true: TU dataset 'PLAIN' has no PLAIN_node_attributes\.txt"):
        _load(tmp_path, "PLAIN", node_attributes=True)


def test_the_node_attributes_key_keeps_the_committed_run_ids():
    from domains.base import split_config

    assert "node_attributes" not in split_config(GraphConfig())[0]
    assert split_config(GraphConfig(node_attributes=True))[0]["node_attributes"] is True
