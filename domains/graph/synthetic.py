"""The embedded default data set, ``synthetic-motifs``: deterministic, generated, nothing to download.

Each graph is a random Barabási-Albert base graph (networkx generator, size drawn uniformly from
``base_nodes``, ``base_m`` edges per new node) with one planted motif joined to it by ``bridges``
edges between random motif and base nodes; the label is the motif. The two motifs have the same
number of nodes and edges, so a graph's size and edge count say nothing about its label; the
base graphs' spread in size is noise that a pooled embedding must see through. Nodes carry no
features (they get the featureless rule, one-hot degree, like IMDB-BINARY). Everything is drawn from
one numpy generator seeded with ``seed``, so the set is identical on every machine.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from domains.base import hash_jsonable, require
from domains.graph.config import GraphConfig
from domains.graph.data import GraphSet, add_featureless, from_data_list

NAME = "synthetic-motifs"
PARAMS: dict[str, Any] = {
    "version": 1,
    "graphs": 500,
    "seed": 0,
    "base_nodes": [20, 40],
    "base_m": 2,
    "motifs": ["house", "bowtie"],
    "bridges": 2,
}


def _motif(nx: Any, name: str):
    if name == "house":  # a square with a roof: 5 nodes, 6 edges, one triangle
        return nx.house_graph()
    if name == "cycle5_pendant":  # hmm
        raise NotImplementedError
    raise ValueError(f"unknown motif {name!r}")


def generate(params: dict[str, Any] | None = None) -> list:
    """The graphs as PyG ``Data`` objects (no node features), in a fixed order."""
    params = PARAMS if params is None else params
    nx = require("networkx", "graph")
    data_cls = require("torch_geometric.data", "graph").Data
    rng = np.random.default_rng(params["seed"])
    n = params["graphs"]
    labels = rng.permutation(np.arange(n) % len(params["motifs"]))
    graphs = []
    for label in labels:
        size = int(rng.integers(params["base_nodes"][0], params["base_nodes"][1] + 1))
        base = nx.barabasi_albert_graph(size, params["base_m"], seed=int(rng.integers(2**31 - 1)))
        motif = _motif(nx, params["motifs"][label])
        g = nx.disjoint_union(base, motif)
        for _ in range(params["bridges"]):
            g.add_edge(int(rng.integers(size)), size + int(rng.integers(motif.number_of_nodes())))
        edges = np.array(g.edges(), dtype=np.int64).T
        edge_index = torch.from_numpy(np.concatenate([edges, edges[::-1]], axis=1))
        graphs.append(data_cls(edge_index=edge_index, y=torch.tensor([int(label)]), num_nodes=g.number_of_nodes()))
    return graphs


def load_synthetic(cfg: GraphConfig) -> GraphSet:
    data = from_data_list(NAME, generate(), "none", {"params": PARAMS})
    return add_featureless(data, cfg)


def fingerprint() -> dict[str, Any]:
    return {"dataset": NAME, "source": "generated", "params": PARAMS, "sha256": hash_jsonable(PARAMS)}
