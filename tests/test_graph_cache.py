"""The cache of processed TU sets never runs code and never trusts a damaged or foreign file: a planted pickle (one
that would create a marker file when unpickled), a truncated cache and another set's cache are each named in a
warning and rebuilt from the raw files, and the run goes on with the graphs the raw files give."""

from __future__ import annotations

import struct
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("torch_geometric")

from support import toy_tu  # noqa: E402
from tiny_domain import harness  # noqa: E402

from domains.graph import data as graph_data  # noqa: E402
from domains.graph import tucache  # noqa: E402
from domains.graph.config import GraphConfig  # noqa: E402

FIELDS = ("x", "edge_index", "node_ptr", "edge_ptr", "y")


class _Planted:
    """Unpickling it opens (so creates) the marker file: the proof that a cache ran code."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _load(files: graph_data.TUFiles) -> graph_data.GraphSet:
    return graph_data.load_tu(files, GraphConfig(download=False))


def _quietly(files: graph_data.TUFiles) -> graph_data.GraphSet:
    """The set, failing on any warning: a sound cache is read without a word."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return _load(files)


def _data_end(path: Path, member: str) -> int:
    """The offset just past the stored bytes of ``member`` of the zip at ``path`` (its local header, then data)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    head = path.read_bytes()[info.header_offset:info.header_offset + 30]
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    return info.header_offset + 30 + name_len + extra_len + info.compress_size


def _same_graphs(a: graph_data.GraphSet, b: graph_data.GraphSet) -> bool:
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in FIELDS) and a.node_features == b.node_features


def test_a_planted_pickle_never_runs_and_the_run_rebuilds_the_cache(tmp_path, cache):
    toy_tu(tmp_path / "data")
    files = graph_data.tu_files("TOY", tmp_path / "data", download=False)
    marker = tmp_path / "pwned"
    planted = [tucache.cache_path("TOY", files.sha256),  # the harness's own cache file
               cache / "TU" / files.sha256[:16] / "TOY" / "processed" / "data.pt",  # where PyG kept it before
               cache / "TU" / "download" / "TOY" / "processed" / "data.pt"]  # beside a download
    for path in planted:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"data": _Planted(marker)}, path)
    proc = harness("run", "--domain", "graph", "--dataset", "TOY", "--loss", "jsd", "--seeds", "0", "--quiet",
                   "--set", "epochs=1", "--set", "svm_folds=3", "--set", "svm_inner_folds=2", "--set", "hidden=8",
                   "--data-root", str(tmp_path / "data"), "--results", str(tmp_path / "results"))
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    assert f"the TU cache {planted[0]} is damaged or was not written by the harness" in proc.stderr
    assert _quietly(files).num_graphs == 24 and not marker.exists()  # rebuilt: read again without a warning


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "another set's", "empty", "one array", "0-d x"])
def test_a_damaged_or_foreign_cache_is_named_and_rebuilt(tmp_path, cache, damage):
    toy_tu(tmp_path / "data")
    toy_tu(tmp_path / "data", "OTHER")
    (tmp_path / "data" / "TU" / "OTHER" / "raw" / "OTHER_graph_labels.txt").write_text("0\n1\n" * 12)  # other labels
    files, other = (graph_data.tu_files(n, tmp_path / "data", download=False) for n in ("TOY", "OTHER"))
    fresh = _load(files)
    path = tucache.cache_path("TOY", files.sha256)
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "flipped byte":  # the last byte of the labels: the zip's CRC no longer matches
        at = _data_end(path, "y.npy") - 1
        path.write_bytes(good[:at] + bytes([good[at] ^ 0xFF]) + good[at + 1:])
    elif damage == "another set's":
        _load(other)
        path.write_bytes(tucache.cache_path("OTHER", other.sha256).read_bytes())
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "0-d x":  # every entry there, x a single number: an IndexError on its columns, not a warning
        with np.load(path) as npz:
            arrays = {key: npz[key] for key in npz.files}
        with open(path, "wb") as fh:
            np.savez(fh, **{**arrays, "x": np.float32(0)})
    else:
        with open(path, "wb") as fh:
            np.save(fh, np.arange(3))
    with pytest.warns(UserWarning, match=f"the TU cache {path} is damaged or was not written by the harness"):
        again = _load(files)
    assert _same_graphs(again, fresh)
    assert _same_graphs(_quietly(files), fresh)  # the cache was rebuilt


def test_the_cache_holds_the_graphs_pyg_gives(tmp_path, cache):
    """A set read from the cache equals the one PyG processes from the raw files, and the file holds arrays only."""
    raw = toy_tu(tmp_path / "data")
    files = graph_data.tu_files("TOY", tmp_path / "data", download=False)
    first, cached = _load(files), _quietly(files)
    graphs, _ = tucache.process(raw, "TOY")
    direct = graph_data.from_data_list("TOY", graphs, "none")
    assert _same_graphs(first, cached)
    assert torch.equal(cached.edge_index, direct.edge_index) and torch.equal(cached.y, direct.y)
    assert cached.info == {"raw_dir": str(raw), "sha256": files.sha256}
    with np.load(tucache.cache_path("TOY", files.sha256), allow_pickle=False) as npz:
        assert all(npz[key].dtype != object for key in npz.files)


def test_processing_unpickles_nothing_so_no_file_planted_in_the_cache_can_run(tmp_path, cache, monkeypatch):
    """PyG's TUDataset loads its processed pickles with weights_only=False where the safe load fails, and a folder
    of the cache can be written by more than this process (a shared HARNESS_CACHE_DIR): the raw files are read
    without any processed file, so torch.load is never called while a set is built."""
    toy_tu(tmp_path / "data")
    files = graph_data.tu_files("TOY", tmp_path / "data", download=False)
    loads = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *args, **kwargs: loads.append(args) or real_load(*args, **kwargs))
    built = _load(files)
    assert loads == [] and built.num_graphs == 24
    assert not list(cache.rglob("*.pt"))  # and no processed file was left for a later run either


def test_a_download_goes_through_a_private_folder_and_replaces_an_incomplete_one(tmp_path, cache, monkeypatch):
    """PyG's download_url stands in for the network: it writes the set's zip (its files under <name>/, as the TU
    site packs them) where it is told; a processed file planted beside the download, and an earlier download that
    stopped half-way, are never used."""
    import torch_geometric.data

    folders = []

    def fake_download(url, folder, log=True):
        assert url.endswith("/MUTAG.zip")
        folders.append(Path(folder))
        zipped = Path(folder) / "MUTAG.zip"
        with zipfile.ZipFile(zipped, "w") as zf:
            for path in toy_tu(tmp_path / "site", "MUTAG").iterdir():
                zf.write(path, f"MUTAG/{path.name}")
        return str(zipped)

    monkeypatch.setattr(torch_geometric.data, "download_url", fake_download)
    fetched = cache / "TU" / "download" / "MUTAG" / "raw"
    fetched.mkdir(parents=True)
    (fetched / "MUTAG_A.txt").write_text("1, 2\n")  # the rest never arrived
    marker = tmp_path / "pwned"
    (fetched.parent / "processed").mkdir()
    torch.save({"data": _Planted(marker)}, fetched.parent / "processed" / "data.pt")
    assert graph_data.locate_raw("MUTAG", tmp_path / "data", download=True) == fetched
    assert folders and folders[0].parent == fetched.parent and not folders[0].exists()  # private, and removed
    assert sorted(p.name for p in fetched.iterdir()) == ["MUTAG_A.txt", "MUTAG_graph_indicator.txt",
                                                        "MUTAG_graph_labels.txt"]
    assert len((fetched / "MUTAG_A.txt").read_text().splitlines()) > 1 and not marker.exists()
    assert graph_data.locate_raw("MUTAG", tmp_path / "data", download=True) == fetched and len(folders) == 1


def test_an_unwritable_cache_is_named(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "file" / "cache"))
    raw = toy_tu(tmp_path / "data")
    files = graph_data.TUFiles("TOY", raw, tuple(graph_data.raw_files(raw, "TOY")), "0" * 64)
    with pytest.raises(graph_data.UserError, match=f"cannot create the cache folder {tmp_path / 'file'}/.*CACHE_DIR"):
        _load(files)
