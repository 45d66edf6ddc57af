"""Quick-thought scores: positives are the neighbouring sentences of the same document, never across documents."""

from __future__ import annotations

import pytest
import torch

import losses
from domains.text.quickthought import contiguous_batches, qt_scores


def _batch():
    # Six contiguous sentences: three of document 7, two of document 8, one of document 9.
    doc_ids = torch.tensor([7, 7, 7, 8, 8, 9])
    positions = torch.arange(100, 106)
    u, v = torch.randn(6, 4), torch.randn(6, 4)
    return u, v, doc_ids, positions


def test_positives_stop_at_document_boundaries():
    u, v, doc_ids, positions = _batch()
    scores = qt_scores(u, v, doc_ids, positions, context=1)
    expected = torch.tensor([
        [0, 1, 0, 0, 0, 0],  # first of doc 7: only the next sentence
        [1, 0, 1, 0, 0, 0],  # middle: before and after (M = 2)
        [0, 1, 0, 0, 0, 0],  # last of doc 7: sentence 3 starts doc 8, so not a positive
        [0, 0, 0, 0, 1, 0],  # first of doc 8
        [0, 0, 0, 1, 0, 0],  # last of doc 8: sentence 5 is doc 9
        [0, 0, 0, 0, 0, 0],  # a one-sentence document has no positive
    ], dtype=torch.bool)
    assert torch.equal(scores.pos_mask, expected)
    eye = torch.eye(6, dtype=torch.bool)
    assert torch.equal(scores.neg_mask, ~expected & ~eye)  # every other sentence; the anchor itself is neither
    assert not (scores.pos_mask | scores.neg_mask).diagonal().any()


def test_raw_dot_logits_have_no_bounds_and_cosine_has():
    u, v, doc_ids, positions = _batch()
    raw = qt_scores(u, v, doc_ids, positions)
    assert torch.allclose(raw.logits, u @ v.T)
    assert raw.min_logit is None and raw.max_logit is None
    cos = qt_scores(u, v, doc_ids, positions, similarity="cosine", temperature=0.5)
    naive = torch.tensor([[torch.nn.functional.cosine_similarity(u[i], v[j], dim=0) / 0.5 for j in range(6)]
                          for i in range(6)])
    assert torch.allclose(cos.logits, naive, atol=1e-6)
    assert (cos.min_logit, cos.max_logit) == (-2.0, 2.0)


def test_wider_context_and_naive_reference():
    u, v, doc_ids, positions = _batch()
    scores = qt_scores(u, v, doc_ids, positions, context=2)
    for i in range(6):
        for j in range(6):
            want = i != j and doc_ids[i] == doc_ids[j] and abs(i - j) <= 2
            assert bool(scores.pos_mask[i, j]) == want


@pytest.mark.parametrize("name", ["infonce", "dcl", "hcl", "pucl", "debiased_pos"])
def test_every_accepted_loss_runs_on_the_scores(name):
    u, v, doc_ids, positions = _batch()
    u.requires_grad_(True)
    loss = losses.get(name)(qt_scores(u, v, doc_ids, positions))
    loss.backward()
    assert torch.isfinite(loss) and u.grad is not None


def test_infonce_matches_a_naive_loop():
    u, v, doc_ids, positions = _batch()
    scores = qt_scores(u, v, doc_ids, positions)
    logits = u @ v.T
    per_anchor = []
    for a in range(6):
        pos = [k for k in range(6) if scores.pos_mask[a, k]]
        neg = [k for k in range(6) if scores.neg_mask[a, k]]
        if pos:
            terms = [-(logits[a, p] - torch.log(logits[a, p].exp() + logits[a, neg].exp().sum())) for p in pos]
            per_anchor.append(torch.stack(terms).mean())
    assert torch.allclose(losses.get("infonce")(scores), torch.stack(per_anchor).mean(), atol=1e-5)


def test_contiguous_batches_cover_the_corpus_in_order():
    batches = contiguous_batches(10, 4)
    assert [(b.start, b.stop) for b in batches] == [(0, 4), (4, 8), (8, 10)]
    assert [(b.start, b.stop) for b in contiguous_batches(9, 4)] == [(0, 4), (4, 8)]  # a lone sentence has no pair


def test_infonce_is_not_quick_thoughts_own_loss():
    """S2V's build_loss (lajanugen/S2V, src/s2v_model.py): the diagonal set to 0 and kept, one softmax per anchor
    with targets 1/M on its batch neighbours, documents ignored. On one document, where the positives agree, ours
    differs only by the denominators: each of ours holds one positive and the negatives, S2V's every candidate and
    the anchor's exp(0). The quick-thought docstring and the text page state it."""
    torch.manual_seed(0)
    u, v = torch.randn(5, 4), torch.randn(5, 4)
    doc_ids, positions = torch.zeros(5, dtype=torch.long), torch.arange(5)
    logits = u @ v.T
    s2v = []
    for a in range(5):
        row = logits[a].clone()
        row[a] = 0.0
        targets = [k for k in (a - 1, a + 1) if 0 <= k < 5]
        s2v.append(-torch.stack([torch.log_softmax(row, 0)[k] for k in targets]).mean())
    ours = losses.get("infonce")(qt_scores(u, v, doc_ids, positions))
    assert not torch.allclose(ours, torch.stack(s2v).mean(), atol=1e-3)
    # S2V's per-positive denominator is ours plus the other positive and exp(0): the gap is exactly that
    gap = []
    for a in range(5):
        targets = [k for k in (a - 1, a + 1) if 0 <= k < 5]
        neg = [k for k in range(5) if k != a and k not in targets]
        terms = [torch.log(logits[a, targets].exp().sum() + logits[a, neg].exp().sum() + 1.0)
                 - torch.log(logits[a, p].exp() + logits[a, neg].exp().sum()) for p in targets]
        gap.append(torch.stack(terms).mean())
    assert torch.allclose(torch.stack(s2v).mean() - ours, torch.stack(gap).mean(), atol=1e-5)
