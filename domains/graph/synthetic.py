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

``classes`` (the graph config's ``synthetic_classes``) sets the number of classes C, so that the class prior
is known: τ+ = Σ_c p_c² = 1/C, the chance that a random other graph shares the anchor's class (the τ+ of
the debiased losses, Chuang et al. 2020). C = 2 is the house/bowtie set above, unchanged (same ``PARAMS``,
same fingerprint). C > 2 takes C motifs from the connected graphs with 7 nodes and 9 edges of networkx's
graph atlas (Read & Wilson, *An Atlas of Graphs*, 1998; 107 such graphs, pairwise non-isomorphic by
construction), in a fixed seeded order, so the motifs of a smaller C are among those of a larger one and
every motif has the same size (size still says nothing about the class). The set has max(500, 20·C)
graphs rounded up to a multiple of C, with exactly as many graphs per class, so every class has enough
members for the stratified nested 10-fold SVM of the evaluation.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from domains.base import require
from domains.errors import UserError
from domains.files import hash_jsonable
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
# C > 2: motifs from the atlas, all with this many nodes and edges (7 and 9: 107 connected graphs, about the
# house's and the bowtie's density), taken in the order of a permutation drawn with this seed.
ATLAS_NODES, ATLAS_EDGES, ATLAS_SEED = 7, 9, 1
MIN_GRAPHS, GRAPHS_PER_CLASS = 500, 20


@functools.cache  # (reading the atlas takes a second)
def atlas_family() -> tuple[int, ...]:
    """Indices in networkx's graph atlas of the connected graphs with ``ATLAS_NODES`` nodes and
    ``ATLAS_EDGES`` edges, in the fixed order motifs are taken from."""
    nx = require("networkx", "graph")
    family = [i for i, g in enumerate(nx.graph_atlas_g()) if g.number_of_nodes() == ATLAS_NODES
              and g.number_of_edges() == ATLAS_EDGES and nx.is_connected(g)]
    return tuple(family[i] for i in np.random.default_rng(ATLAS_SEED).permutation(len(family)))


def params_for(classes: int = 2) -> dict[str, Any]:
    """The generator's parameters for ``classes`` classes: ``PARAMS`` itself for 2, else C atlas motifs and
    ``max(500, 20·C)`` graphs rounded up to a multiple of C. UserError for C outside 2 to 107."""
    if classes == 2:
        return PARAMS
    family = atlas_family()
    if not 2 <= classes <= len(family):
        raise UserError(f"synthetic_classes must lie in 2..{len(family)} (synthetic-motifs has {len(family)} "
                        f"motifs of {ATLAS_NODES} nodes and {ATLAS_EDGES} edges), got {classes}")
    graphs = -(-max(MIN_GRAPHS, GRAPHS_PER_CLASS * classes) // classes) * classes
    return {**PARAMS, "graphs": graphs, "classes": classes, "motifs": [f"atlas-{i}" for i in family[:classes]],
            "motif_source": f"networkx graph atlas: connected, {ATLAS_NODES} nodes, {ATLAS_EDGES} edges"}


@functools.cache  # each graph of a set asks for its class's motif, and networkx reads the atlas file up to it each time
def motif_edges(name: str) -> tuple[tuple[int, int], ...]:
    """The edge list of a motif: ``house``, ``bowtie`` or ``atlas-<index in networkx's graph atlas>``."""
    if name in _MOTIF_EDGES:
        return tuple(_MOTIF_EDGES[name])
    nx = require("networkx", "graph")
    return tuple(sorted(nx.graph_atlas(int(name.removeprefix("atlas-"))).edges()))


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
        motif = np.array(motif_edges(params["motifs"][label]), dtype=np.int64)
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


def load_synthetic(classes: int = 2) -> GraphSet:
    params = params_for(classes)
    return from_data_list(NAME, generate(params), "constant 1 (synthetic-motifs)", {"params": params})


def fingerprint(classes: int = 2) -> dict[str, Any]:
    params = params_for(classes)
    return {"dataset": NAME, "source": "generated", "params": params, "sha256": hash_jsonable(params)}
