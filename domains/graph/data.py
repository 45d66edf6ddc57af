"""Graph-classification data: TU datasets (through PyG's reader of TU files) and the embedded synthetic set,
held as one flat :class:`GraphSet` from which batches are cut with tensor ops only.

TU layout: ``<data root>/TU/<NAME>/raw/<NAME>_A.txt``, ``..._graph_indicator.txt``, ... (the files of
https://chrsmrrs.github.io/datasets/). The data folder is only read: the processed graphs are kept in a
cache (``$HARNESS_CACHE_DIR`` or ``~/.cache/contrastive-harness``) under a key made of the raw files' hash,
in a format that cannot run code (:mod:`domains.graph.tucache`). A name is letters, digits, ``_`` and ``-``
(:func:`check_tu_name`): it names a folder and files, and never reaches outside them.

Sets without node features (IMDB-BINARY, REDDIT-BINARY) get, with ``featureless="degree"``, the rule
of the InfoGraph code of HCL (Robinson et al. 2021) and GraphCL (You et al. 2020): one-hot degree when
the largest degree is below ``degree_onehot_limit`` (1000), else the degree standardised over all
nodes; with ``featureless="constant"``, InfoGraph's own single constant feature.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from domains.base import counted, did_you_mean, require
from domains.errors import DatasetMissingError, UserError
from domains.files import cache_dir, hash_files
from domains.graph import tucache
from domains.graph.config import GraphConfig
from domains.graph.tucheck import (
    count_mismatch,
    edge_problem,
    node_label_problem,
    non_finite_line,
    raw_files,
    why_pyg_failed,
)

TU_URL = "https://www.chrsmrrs.com/graphkerneldatasets"
_TOX21 = ("AhR", "AR", "AR-LBD", "ARE", "aromatase", "ATAD5", "ER", "ER-LBD", "HSE", "MMP", "p53", "PPAR-gamma")
# The graph-classification sets of the TU collection (https://chrsmrrs.github.io/datasets/docs/datasets/). Only
# these are ever downloaded: any other name is a typo unless its files are on disk, and gets a suggestion instead
# of a network request.
TU_CATALOGUE = frozenset("""
    AIDS alchemy_full aspirin benzene BZR BZR_MD COX2 COX2_MD DHFR DHFR_MD ER_MD ethanol FRANKENSTEIN
    malonaldehyde MCF-7 MCF-7H MOLT-4 MOLT-4H Mutagenicity MUTAG naphthalene NCI1 NCI109 NCI-H23 NCI-H23H
    OVCAR-8 OVCAR-8H P388 P388H PC-3 PC-3H PTC_FM PTC_FR PTC_MM PTC_MR QM9 salicylic_acid SF-295 SF-295H SN12C
    SN12CH SW-620 SW-620H toluene uracil UACC257 UACC257H Yeast YeastH ZINC_full ZINC_test ZINC_train ZINC_val
    DD ENZYMES KKI OHSU Peking_1 PROTEINS PROTEINS_full
    COIL-DEL COIL-RAG Cuneiform Fingerprint FIRSTMM_DB Letter-high Letter-low Letter-med MSRC_9 MSRC_21 MSRC_21C
    COLLAB dblp_ct1 dblp_ct2 DBLP_v1 deezer_ego_nets facebook_ct1 facebook_ct2 github_stargazers highschool_ct1
    highschool_ct2 IMDB-BINARY IMDB-MULTI infectious_ct1 infectious_ct2 mit_ct1 mit_ct2 REDDIT-BINARY
    REDDIT-MULTI-5K REDDIT-MULTI-12K reddit_threads tumblr_ct1 tumblr_ct2 twitch_egos TWITTER-Real-Graph-Partial
    COLORS-3 SYNTHETIC SYNTHETICnew Synthie TRIANGLES
""".split()) | {f"Tox21_{t}_{part}" for t in _TOX21 for part in ("training", "testing", "evaluation")}
TU_NAME = re.compile(r"[A-Za-z0-9_\-]+")  # every name of the catalogue; no path separator, no '..'


def check_tu_name(name: str) -> None:
    """UserError unless ``name`` can be a TU set's name: it becomes a folder and the prefix of file names."""
    if not TU_NAME.fullmatch(name):
        raise UserError(f"'{name}' is not a TU dataset name (letters, digits, '_' and '-' only): a name, not a path")


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


def add_featureless(data: GraphSet, cfg: GraphConfig, why: str = "no node features in the data") -> GraphSet:
    """Fill in node features for a set without any (see the module docstring), the record saying ``why`` it has
    none; else return it as is."""
    if data.num_features > 0:
        return data
    n_nodes = data.node_ptr[-1].item()
    if cfg.featureless == "constant":
        data.x, data.node_features = torch.ones(n_nodes, 1), f"constant 1 ({why})"
        return data
    deg = torch.bincount(data.edge_index[0], minlength=n_nodes)
    max_deg = int(deg.max()) if n_nodes else 0
    if max_deg < cfg.degree_onehot_limit:
        data.x = torch.nn.functional.one_hot(deg, max_deg + 1).float()
        data.node_features = f"one-hot degree 0..{max_deg} ({why})"
    else:
        deg = deg.float()
        data.x = ((deg - deg.mean()) / deg.std()).view(-1, 1)
        data.node_features = (f"standardised degree (largest degree {max_deg} >= {cfg.degree_onehot_limit}; "
                              f"{why})")
    return data


def _missing(name: str, data_root: Path, why: str) -> DatasetMissingError:
    return DatasetMissingError(
        f"TU dataset '{name}' not found ({why}); put its files ({name}_A.txt, {name}_graph_indicator.txt, "
        f"{name}_graph_labels.txt, ...) in {data_root / 'TU' / name / 'raw'}/ (from {TU_URL}/{name}.zip)"
    )


def _incomplete(name: str, raw: Path) -> str:
    """What a raw folder that holds some of the files of TU set ``name`` lacks."""
    required = ", ".join(f"{name}_{part}.txt" for part in tucache.REQUIRED_PARTS)
    why = f"TU dataset '{name}' is incomplete: {raw}/ has no {' and no '.join(tucache.missing_raw(raw, name))} " \
          f"(every TU set has {required})"
    if (raw / f"{name}_graph_attributes.txt").is_file() and not (raw / f"{name}_graph_labels.txt").is_file():
        why += f"; {name}_graph_attributes.txt holds regression targets, which the graph domain does not take: " \
               "it classifies graphs by the class labels of graph_labels"
    return why


def locate_raw(name: str, data_root: Path, download: bool) -> Path:
    """The raw folder of TU set ``name``: the data root's, else an earlier download in the cache,
    else PyG's download into the cache (if ``download``); DatasetMissingError when all fail, or when the data
    root's folder holds some of the files but not all (it is never bypassed by a download)."""
    check_tu_name(name)
    raw = Path(data_root) / "TU" / name / "raw"
    fetched = cache_dir() / "TU" / "download" / name / "raw"
    if tucache.has_raw(raw, name):
        return raw
    if raw_files(raw, name):  # a set of one's own, or a copy, with a file left behind: name it, never bypass it
        raise DatasetMissingError(_incomplete(name, raw))
    if tucache.has_raw(fetched, name):
        return fetched
    if name not in TU_CATALOGUE:
        raise DatasetMissingError(
            f"unknown dataset '{name}'{did_you_mean(name, TU_CATALOGUE)} It is not a TU set (harness list "
            f"datasets) and {raw}/ holds no files; a TU-format set of your own goes there ({name}_A.txt, "
            f"{name}_graph_indicator.txt, {name}_graph_labels.txt, ...)")
    if not download:
        raise _missing(name, data_root, f"no files in {raw}, download disabled")
    try:
        tucache.download(name, fetched)
    except Exception as exc:  # noqa: BLE001 - any failure of the download means the same to the user
        raise _missing(name, data_root, f"download failed: {type(exc).__name__}: {exc}") from exc
    if not tucache.has_raw(fetched, name):
        raise _missing(name, data_root, "the download did not contain the expected files")
    return fetched


@dataclass(frozen=True)
class TUFiles:
    """The raw files of a TU set, found and hashed once: the hash is the data fingerprint and the key of the
    set's processed files in the cache."""

    name: str
    raw: Path
    files: tuple[Path, ...]
    sha256: str

    @property
    def fingerprint(self) -> dict[str, Any]:
        return {"dataset": self.name, "source": "TU", "files": [f.name for f in self.files], "sha256": self.sha256}


def tu_files(name: str, data_root: Path, download: bool) -> TUFiles:
    """The raw files of TU set ``name`` (:func:`locate_raw`) and their sha256."""
    raw = locate_raw(name, data_root, download)
    files = tuple(raw_files(raw, name))
    return TUFiles(name, raw, files, hash_files(files))  # an unreadable file: hash_files names it


def load_tu(tu: TUFiles, cfg: GraphConfig) -> GraphSet:
    """The TU set of ``tu`` as a GraphSet, node features as PyG gives them (one-hot node labels): from the cache
    when it holds a sound copy of these raw files, else processed from them and cached."""
    filelock = require("filelock", "graph")
    path = tucache.cache_path(tu.name, tu.sha256)
    tucache.writable(path.parent)
    with filelock.FileLock(str(path.with_suffix(".lock"))):  # one process builds it, the others then read it
        cached = tucache.read(path, tu.sha256)
        if cached is None:
            built, attributes = _process(tu)
            tucache.write(path, vars(built), attributes, tu.sha256)
            cached = {**vars(built), "node_attributes": attributes}
    info = {"raw_dir": str(tu.raw), "sha256": tu.sha256}
    tensors = {k: cached[k] for k in ("x", "edge_index", "node_ptr", "edge_ptr", "y")}
    return _node_features(tu, GraphSet(tu.name, **tensors, node_features="", info=info), cached["node_attributes"], cfg)


def _node_features(tu: TUFiles, data: GraphSet, attributes: int, cfg: GraphConfig) -> GraphSet:
    """``data`` with the node features the run uses, and the record's words for them: of x's columns, the first
    ``attributes`` (the node attributes) only with ``cfg.node_attributes``, and the one-hot node labels after them;
    where that leaves none, those of :func:`add_featureless`. The record says which attributes were left out."""
    file = f"{tu.name}_node_attributes.txt"
    labels = data.num_features - attributes
    if cfg.node_attributes:
        if not attributes:
            raise UserError(f"node_attributes=true: TU dataset '{tu.name}' has no {file} in {tu.raw}/")
        problem = non_finite_line(tu.raw / file, data.x[:, :attributes])
        if problem:
            raise _unreadable(tu, problem)
        data.node_features = f"node attributes ({attributes}, {file})" + \
            (f" and one-hot node labels ({labels})" if labels else "")
        return data
    data.x = data.x[:, attributes:].contiguous()
    left_out = (f"{counted(attributes, 'node attribute')} of {file} left out: node_attributes=false"
                if attributes else "")
    if not labels:
        return add_featureless(data, cfg, left_out or "no node features in the data")
    data.node_features = f"one-hot node labels ({labels})" + (f"; {left_out}" if left_out else "")
    return data


def _process(tu: TUFiles) -> tuple[GraphSet, int]:
    """The graphs of the raw files of ``tu``, processed by PyG (x: the node attributes, then the one-hot node labels),
    and the number of node attributes; UserError naming the damaged raw file."""
    name, raw = tu.name, tu.raw
    problem = count_mismatch(raw, name) or node_label_problem(raw, name)
    if problem:
        raise _unreadable(tu, problem)
    try:
        graphs, attributes = tucache.process(raw, name)
    except Exception as exc:  # noqa: BLE001 - PyG's parser fails in many ways on a damaged file
        raise _unreadable(tu, why_pyg_failed(raw, name) or str(exc)) from exc
    built = from_data_list(name, graphs, "")  # named by _node_features
    problem = edge_problem(raw, name, built.edge_index, built.node_ptr)
    if problem:
        raise _unreadable(tu, problem)
    return built, attributes


def _unreadable(tu: TUFiles, problem: str) -> UserError:
    """The error for raw files of ``tu`` that cannot be read: the problem, and where the files come from (the TU
    collection's zip only for a set of that collection: a set of one's own has no such URL)."""
    source = f" (from {TU_URL}/{tu.name}.zip)" if tu.name in TU_CATALOGUE else ""
    return UserError(f"TU dataset '{tu.name}' cannot be read: {problem}; restore its files in {tu.raw}/{source}")
