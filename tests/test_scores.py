"""The constructors build the layouts of the spec: logits and masks against naive loops."""

from __future__ import annotations

import pytest
import torch
from reference_losses import Ref, ref_bank, ref_label, ref_membership, ref_multiview, ref_pairwise

import losses


def _check(scores: losses.Scores, ref: Ref) -> None:
    assert scores.logits.dtype == torch.float32
    torch.testing.assert_close(scores.logits.double(), torch.tensor(ref.logits, dtype=torch.float64),
                               rtol=1e-5, atol=1e-5)
    assert scores.pos_mask.tolist() == ref.pos
    assert scores.neg_mask.tolist() == ref.neg
    assert scores.min_logit == (pytest.approx(ref.min_logit) if ref.min_logit is not None else None)
    assert scores.max_logit == (pytest.approx(ref.max_logit) if ref.max_logit is not None else None)


def _z(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("temperature", [0.1, 0.5])
def test_pair_scores_is_the_simclr_layout(normalize, temperature):
    z1, z2 = _z(5, 4, seed=1), _z(5, 4, seed=2)
    scores = losses.pair_scores(z1, z2, temperature, normalize=normalize)
    _check(scores, ref_multiview([z1.tolist(), z2.tolist()], temperature, normalize))
    # M = 1 and N = 2B - 2 on every row.
    assert scores.pos_mask.sum(1).tolist() == [1] * 10
    assert scores.neg_mask.sum(1).tolist() == [8] * 10


@pytest.mark.parametrize("n_views", [2, 3, 4])
@pytest.mark.parametrize("normalize", [True, False])
def test_multiview_scores(n_views, normalize):
    views = [_z(4, 3, seed=v) for v in range(n_views)]
    ref = ref_multiview([v.tolist() for v in views], 0.3, normalize)
    _check(losses.multiview_scores(views, 0.3, normalize=normalize), ref)
    _check(losses.multiview_scores(torch.stack(views), 0.3, normalize=normalize), ref)
    assert losses.multiview_scores(views, 0.3).pos_mask.sum(1).tolist() == [n_views - 1] * (4 * n_views)


@pytest.mark.parametrize("n_views", [2, 3, 4])
@pytest.mark.parametrize("normalize", [True, False])
def test_pairwise_scores(n_views, normalize):
    views = [_z(4, 3, seed=v) for v in range(n_views)]
    scores = losses.pairwise_scores(views, 0.3, normalize=normalize)
    _check(scores, ref_pairwise([v.tolist() for v in views], 0.3, normalize))
    pairs = n_views * (n_views - 1) // 2
    assert scores.pos_mask.sum(1).tolist() == [1] * (pairs * 8)  # M = 1, N = 2B - 2 on every row
    assert scores.neg_mask.sum(1).tolist() == [6] * (pairs * 8)


def test_pairwise_scores_of_two_views_is_pair_scores():
    z1, z2, y = _z(5, 4, seed=1), _z(5, 4, seed=2), torch.tensor([0, 1, 0, 2, 1])
    paired, pair = losses.pairwise_scores([z1, z2], 0.5, labels=y), losses.pair_scores(z1, z2, 0.5, labels=y)
    for field in ("logits", "pos_mask", "neg_mask", "anchor_labels", "candidate_labels"):
        assert torch.equal(getattr(paired, field), getattr(pair, field)), field


@pytest.mark.parametrize("name", ["infonce", "dcl", "debiased_pos", "unbiased"])
def test_a_loss_on_pairwise_scores_is_its_mean_over_the_pairs_of_views(name):
    """Every pair holds 2B anchors that see only that pair's rows: the mean over anchors is the mean of the
    two-view losses (Troeshestova & Isachenko's loss combination)."""
    views, y = [_z(5, 4, seed=10 + v) for v in range(4)], torch.tensor([0, 1, 0, 2, 1])
    loss = losses.get(name)
    pairs = [(v, w) for v in range(4) for w in range(v + 1, 4)]
    expected = sum(loss(losses.pair_scores(views[v], views[w], 0.5, labels=y)).item() for v, w in pairs) / len(pairs)
    assert loss(losses.pairwise_scores(views, 0.5, labels=y)).item() == pytest.approx(expected, rel=1e-5)


def test_pairwise_labels_follow_the_anchors():
    views, y = [_z(3, 4, seed=v) for v in range(3)], torch.tensor([2, 0, 1])
    scores = losses.pairwise_scores(views, 0.5, labels=y)
    assert scores.anchor_labels.tolist() == [2, 0, 1] * 6  # 3 pairs of 2 views
    assert scores.candidate_labels.tolist() == [2, 0, 1] * 3


def test_labels_are_put_on_every_view():
    z1, z2, y = _z(3, 4, seed=1), _z(3, 4, seed=2), torch.tensor([2, 0, 2])
    scores = losses.pair_scores(z1, z2, 0.5, labels=y)
    assert scores.anchor_labels.tolist() == [2, 0, 2, 2, 0, 2]
    assert scores.candidate_labels.tolist() == [2, 0, 2, 2, 0, 2]
    # Labels never change the masks: the SimCLR layout stays the SimCLR layout.
    plain = losses.pair_scores(z1, z2, 0.5)
    assert torch.equal(scores.pos_mask, plain.pos_mask) and torch.equal(scores.neg_mask, plain.neg_mask)


@pytest.mark.parametrize("normalize", [True, False])
def test_bank_scores(normalize):
    q, k, bank = _z(3, 4, seed=1), _z(3, 4, seed=2), _z(6, 4, seed=3)
    _check(losses.bank_scores(q, k, bank, 0.2, normalize=normalize),
           ref_bank(q.tolist(), k.tolist(), bank.tolist(), 0.2, normalize))
    labelled = losses.bank_scores(q, k, bank, 0.2, labels=torch.tensor([0, 1, 2]),
                                  bank_labels=torch.tensor([0, 0, 1, 1, 2, 2]))
    assert labelled.anchor_labels.tolist() == [0, 1, 2]
    assert labelled.candidate_labels.tolist()[1:] == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("normalize", [True, False])
def test_label_scores(normalize):
    z, y = _z(7, 3), torch.tensor([0, 1, 0, 2, 1, 0, 3])
    scores = losses.label_scores(z, y, 0.5, normalize=normalize)
    _check(scores, ref_label(z.tolist(), y.tolist(), 0.5, normalize))
    assert scores.anchor_labels.tolist() == y.tolist() == scores.candidate_labels.tolist()
    assert scores.pos_mask.sum(1).tolist() == [2, 1, 2, 0, 1, 2, 0]  # singletons have no positive


@pytest.mark.parametrize("members", ["candidates", "anchors"])
@pytest.mark.parametrize("normalize", [True, False])
def test_membership_scores(members, normalize):
    graphs, nodes = _z(3, 4, seed=1), _z(8, 4, seed=2)
    member_of = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0])
    anchors, candidates = (graphs, nodes) if members == "candidates" else (nodes, graphs)
    scores = losses.membership_scores(anchors, candidates, member_of, 0.5, members=members, normalize=normalize)
    _check(scores, ref_membership(anchors.tolist(), candidates.tolist(), member_of.tolist(), 0.5, members,
                                  normalize))


def test_half_precision_inputs_give_float32_logits():
    for dtype in (torch.float16, torch.bfloat16):
        z1, z2 = _z(4, 8, seed=1).to(dtype), _z(4, 8, seed=2).to(dtype)
        assert losses.pair_scores(z1, z2, 0.1).logits.dtype == torch.float32


def test_scores_accept_entries_in_neither_mask():
    logits = torch.zeros(2, 3)
    pos = torch.tensor([[True, False, False], [False, False, False]])
    neg = torch.tensor([[False, False, True], [True, False, False]])
    scores = losses.Scores(logits, pos, neg)
    assert not scores.has_labels and scores.min_logit is None and scores.max_logit is None
