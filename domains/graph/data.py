"""Graph-classification data: TU datasets (through PyG's ``TUDataset``) and the embedded synthetic set,
held as one flat :class:`GraphSet` from which batches are cut with tensor ops only.

TU layout: ``<data root>/TU/<NAME>/raw/<NAME>_A.txt``, ``..._graph_indicator.txt``, ... (the files of
https://chrsmrrs.github.io/datasets/). The data folder is only read: PyG's ``processed/`` files are
written to a cache (``$HARNESS_CACHE_DIR`` or ``~/.cache/contrastive-harness``) under a key made of
the raw files' hash, whose ``raw`` entry is a symlink to the data folder's ``raw/``.

Sets without node features (IMDB-BINARY, REDDIT-BINARY) get, with ``featureless="degree"``, the rule
of the InfoGraph code of HCL (Robinson et al. 2021) and GraphCL (You et al. 2020): one-hot degree when
the largest degree is below ``degree_onehot_limit`` (1000), else the degree standardised over all
nodes; with ``featureless="constant"``, InfoGraph's own single constant feature.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from domains.base import DatasetMissingError, cache_dir, hash_files, require
from domains.graph.config import GraphConfig

TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets"


@dataclass
class GraphBatch:
    """A batch of graphs: node features, edges (batch-local ids), node -> graph, graph labels."""

    x: Tensor
    edge_index: Tensor
    batch: Tensor
    y: Tensor
    num_graphs: int


@dataclass
class GraphSet:
    """G graphs stored flat: nodes and edges grouped by graph, ``node_ptr``/``edge_ptr`` of size G+1;
    ``edge_index`` holds global node ids."""

    name: str
    x: Tensor  # float [N, F]
    edge_index: Tensor  # long [2, E]
    node_ptr: Tensor  # long [G+1]
    edge_ptr: Tensor  # long [G+1]
    y: Tensor  # long [G]
    node_features: str  # what x is, for the record
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def num_graphs(self) -> int:
        return self.y.shape[0]

    @property
    def num_features(self) -> int:
        return self.x.shape[1]

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1

    def to(self, device: torch.device) -> GraphSet:
        moved = {k: getattr(self, k).to(device) for k in ("x", "edge_index", "node_ptr", "edge_ptr", "y")}
        return GraphSet(self.name, node_features=self.node_features, info=self.info, **moved)

    def batch(self, idx: Tensor) -> GraphBatch:
        """The graphs ``idx`` (in that order) as one batch; vectorised, no loop over graphs."""
        idx = idx.to(self.y.device)
        graph_ids = torch.arange(idx.shape[0], device=idx.device)
        n_start, n_count = self.node_ptr[idx], self.node_ptr[idx + 1] - self.node_ptr[idx]
        e_start, e_count = self.edge_ptr[idx], self.edge_ptr[idx + 1] - self.edge_ptr[idx]
        node_graph = torch.repeat_interleave(graph_ids, n_count)
        edge_graph = torch.repeat_interleave(graph_ids, e_count)
        new_start = torch.cumsum(n_count, 0) - n_count  # first batch-local id of each graph
        node_ids = _ranges(n_start, n_count, node_graph)
        edge_ids = _ranges(e_start, e_count, edge_graph)
        edges = self.edge_index[:, edge_ids] - (n_start - new_start)[edge_graph]
        return GraphBatch(self.x[node_ids], edges, node_graph, self.y[idx], idx.shape[0])


def _ranges(start: Tensor, count: Tensor, owner: Tensor) -> Tensor:
    """Concatenation of ``arange(start[i], start[i] + count[i])``; ``owner`` repeats i count[i] times."""
    first = torch.cumsum(count, 0) - count
    return start[owner] + torch.arange(owner.shape[0], device=owner.device) - first[owner]


def from_data_list(name: str, graphs: list, node_features: str, info: dict[str, Any] | None = None) -> GraphSet:
    """A GraphSet from PyG ``Data`` objects (x may be None: filled in by :func:`add_featureless`)."""
    batch_cls = require("torch_geometric.data", "graph").Batch
    big = batch_cls.from_data_list(graphs)
    n_graphs = len(graphs)
    edge_counts = torch.bincount(big.batch[big.edge_index[0]], minlength=n_graphs)
    edge_ptr = torch.cat([edge_counts.new_zeros(1), torch.cumsum(edge_counts, 0)])
    x = big.x.float() if big.x is not None else torch.empty(big.num_nodes, 0)
    return GraphSet(name, x, big.edge_index, big.ptr, edge_ptr, big.y.view(-1).long(), node_features,
                    info or {})


def add_featureless(data: GraphSet, cfg: GraphConfig) -> GraphSet:
    """Fill in node features for a set without any (see the module docstring); else return it as is."""
    if data.num_features > 0:
        return data
    n_nodes = data.node_ptr[-1].item()
    if cfg.featureless == "constant":
        data.x, data.node_features = torch.ones(n_nodes, 1), "constant 1 (no node features in the data)"
        return data
    deg = torch.bincount(data.edge_index[0], minlength=n_nodes)
    max_deg = int(deg.max()) if n_nodes else 0
    if max_deg < cfg.degree_onehot_limit:
        data.x = torch.nn.functional.one_hot(deg, max_deg + 1).float()
        data.node_features = f"one-hot degree 0..{max_deg} (no node features in the data)"
    else:
        deg = deg.float()
        data.x = ((deg - deg.mean()) / deg.std()).view(-1, 1)
        data.node_features = (f"standardised degree (largest degree {max_deg} >= {cfg.degree_onehot_limit}; "
                              "no node features in the data)")
    return data


def _has_raw(raw: Path, name: str) -> bool:
    return all((raw / f"{name}_{part}.txt").is_file() for part in ("A", "graph_indicator", "graph_labels"))


def raw_files(raw: Path, name: str) -> list[Path]:
    return sorted(raw.glob(f"{name}_*.txt"))


def _missing(name: str, data_root: Path, why: str) -> DatasetMissingError:
    return DatasetMissingError(
        f"TU dataset '{name}' not found ({why}); put its files ({name}_A.txt, {name}_graph_indicator.txt, "
        f"{name}_graph_labels.txt, ...) in {data_root / 'TU' / name / 'raw'}/ (from {TU_URL}/{name}.zip)"
    )


def locate_raw(name: str, data_root: Path, download: bool) -> Path:
    """The raw folder of TU set ``name``: the data root's, else an earlier download in the cache,
    else PyG's download into the cache (if ``download``); DatasetMissingError when all fail."""
    raw = Path(data_root) / "TU" / name / "raw"
    fetched = cache_dir() / "TU" / "download" / name / "raw"
    for candidate in (raw, fetched):
        if _has_raw(candidate, name):
            return candidate
    if not download:
        raise _missing(name, data_root, f"no files in {raw}, download disabled")
    tu_dataset = require("torch_geometric.datasets", "graph").TUDataset
    try:
        tu_dataset(str(fetched.parent.parent), name)
    except Exception as exc:  # noqa: BLE001 - any failure of the download means the same to the user
        raise _missing(name, data_root, f"download failed: {type(exc).__name__}: {exc}") from exc
    if not _has_raw(fetched, name):
        raise _missing(name, data_root, "the download did not contain the expected files")
    return fetched


def load_tu(name: str, data_root: Path, cfg: GraphConfig) -> GraphSet:
    """TU set ``name`` as a GraphSet, node features as PyG gives them (one-hot node labels)."""
    filelock = require("filelock", "graph")
    tu_dataset = require("torch_geometric.datasets", "graph").TUDataset
    raw = locate_raw(name, data_root, cfg.download)
    digest = hash_files(raw_files(raw, name))
    # PyG processes <root>/<name>/raw into <root>/<name>/processed: a private root per raw content.
    root = cache_dir() / "TU" / digest[:16]
    link = root / name / "raw"
    link.parent.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(root / f"{name}.lock")):
        if not link.exists():
            link.symlink_to(raw.resolve(), target_is_directory=True)
        dataset = tu_dataset(str(root), name)
        graphs = list(dataset)
    n_feat = dataset.num_node_features
    features = f"one-hot node labels ({n_feat})" if n_feat else "none"
    data = from_data_list(name, graphs, features, {"raw_dir": str(raw), "sha256": digest})
    return add_featureless(data, cfg)


def tu_fingerprint(name: str, data_root: Path, download: bool) -> dict[str, Any]:
    raw = locate_raw(name, data_root, download)
    files = raw_files(raw, name)
    return {"dataset": name, "source": "TU", "files": [f.name for f in files], "sha256": hash_files(files)}
