"""Graph data: the embedded default, the featureless rule, TU loading from the data root (read-only,
processed in a cache), and the missing-dataset error (never touching the network)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("torch_geometric")

from support import toy_tu  # noqa: E402

import domains  # noqa: E402
from domains.errors import DatasetMissingError  # noqa: E402
from domains.files import hash_files  # noqa: E402
from domains.graph import data as graph_data  # noqa: E402
from domains.graph import synthetic  # noqa: E402
from domains.graph.config import GraphConfig  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_embedded_default_is_deterministic_and_balanced():
    a, b = synthetic.load_synthetic(), synthetic.load_synthetic()
    for field in ("x", "edge_index", "node_ptr", "edge_ptr", "y"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert a.num_graphs == 500 and a.y.bincount().tolist() == [250, 250]
    assert torch.equal(a.x, torch.ones_like(a.x))  # structure only
    sizes = a.node_ptr[1:] - a.node_ptr[:-1]
    edges = a.edge_ptr[1:] - a.edge_ptr[:-1]
    # Both motifs have 5 nodes and 6 edges: per class, sizes and edge counts have the same range.
    for label in (0, 1):
        assert sizes[a.y == label].min() >= 20 + 15 and sizes[a.y == label].max() <= 80 + 15
    assert torch.equal(edges, 2 * (2 * (sizes - 15 - 2) + 3 * 7))  # BA(m=2) edges + 3 x (6 motif + 1 bridge)
    assert synthetic.fingerprint() == synthetic.fingerprint()
    assert domains.get("graph").default_dataset == synthetic.NAME


def test_featureless_rule():
    from torch_geometric.data import Data

    star = Data(edge_index=torch.tensor([[0, 0, 0, 1, 2, 3], [1, 2, 3, 0, 0, 0]]), y=torch.tensor([0]), num_nodes=4)
    pair = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), y=torch.tensor([1]), num_nodes=2)

    def build(**kw):
        return graph_data.add_featureless(graph_data.from_data_list("t", [star, pair], "none"), GraphConfig(**kw))

    onehot = build()
    assert onehot.x.tolist() == [[0, 0, 0, 1], [0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]]
    assert onehot.node_features.startswith("one-hot degree 0..3")
    scalar = build(degree_onehot_limit=3)  # largest degree 3 >= limit: standardised degree
    deg = torch.tensor([3.0, 1, 1, 1, 1, 1])
    torch.testing.assert_close(scalar.x.view(-1), (deg - deg.mean()) / deg.std())
    assert scalar.node_features.startswith("standardised degree")
    assert build(featureless="constant").x.tolist() == [[1.0]] * 6


def test_missing_dataset_says_where_to_put_files(tmp_path, cache):
    domain = domains.get("graph")
    with pytest.raises(DatasetMissingError) as err:
        domain.load("MUTAG", tmp_path, GraphConfig(download=False))
    assert str(tmp_path / "TU" / "MUTAG" / "raw") in str(err.value)
    assert "download disabled" in str(err.value)
    # A name outside the TU collection is a typo unless its files are there: never downloaded, whatever the config.
    with pytest.raises(DatasetMissingError, match=r"^unknown dataset 'NOSUCHSET'\. It is not a TU set") as err:
        domain.load("NOSUCHSET", tmp_path, GraphConfig(download=True))
    assert str(tmp_path / "TU" / "NOSUCHSET" / "raw") in str(err.value)


def test_failed_download_becomes_dataset_missing(tmp_path, cache, monkeypatch):
    import torch_geometric.data

    def offline(url, folder, **kw):
        raise OSError("network unreachable")  # stands in for PyG's download, no network is touched

    monkeypatch.setattr(torch_geometric.data, "download_url", offline)
    with pytest.raises(DatasetMissingError, match="download failed: OSError: network unreachable"):
        graph_data.locate_raw("MUTAG", tmp_path, download=True)


def test_any_tu_name_is_accepted_but_not_a_path():
    ds = domains.get("graph").datasets
    assert "NCI1" in ds and ds["NCI1"].needs_download
    assert "../etc" not in ds and "a/b" not in ds
    assert list(ds)[0] == synthetic.NAME and "NCI1" not in list(ds)


def test_mutag_from_read_only_data_root(data_root, data_set, cache):
    raw = data_set("TU", "MUTAG", "raw")
    files = graph_data.tu_files("MUTAG", data_root, download=False)
    mutag = graph_data.load_tu(files, GraphConfig(download=False))
    assert mutag.num_graphs == 188 and mutag.num_features == 7 and mutag.num_classes == 2
    assert sorted(mutag.y.bincount().tolist()) == [63, 125]
    assert int(mutag.node_ptr[-1]) == 3371 and mutag.edge_index.shape[1] == 7442
    assert not (data_root / "TU" / "MUTAG" / "processed").exists()  # processed in the cache
    assert graph_data.tucache.cache_path("MUTAG", files.sha256).is_file()
    assert files.fingerprint["sha256"] == hash_files(sorted(raw.glob("MUTAG_*.txt")))


def test_imdb_gets_one_hot_degree(data_root, data_set):
    data_set("TU", "IMDB-BINARY", "raw")
    imdb = graph_data.load_tu(graph_data.tu_files("IMDB-BINARY", data_root, False), GraphConfig(download=False))
    assert imdb.num_graphs == 1000 and imdb.node_features.startswith("one-hot degree 0..")
    assert torch.equal(imdb.x.sum(1), torch.ones(imdb.x.shape[0]))


def test_tu_files_are_read_once_until_they_change(tmp_path, monkeypatch):
    """A run fingerprints its TU set (to find the seeds it has left) and then loads it: the bytes are hashed
    once, and a file rewritten in between gets a new hash (hash_files keys on path, size, mtime, ctime and inode)."""
    import builtins

    from domains import files

    raw = toy_tu(tmp_path)
    opened: list[str] = []

    def counting_open(path, *args, **kwargs):
        opened.append(str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(files, "open", counting_open, raising=False)
    first = graph_data.tu_files("TOY", tmp_path, download=False)
    again = graph_data.tu_files("TOY", tmp_path, download=False)
    assert again.fingerprint == first.fingerprint and len(opened) == 3  # the three raw files, read once
    labels = raw / "TOY_graph_labels.txt"
    labels.write_text(labels.read_text() + "1\n")  # another size: on any file system's mtime resolution
    changed = graph_data.tu_files("TOY", tmp_path, download=False)
    assert changed.sha256 != first.sha256 and len(opened) == 6


def test_a_file_rewritten_with_its_size_and_mtime_kept_is_hashed_again(tmp_path):
    """``rsync -t`` (or a rewrite within the file system's mtime resolution) keeps size and mtime: the cache of
    file hashes must not serve the old digest for new bytes."""
    import os
    import time

    path = tmp_path / "labels.txt"
    path.write_text("0\n1\n")
    before = hash_files([path])
    stat = path.stat()
    time.sleep(0.05)  # past a coarse ctime's tick (older kernels: one timer tick, up to 10 ms)
    path.write_text("1\n0\n")  # the same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same mtime
    if path.stat().st_ctime_ns == stat.st_ctime_ns:
        pytest.skip("this file system's ctime did not move: nothing tells the rewrite apart")
    assert hash_files([path]) != before


def test_a_data_file_that_cannot_be_read_is_named(tmp_path):
    from domains.errors import UserError

    with pytest.raises(UserError, match=r"cannot read data file .*gone\.txt"):
        hash_files([tmp_path / "gone.txt"])
