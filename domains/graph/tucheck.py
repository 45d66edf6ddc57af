"""What is wrong with the raw files of a TU set, named by file and, where it can be, line: damage that PyG's reader
accepts without a word (a truncated file, graphs out of order, an edge to a node that does not exist or across two
graphs) or reports without naming the file (a value that is not a number)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

# The files of a TU set that PyG's TUDataset reads (torch_geometric.io.tu.read_tu_data): only these are hashed and
# checked, so that another file beside them (notes, a second set whose name starts with this one's) changes nothing.
TU_PARTS = ("A", "graph_indicator", "graph_labels", "graph_attributes", "node_labels", "node_attributes",
            "edge_labels", "edge_attributes")
# Parts whose values are integers (ids and labels); the attributes may be real numbers.
_INTEGER_PARTS = ("A", "graph_indicator", "graph_labels", "node_labels", "edge_labels")


def raw_files(raw: Path, name: str) -> list[Path]:
    """The files of TU set ``name`` in ``raw`` that PyG reads (:data:`TU_PARTS`), sorted."""
    return sorted(path for part in TU_PARTS if (path := raw / f"{name}_{part}.txt").is_file())


# Files of a TU set that hold one line per edge, per node and per graph: their line counts must agree.
_PER_ITEM = {"edge": ("A", "edge_labels", "edge_attributes"), "node": ("graph_indicator", "node_labels",
             "node_attributes"), "graph": ("graph_labels", "graph_attributes")}


def _count_lines(path: Path) -> tuple[int, bytes]:
    """The number of lines of ``path`` and its last line (the graph indicator's names the last graph)."""
    data = path.read_bytes()
    lines = data.splitlines()
    return len(lines), lines[-1] if lines else b""


def count_mismatch(raw: Path, name: str) -> str | None:
    """Files whose line counts disagree (a truncated file; PyG accepts some of these without a word), else None."""
    found = {path.name[len(name) + 1:-len(".txt")]: _count_lines(path) for path in raw_files(raw, name)}
    graphs = found.get("graph_indicator", (0, b""))[1].strip()
    if graphs.isdigit():  # graphs are numbered 1..G in order: the last line names G
        found["graphs"] = (int(graphs), b"")
    indicator = raw / f"{name}_graph_indicator.txt"
    problem = _indicator_problem(indicator) if indicator.is_file() else None
    if problem:
        return problem
    for item, parts in _PER_ITEM.items():
        counts = {f"{name}_{part}.txt": found[part][0] for part in parts if part in found}
        if item == "graph" and "graphs" in found:
            counts[f"graphs in {name}_graph_indicator.txt"] = found["graphs"][0]
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{file} {count}" for file, count in counts.items())
            return f"files with one line per {item} disagree (lines: {listed}): one of them is truncated in {raw}"
    return None


def _indicator_problem(path: Path) -> str | None:
    """What is wrong with a graph indicator whose graphs are not numbered 1, 2, ... in the order of the nodes (PyG
    cuts the nodes into graphs by count, so another order silently mixes the graphs), else None."""
    try:
        ids = np.array(path.read_bytes().split(), dtype=np.int64)
    except ValueError:
        return None  # not numbers: damaged_file names the line once PyG fails on it
    if not ids.size:
        return None
    if ids[0] != 1:
        return f"{path}, line 1: the first node's graph is {int(ids[0])}, not 1 (graphs are numbered 1, 2, ...)"
    steps = np.diff(ids)
    bad = np.flatnonzero((steps < 0) | (steps > 1))
    if not bad.size:
        return None
    line = int(bad[0]) + 2
    return (f"{path}, line {line}: graph {int(ids[line - 1])} after graph {int(ids[line - 2])}; the nodes' "
            "graphs must be numbered 1, 2, ... in order")


def edge_problem(raw: Path, name: str, edges: Tensor, node_ptr: Tensor) -> str | None:
    """The first line of ``<name>_A.txt`` whose edge names a node that does not exist or joins two graphs (PyG keeps
    both without a word), when the processed ``edges`` (global node ids) have such an edge among the graphs whose
    nodes ``node_ptr`` delimits; else None."""
    n_nodes = int(node_ptr[-1])
    if not edges.numel():
        return None
    graph_of = torch.bucketize(edges.clamp(0, max(n_nodes - 1, 0)), node_ptr[1:], right=True)
    if int(edges.min()) >= 0 and int(edges.max()) < n_nodes and bool((graph_of[0] == graph_of[1]).all()):
        return None
    path = raw / f"{name}_A.txt"
    return _bad_edge_line(path, node_ptr.numpy()) or f"{path}: edges that PyG placed outside the nodes of their graph"


def _bad_edge_line(path: Path, node_ptr: np.ndarray) -> str | None:
    """The first line of the edge list ``path`` whose edge names a node beyond the graphs that ``node_ptr``
    delimits or joins two of them, else None."""
    pairs = np.array(path.read_bytes().replace(b",", b" ").split(), dtype=np.int64).reshape(-1, 2) - 1
    n_nodes = int(node_ptr[-1])
    inside = (pairs >= 0) & (pairs < n_nodes)
    graphs = np.searchsorted(node_ptr[1:], pairs.clip(0, max(n_nodes - 1, 0)), side="right")
    bad = np.flatnonzero(~inside.all(axis=1) | (graphs[:, 0] != graphs[:, 1]))
    if not bad.size:
        return None
    line, (u, v) = int(bad[0]) + 1, pairs[bad[0]] + 1
    if not inside[bad[0]].all():
        return f"{path}, line {line}: edge {u}, {v} names a node beyond the {n_nodes} of the graph indicator"
    return f"{path}, line {line}: edge {u}, {v} joins nodes of two graphs ({graphs[bad[0], 0] + 1} and " \
           f"{graphs[bad[0], 1] + 1})"


def why_pyg_failed(raw: Path, name: str) -> str | None:
    """What in the raw files of TU set ``name`` made PyG's reader fail, named by file and line where it can be: a
    value that is not a number, an empty edge list, an edge to a node beyond the last one (its reader then indexes
    out of bounds); None when none of these is the cause. Line counts were checked before (:func:`count_mismatch`)."""
    problem = damaged_file(raw, name)
    if problem:
        return problem
    edges = raw / f"{name}_A.txt"
    if not edges.read_bytes().strip():
        return f"{edges} is empty: the set has no edges (the encoder passes messages along them)"
    ids = np.array((raw / f"{name}_graph_indicator.txt").read_bytes().split(), dtype=np.int64)
    node_ptr = np.concatenate([[0], np.cumsum(np.bincount(ids - 1))])  # graphs 1..G in order: _indicator_problem
    return _bad_edge_line(edges, node_ptr)


# The widest one-hot of node labels a set may ask for: its memory is (nodes x width) floats, and a label that is an
# id, not a category (a value of 10^6 among labels 0..6), would take gigabytes for a few thousand nodes. The sets of
# the TU collection have at most a few hundred node labels, except DBLP_v1 (41,325: 30 GB as one-hot).
NODE_LABEL_WIDTH_MAX = 10_000


def node_label_problem(raw: Path, name: str) -> str | None:
    """Node labels whose one-hot (PyG's: labels ``min..max`` of each column, one column each) would be wider than
    :data:`NODE_LABEL_WIDTH_MAX`, named with the lines of the smallest and largest label; else None."""
    path = raw / f"{name}_node_labels.txt"
    if not path.is_file():
        return None
    data = path.read_bytes()
    try:
        labels = np.array(data.replace(b",", b" ").split(), dtype=np.int64).reshape(len(data.splitlines()), -1)
    except ValueError:
        return None  # not integers, or ragged lines: damaged_file names the line once PyG fails on it
    if not labels.size:
        return None
    widths = labels.max(axis=0) - labels.min(axis=0) + 1
    if int(widths.sum()) <= NODE_LABEL_WIDTH_MAX:
        return None
    column = labels[:, int(np.argmax(widths))]
    low, high = int(np.argmin(column)), int(np.argmax(column))
    return (f"{path}: node labels from {column[low]} (line {low + 1}) to {column[high]} (line {high + 1}) would be "
            f"one-hot features {int(widths.sum())} wide, over the {NODE_LABEL_WIDTH_MAX} the graph domain takes: node "
            "labels are categories numbered 0, 1, ..., not ids")


def non_finite_line(path: Path, values: Tensor) -> str | None:
    """The first line of ``path`` (one line per row of ``values``, as read from it) with a value that is not a
    finite number (``nan``, ``inf``: PyG reads them as numbers), else None."""
    bad = (~torch.isfinite(values)).any(dim=1).nonzero()
    if not bad.numel():
        return None
    row = int(bad[0])
    return f"{path}, line {row + 1}: {values[row].tolist()} holds a value that is not a finite number"


def damaged_file(raw: Path, name: str) -> str | None:
    """The first line of the files of TU set ``name`` in ``raw`` that is not comma-separated numbers (integers for
    ids and labels; two of them on each line of the edge list; as many on every line of a file as on its first),
    else None. Line counts that disagree are :func:`count_mismatch`'s, checked before this one is called."""
    for path in raw_files(raw, name):
        integers = path.name[len(name) + 1:-len(".txt")] in _INTEGER_PARTS
        width = 2 if path.name == f"{name}_A.txt" else None
        with open(path, errors="replace") as fh:
            for number, line in enumerate(fh, 1):
                fields = line.split(",")
                try:
                    [int(x) if integers else float(x) for x in fields]
                except ValueError:
                    kind = "integers" if integers else "numbers"
                    return f"{path}, line {number}: {line.strip()[:40]!r} is not comma-separated {kind}"
                width = width or len(fields)
                if len(fields) != width:
                    return f"{path}, line {number}: {line.strip()[:40]!r} has {len(fields)} values, not {width}"
    return None
