"""The TU data paths under damage: what is hashed (the files PyG reads, nothing beside them), and raw files whose
damage PyG accepts without a word (an edge to a node that does not exist or across two graphs, graph ids out of
order) or reports without naming the file (a label that is not an integer, an edge line with one id). Every set is
written by the test (``support.toy_tu``); nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")

from support import toy_tu  # noqa: E402

from domains.errors import UserError  # noqa: E402
from domains.graph import data as graph_data  # noqa: E402
from domains.graph.config import GraphConfig  # noqa: E402


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _load(root: Path, name: str = "TOY") -> graph_data.GraphSet:
    return graph_data.load_tu(graph_data.tu_files(name, root, False), GraphConfig())


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_a_file_beside_the_sets_files_changes_neither_fingerprint_nor_data(tmp_path):
    """``<NAME>_*.txt`` took in any file of that prefix: notes, or the files of another set (PROTEINS_full_A.txt
    beside PROTEINS_A.txt), changed the fingerprint and could fail the load."""
    raw = toy_tu(tmp_path)
    before = graph_data.tu_files("TOY", tmp_path, False)
    (raw / "TOY_notes.txt").write_text("where these files came from\n")
    (raw / "TOY_full_A.txt").write_text("1, 2\n")
    after = graph_data.tu_files("TOY", tmp_path, False)
    assert after.fingerprint == before.fingerprint
    assert _load(tmp_path).num_graphs == 24


def test_a_changed_label_changes_the_fingerprint_and_mtime_does_not(tmp_path):
    import os

    raw = toy_tu(tmp_path)
    first = graph_data.tu_files("TOY", tmp_path, False).fingerprint
    os.utime(raw / "TOY_A.txt", ns=(1, 1))
    assert graph_data.tu_files("TOY", tmp_path, False).fingerprint == first
    _edit(raw / "TOY_graph_labels.txt", "0\n", "1\n")
    assert graph_data.tu_files("TOY", tmp_path, False).fingerprint != first


@pytest.mark.parametrize("file, old, new, named", [
    # PyG kept it: edge_index named node 99 of a set of 84 nodes
    ("TOY_A.txt", "1, 2\n", "1, 99\n", r"TOY_A\.txt, line 1: edge 1, 99 names a node beyond the 84"),
    # node 5 is in the second graph
    ("TOY_A.txt", "1, 2\n", "1, 5\n", r"TOY_A\.txt, line 1: edge 1, 5 joins nodes of two graphs \(1 and 2\)"),
    # PyG failed with "invalid literal for int()", naming no file
    ("TOY_graph_labels.txt", "0\n", "0.5\n", r"TOY_graph_labels\.txt, line 1: '0\.5' is not comma-separated integers"),
])
def test_a_damaged_line_is_named_with_its_file_and_line(tmp_path, file, old, new, named):
    raw = toy_tu(tmp_path)
    _edit(raw / file, old, new)
    with pytest.raises(UserError, match=named):
        _load(tmp_path)


def test_graph_ids_out_of_order_are_named(tmp_path):
    """PyG cuts the nodes into graphs by count: an indicator out of order mixed the graphs without a word."""
    raw = toy_tu(tmp_path)
    lines = (raw / "TOY_graph_indicator.txt").read_text().splitlines()
    lines[3], lines[4] = "3", "2"  # the second graph's first node says graph 3
    (raw / "TOY_graph_indicator.txt").write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=r"TOY_graph_indicator\.txt, line 4: graph 3 after graph 1"):
        _load(tmp_path)


def test_an_edge_line_with_one_id_is_named(tmp_path):
    """A last line cut in the middle ("12"): PyG failed with a mask-shape error naming no file."""
    raw = toy_tu(tmp_path)
    text = (raw / "TOY_A.txt").read_text()
    (raw / "TOY_A.txt").write_text(text + "12\n")
    with pytest.raises(UserError, match=r"TOY_A\.txt, line \d+: '12' has 1 values, not 2"):
        _load(tmp_path)


def test_an_unreadable_raw_file_is_named(tmp_path, monkeypatch):
    """As root ignores file permissions, the refusal is the open() that hashing the file calls."""
    import builtins

    from domains import files

    toy_tu(tmp_path)

    def refusing_open(path, *args, **kwargs):
        if Path(path).name == "TOY_A.txt":
            raise PermissionError(13, "Permission denied", str(path))
        return builtins.open(path, *args, **kwargs)

    monkeypatch.setattr(files, "_FILE_HASHES", {})
    monkeypatch.setattr(files, "open", refusing_open, raising=False)
    with pytest.raises(UserError, match=r"cannot read data file .*TOY_A\.txt: Permission denied"):
        graph_data.tu_files("TOY", tmp_path, False)


def test_a_cache_folder_anyone_may_write_is_refused_before_it_is_read(tmp_path, cache):
    """A cache file carries the digest of the raw files in its name, so a file planted in a cache folder that
    others may write would be read as the set: such a folder is an error naming it, and the remedy."""
    toy_tu(tmp_path)
    cache.mkdir()
    cache.chmod(0o777)
    with pytest.raises(UserError, match=r"cache folder .*cache is writable by every user.*HARNESS_CACHE_DIR"):
        _load(tmp_path)
    cache.chmod(0o755)
    assert _load(tmp_path).num_graphs == 24  # the user's own folder: read and filled as before
