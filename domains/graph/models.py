"""InfoGraph's networks (Sun et al., ICLR 2020, and its public code): a GIN encoder and two FF heads.

Encoder: ``layers`` GIN convolutions (Xu et al. 2019), each with a Linear-ReLU-Linear MLP, each
followed by ReLU then BatchNorm. Node (local) embedding: every layer's node output, concatenated
(``hidden * layers``); graph (global) embedding: the sum-pooled output of every layer, concatenated.
The frozen graph embedding is what the SVM sees.

Heads (InfoGraph's ``FF``): ``h(x) = MLP3(x) + W x``, a three-layer ReLU MLP plus a linear shortcut,
one for the nodes and one for the graphs; the loss scores ``local_head(node) · global_head(graph)``.
Every Linear is Xavier-uniform initialised with zero bias, as InfoGraph does.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from domains.base import require


class GINEncoder(nn.Module):
    def __init__(self, in_dim: int, hidden: int, layers: int):
        super().__init__()
        gin_conv = require("torch_geometric.nn", "graph").GINConv
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(layers):
            mlp = nn.Sequential(nn.Linear(in_dim if i == 0 else hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
            self.convs.append(gin_conv(mlp))
            self.norms.append(nn.BatchNorm1d(hidden))
        self.out_dim = hidden * layers

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
        """(graph embeddings [B, hidden*layers], node embeddings [N, hidden*layers])."""
        outs = []
        for conv, norm in zip(self.convs, self.norms):
            x = norm(torch.relu(conv(x, edge_index)))
            outs.append(x)
        nodes = torch.cat(outs, dim=1)
        # Sum pooling of the concatenation = concatenation of each layer's sum pooling.
        graphs = nodes.new_zeros(num_graphs, nodes.shape[1]).index_add_(0, batch, nodes)
        return graphs, nodes


class FF(nn.Module):
    """InfoGraph's head: a three-layer ReLU MLP plus a linear shortcut."""

    def __init__(self, dim: int):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU(),
                                   nn.Linear(dim, dim), nn.ReLU())
        self.shortcut = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.block(x) + self.shortcut(x)


class InfoGraph(nn.Module):
    """Encoder plus local and global heads; ``forward`` gives the head outputs the loss scores."""

    def __init__(self, in_dim: int, hidden: int, layers: int):
        super().__init__()
        self.encoder = GINEncoder(in_dim, hidden, layers)
        self.local_head = FF(self.encoder.out_dim)
        self.global_head = FF(self.encoder.out_dim)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int) -> tuple[Tensor, Tensor]:
        """(global head of each graph [B, D], local head of each node [N, D])."""
        graphs, nodes = self.encoder(x, edge_index, batch, num_graphs)
        return self.global_head(graphs), self.local_head(nodes)

    @torch.no_grad()
    def embed(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
        """Frozen graph embeddings (encoder output, eval mode: BatchNorm's running statistics)."""
        return self.encoder(x, edge_index, batch, num_graphs)[0]
