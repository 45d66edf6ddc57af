"""The embedded default data set, ``synthetic-motifs``: deterministic, generated, nothing to download.

Each graph is a random Barabási-Albert base graph (networkx, ``base_nodes`` drawn uniformly, ``base_m``
edges per new node) with ``copies`` copies of one motif, each joined to the base by one edge between
a random motif node and a random base node; the label is the motif: the house (a square with a roof)
or the bowtie (two triangles sharing a node). Both motifs have 5 nodes and 6 edges, and every node
carries the same constant feature 1, so node and edge counts say nothing about the label and the base
graphs' spread in size (20 to 80 nodes) is noise. Sum-pooled features of a randomly initialised GIN
are then close to linear in those counts and an SVM on them is near chance, while a trained InfoGraph
encoder separates the motifs: the set tells good encoders from bad ones. Everything is drawn from one
numpy generator seeded with ``seed``, so the set is identical on every machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from domains.base import hash_jsonable, require
from domains.graph.data import GraphSet, from_data_list

NAME = "synthetic-motifs"
PARAMS: dict[str, Any] = {
    "version": 1,
    "graphs": 500,
    "seed": 0,
    "base": "barabasi_albert",
    "base_nodes": [20, 80],
    "base_m": 2,
    "motifs": ["house", "bowtie"],
    "copies": 3,
    "node_feature": "constant 1",
}
_MOTIF_EDGES = {
    "house": [(0, 1), (0, 2), (1, 3), (2, 3), (2, 4), (3, 4)],
    "bowtie": [(0, 1), (1, 2), (2, 0), (0, 3), (3, 4), (4, 0)],
}


def generate(params: dict[str, Any] | None = None) -> list:
    """The graphs as PyG ``Data`` objects (constant node feature), in a fixed order."""
    params = PARAMS if params is None else params
    nx = require("networkx", "graph")
    data_cls = require("torch_geometric.data", "graph").Data
    rng = np.random.default_rng(params["seed"])
    labels = rng.permutation(np.arange(params["graphs"]) % len(params["motifs"]))
    low, high = params["base_nodes"]
    graphs = []
    for label in labels:
        size = int(rng.integers(low, high + 1))
        base = nx.barabasi_albert_graph(size, params["base_m"], seed=int(rng.integers(2**31 - 1)))
        motif = np.array(_MOTIF_EDGES[params["motifs"][label]], dtype=np.int64)
        width = int(motif.max()) + 1
        parts = [np.array(base.edges(), dtype=np.int64).reshape(-1, 2)]
        for copy in range(params["copies"]):
            first = size + copy * width  # the copy's nodes follow the base and the earlier copies
            bridge = [int(rng.integers(size)), first + int(rng.integers(width))]
            parts += [motif + first, np.array([bridge], dtype=np.int64)]
        edges = np.concatenate(parts).T
        n = size + params["copies"] * width
        edge_index = torch.from_numpy(np.concatenate([edges, edges[::-1]], axis=1))
        graphs.append(data_cls(x=torch.ones(n, 1), edge_index=edge_index, y=torch.tensor([int(label)]), num_nodes=n))
    return graphs


def load_synthetic() -> GraphSet:
    return from_data_list(NAME, generate(), "constant 1 (synthetic-motifs)", {"params": PARAMS})


def fingerprint() -> dict[str, Any]:
    return {"dataset": NAME, "source": "generated", "params": PARAMS, "sha256": hash_jsonable(PARAMS)}
