"""The cache of processed TU sets: a format that cannot run code, checked before it is trusted.

PyG's ``TUDataset`` keeps a processed TU set as a pickle (``processed/data.pt``) and loads it, and the
``pre_transform.pt`` beside it, with ``weights_only=False`` where the safe load fails: a file planted there, even
in a fresh folder by whoever can write the folder above it, would run code. So the harness never lets PyG write or
read a processed file: it reads the raw text files with PyG's own reader (what ``TUDataset`` processes them with)
and downloads the zip with PyG's helpers, and keeps the result as plain arrays in an ``.npz`` (numpy's zip of
``.npy`` files, read with
``allow_pickle=False``: numbers and fixed-width strings, nothing else), ``<cache>/TU/<raw sha256[:16]>/
<name>.v<FORMAT>.npz``. Before use, the arrays are checked (the zip's CRCs, the entries, their types, shapes and
offsets, the raw files' sha256 written inside): a damaged or foreign file is named in a warning and rebuilt from
the raw files, never trusted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from domains.base import require
from domains.errors import UserError
from domains.files import cache_dir, write_atomic

CACHE_FORMAT = 3  # bump when the cached arrays of the same raw files would change
_TENSORS = {"x": np.float32, "edge_index": np.int64, "node_ptr": np.int64, "edge_ptr": np.int64, "y": np.int64}
_ENTRIES = {*_TENSORS, "node_attributes", "raw_sha256", "format"}


def cache_path(name: str, raw_sha256: str) -> Path:
    """Where the processed arrays of TU set ``name`` with raw files of digest ``raw_sha256`` are kept."""
    return cache_dir() / "TU" / raw_sha256[:16] / f"{name}.v{CACHE_FORMAT}.npz"


def read(path: Path, raw_sha256: str) -> dict[str, Any] | None:
    """The cached arrays (tensors, and ``node_attributes``: how many of x's leading columns are node attributes)
    when ``path`` is a sound cache of these raw files; None when there is none, or (with a warning naming the file and
    what is wrong) when it is damaged or foreign."""
    if not path.exists():
        return None
    try:
        npz = np.load(path, allow_pickle=False)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("one array, not a zip of arrays")
        with npz:
            arrays = {key: npz[key] for key in npz.files}
        return _checked(arrays, raw_sha256)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        warnings.warn(f"the TU cache {path} is damaged or was not written by the harness ({exc}); rebuilding it "
                      "from the raw files", UserWarning, stacklevel=2)
        return None


def _checked(arrays: dict[str, np.ndarray], raw_sha256: str) -> dict[str, Any]:
    """``arrays`` as tensors once each entry has the type, shape and offsets a processed set has; ValueError."""
    if set(arrays) != _ENTRIES:
        raise ValueError(f"entries {', '.join(sorted(arrays))}, expected {', '.join(sorted(_ENTRIES))}")
    if arrays["format"].shape != () or int(arrays["format"]) != CACHE_FORMAT or str(arrays["raw_sha256"]) != raw_sha256:
        raise ValueError("written for other raw files or by another version")
    for key, dtype in _TENSORS.items():
        if arrays[key].dtype != dtype:
            raise ValueError(f"{key} is {arrays[key].dtype}, expected {np.dtype(dtype)}")
    x, edges, node_ptr, edge_ptr, y = (arrays[key] for key in _TENSORS)
    graphs = y.shape[0] if y.ndim == 1 else -1
    if x.ndim != 2 or edges.ndim != 2 or edges.shape[0] != 2 or graphs < 0 \
            or node_ptr.shape != (graphs + 1,) or edge_ptr.shape != (graphs + 1,):
        raise ValueError("arrays of inconsistent shapes")
    if arrays["node_attributes"].shape != () or not 0 <= int(arrays["node_attributes"]) <= x.shape[1]:
        raise ValueError("a count of node attributes that x does not have")
    for ptr, total in ((node_ptr, x.shape[0]), (edge_ptr, edges.shape[1])):
        if ptr[0] != 0 or ptr[-1] != total or np.any(np.diff(ptr) < 0):
            raise ValueError("offsets that do not cover the nodes and edges")
    if edges.size and (edges.min() < 0 or edges.max() >= x.shape[0]):
        raise ValueError("edges between nodes that do not exist")
    tensors = {key: torch.from_numpy(arrays[key]) for key in _TENSORS}
    return {**tensors, "node_attributes": int(arrays["node_attributes"])}


def write(path: Path, tensors: dict[str, torch.Tensor], node_attributes: int, raw_sha256: str) -> None:
    """Keep the processed arrays atomically (concurrent runs never read half a file)."""
    arrays = {key: tensors[key].numpy().astype(dtype, copy=False) for key, dtype in _TENSORS.items()}
    write_atomic(path, lambda fh: np.savez(fh, **arrays, node_attributes=np.int64(node_attributes),
                                           raw_sha256=np.str_(raw_sha256), format=np.int64(CACHE_FORMAT)))


def process(raw: Path, name: str) -> tuple[list, int]:
    """PyG's graphs of TU set ``name`` from the raw files in ``raw`` and the number of node attributes, as
    ``TUDataset(use_node_attr=True)`` gives them (its reader: x holds the node attributes, then the one-hot node
    labels; edge attributes dropped; the class labels of ``graph_labels`` whatever else is there), without its
    processed pickle: nothing is written, nothing is unpickled."""
    pyg_io = require("torch_geometric.io", "graph")
    read_tu_data, read_txt_array = pyg_io.read_tu_data, pyg_io.read_txt_array
    graphs = require("torch_geometric.data", "graph").InMemoryDataset()  # no root: it neither processes nor loads
    graphs.data, graphs.slices, sizes = read_tu_data(str(raw), name)
    # The class labels, read as read_tu_data reads them (renumbered 0..C-1 in sorted order); it takes a
    # graph_attributes file, where there is one, as y instead (regression targets), which an SVM would then have
    # classified as truncated floats.
    labels = read_txt_array(str(raw / f"{name}_graph_labels.txt"), sep=",", dtype=torch.long)
    graphs._data.y = labels.unique(sorted=True, return_inverse=True)[1]
    graphs.slices["y"] = torch.arange(labels.shape[0] + 1)
    # TUDataset's use_edge_attr=False (the encoder reads no edge features); the node attributes are kept, and a run
    # takes them only when asked (GraphConfig.node_attributes, use_node_attr)
    if graphs._data.edge_attr is not None:
        graphs._data.edge_attr = graphs._data.edge_attr[:, sizes["num_edge_attributes"]:]
    return list(graphs), sizes["num_node_attributes"]


REQUIRED_PARTS = ("A", "graph_indicator", "graph_labels")  # the files every TU set (of graph classes) has


def missing_raw(raw: Path, name: str) -> list[str]:
    """The names of the files of :data:`REQUIRED_PARTS` that ``raw`` lacks."""
    return [file for part in REQUIRED_PARTS if not (raw / (file := f"{name}_{part}.txt")).is_file()]


def has_raw(raw: Path, name: str) -> bool:
    """Whether ``raw`` holds the files every TU set has."""
    return not missing_raw(raw, name)


def download(name: str, target: Path) -> None:
    """The zip of TU set ``name`` from PyG's source of TU sets, extracted into ``target`` (its raw folder) through a
    fresh private folder; nothing is processed there. One process downloads at a time; an incomplete earlier
    download is replaced."""
    filelock = require("filelock", "graph")
    pyg = require("torch_geometric.data", "graph")
    url = require("torch_geometric.datasets", "graph").TUDataset.url
    writable(target.parent)
    with filelock.FileLock(f"{target.parent}.lock"):
        if has_raw(target, name):
            return  # another process downloaded it meanwhile
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".download-") as tmp:
            pyg.extract_zip(pyg.download_url(f"{url}/{name}.zip", tmp, log=False), tmp, log=False)
            if target.exists():
                shutil.rmtree(target)
            (Path(tmp) / name).rename(target)  # the zip holds <name>/<name>_A.txt, ...


def writable(folder: Path) -> None:
    """Create the cache folder ``folder``; UserError naming it when it cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the cache folder {folder}: {exc.strerror or exc}; set HARNESS_CACHE_DIR "
                        "to a writable folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"cannot write into the cache folder {folder} (permission denied); set HARNESS_CACHE_DIR "
                        "to a writable folder")
