"""InfoGraph pairs on a hand-made batch of three small graphs, checked against written-out answers
and naive loops; the flat batching against PyG's own collation."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("torch_geometric")

import losses  # noqa: E402
from domains.graph.config import GraphConfig  # noqa: E402
from domains.graph.data import add_featureless, from_data_list  # noqa: E402
from domains.graph.infograph import epoch_batches, infograph_scores  # noqa: E402
from domains.graph.models import InfoGraph  # noqa: E402


def _three_graphs():
    from torch_geometric.data import Data

    def graph(edges, n, label):
        e = torch.tensor(edges, dtype=torch.long).T
        return Data(edge_index=torch.cat([e, e.flip(0)], 1), y=torch.tensor([label]), num_nodes=n)

    # A: path of 2 nodes; B: triangle; C: star with 4 nodes (centre 0).
    return [graph([(0, 1)], 2, 0), graph([(0, 1), (1, 2), (2, 0)], 3, 1), graph([(0, 1), (0, 2), (0, 3)], 4, 0)]


@pytest.fixture
def three():
    data = from_data_list("three", _three_graphs(), "none")
    return add_featureless(data, GraphConfig())


def test_batch_of_three_in_a_new_order(three):
    b = three.batch(torch.tensor([2, 0, 1]))  # star, path, triangle
    assert b.num_graphs == 3
    assert b.batch.tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    assert b.y.tolist() == [0, 0, 1]
    edges = {tuple(e) for e in b.edge_index.T.tolist()}
    star = {(0, 1), (0, 2), (0, 3)}
    path = {(4, 5)}
    tri = {(6, 7), (7, 8), (8, 6)}
    expected = {e for s in (star, path, tri) for e in s} | {(v, u) for s in (star, path, tri) for (u, v) in s}
    assert edges == expected
    # Featureless rule: one-hot degree 0..3 (the star's centre has degree 3).
    assert b.x.shape == (9, 4)
    assert b.x.argmax(1).tolist() == [3, 1, 1, 1, 1, 1, 2, 2, 2]


def test_batch_matches_pyg_collation(three):
    from torch_geometric.data import Batch

    graphs = _three_graphs()
    for g, x in zip(graphs, three.x.split((three.node_ptr[1:] - three.node_ptr[:-1]).tolist())):
        g.x = x
    for order in ([0, 1, 2], [1, 2], [2, 0, 1], [1]):
        ours = three.batch(torch.tensor(order))
        ref = Batch.from_data_list([graphs[i] for i in order])
        assert torch.equal(ours.x, ref.x)
        assert torch.equal(ours.edge_index, ref.edge_index)
        assert torch.equal(ours.batch, ref.batch)


# Nodes of the batch [path, triangle, star] belong to graphs:
OWNER = [0, 0, 1, 1, 1, 2, 2, 2, 2]


def _embeddings(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(3, 5, generator=gen), torch.randn(len(OWNER), 5, generator=gen)


def test_node_anchors_positive_with_their_own_graph():
    graphs, nodes = _embeddings()
    s = infograph_scores(graphs, nodes, torch.tensor(OWNER), "node", 0.5, True)
    expected = torch.tensor([[owner == g for g in range(3)] for owner in OWNER])
    assert torch.equal(s.pos_mask, expected)  # node i (row) is positive with its graph (column) only
    assert torch.equal(s.neg_mask, ~expected)
    assert s.pos_mask.sum(1).tolist() == [1] * len(OWNER)  # M = 1
    cos = torch.nn.functional.cosine_similarity(nodes[:, None], graphs[None], dim=2)
    torch.testing.assert_close(s.logits, cos / 0.5)


def test_graph_anchors_positive_with_their_own_nodes():
    graphs, nodes = _embeddings()
    s = infograph_scores(graphs, nodes, torch.tensor(OWNER), "graph", 0.5, True)
    expected = torch.tensor([
        [1, 1, 0, 0, 0, 0, 0, 0, 0],  # the path owns nodes 0-1
        [0, 0, 1, 1, 1, 0, 0, 0, 0],  # the triangle nodes 2-4
        [0, 0, 0, 0, 0, 1, 1, 1, 1],  # the star nodes 5-8
    ], dtype=torch.bool)
    assert torch.equal(s.pos_mask, expected)
    assert torch.equal(s.neg_mask, ~expected)
    node_view = infograph_scores(graphs, nodes, torch.tensor(OWNER), "node", 0.5, True)
    torch.testing.assert_close(s.logits, node_view.logits.T)


def test_jsd_on_raw_dot_products_matches_infograph_loop():
    graphs, nodes = _embeddings(1)
    s = infograph_scores(graphs, nodes, torch.tensor(OWNER), "node", 1.0, False)
    assert s.min_logit is None
    torch.testing.assert_close(s.logits, nodes @ graphs.T)
    # InfoGraph's local_global_loss_: E_neg - E_pos, over nodes x graphs, written as a loop.
    softplus = torch.nn.functional.softplus
    e_pos = e_neg = 0.0
    for i, owner in enumerate(OWNER):
        for g in range(3):
            score = float(nodes[i] @ graphs[g])
            if g == owner:
                e_pos += math.log(2) - float(softplus(torch.tensor(-score)))
            else:
                e_neg += float(softplus(torch.tensor(score))) - math.log(2)
    expected = e_neg / (len(OWNER) * 2) - e_pos / len(OWNER)
    assert float(losses.get("jsd")(s)) == pytest.approx(expected, rel=1e-5)
    # Pooled over all pairs, the direction does not matter.
    t = infograph_scores(graphs, nodes, torch.tensor(OWNER), "graph", 1.0, False)
    assert float(losses.get("jsd")(t)) == pytest.approx(expected, rel=1e-5)


def test_model_pools_each_layer_by_sum(three):
    torch.manual_seed(0)
    model = InfoGraph(three.num_features, hidden=4, layers=3).eval()
    b = three.batch(torch.tensor([0, 1, 2]))
    graphs, nodes = model.encoder(b.x, b.edge_index, b.batch, b.num_graphs)
    assert graphs.shape == (3, 12) and nodes.shape == (9, 12)
    for g in range(3):
        torch.testing.assert_close(graphs[g], nodes[b.batch == g].sum(0))
    # A relabelling of the nodes inside the batch does not change the graph embeddings.
    perm = torch.tensor([1, 0, 4, 2, 3, 8, 5, 7, 6])
    inv = torch.argsort(perm)
    moved, _ = model.encoder(b.x[perm], inv[b.edge_index], b.batch[perm], 3)
    torch.testing.assert_close(moved, graphs)


def test_epoch_batches_are_a_seeded_partition():
    a = epoch_batches(257, 128, seed=3, epoch=1)
    assert [len(x) for x in a] == [128, 129]  # a lone last graph (no negative) joins the previous batch
    assert sorted(torch.cat(a).tolist()) == list(range(257))
    assert all(torch.equal(x, y) for x, y in zip(a, epoch_batches(257, 128, seed=3, epoch=1)))
    assert not torch.equal(a[0], epoch_batches(257, 128, seed=3, epoch=2)[0])
