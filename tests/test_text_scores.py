"""Quick-thought scores: positives are the neighbouring sentences of the same document, never across documents."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import losses
from domains.text.corpus import from_documents
from domains.text.quickthought import contiguous_batches, negative_same_class_fraction, qt_scores


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


def _s2v_per_target(logits: torch.Tensor, context: int) -> dict[int, list[torch.Tensor]]:
    """S2V's build_loss from its code's formula: the diagonal set to 0, targets eye(B, k) for 0 < |k| <= context
    whatever the documents, each target's cross-entropy against the softmax of the anchor's whole row."""
    n = logits.shape[0]
    row = logits.clone()
    row.fill_diagonal_(0.0)
    return {a: [-torch.log_softmax(row[a], 0)[k] for k in range(n) if 0 < abs(a - k) <= context]
            for a in range(n)}


@pytest.mark.parametrize("context", [1, 2])
def test_the_authors_objective_is_s2vs_cross_entropy(context):
    """objective=authors: infonce on S2V's rows is its cross-entropy, averaged over (anchor, target) rows where
    S2V averages each anchor's targets first (1/M targets): the two agree in the sum over each anchor's targets
    and differ by the weights of the anchors at the batch's ends, which have fewer targets."""
    u, v, doc_ids, positions = _batch()  # three documents: S2V's context crosses them
    scores = qt_scores(u, v, doc_ids, positions, context=context, objective="authors")
    per_target = _s2v_per_target(u @ v.T, context)
    terms = [t for a in per_target for t in per_target[a]]
    assert scores.logits.shape == (6 * 2 * context, 6)  # a row per anchor and offset, whatever the batch holds
    assert int(scores.pos_mask.any(1).sum()) == len(terms)
    ours = losses.get("infonce")(scores)
    assert torch.allclose(ours, torch.stack(terms).mean(), atol=1e-5)
    s2v = torch.stack([torch.stack(per_target[a]).mean() for a in per_target]).mean()  # tf.reduce_mean of the rows
    weights = torch.tensor([len(per_target[a]) for a in per_target], dtype=torch.float)
    anchor_means = torch.stack([torch.stack(per_target[a]).mean() for a in per_target])
    assert torch.allclose(ours, (weights * anchor_means).sum() / weights.sum(), atol=1e-5)
    assert not torch.allclose(ours, s2v, atol=1e-4)  # the ends' weights differ: M_a is not the same for all


def test_the_authors_rows_keep_the_anchor_at_logit_0_and_cross_documents():
    u, v, doc_ids, positions = _batch()
    scores = qt_scores(u, v, doc_ids, positions, context=1, objective="authors")
    anchors = [a for a in range(6) for k in (a - 1, a + 1) if 0 <= k < 6]
    targets = [k for a in range(6) for k in (a - 1, a + 1) if 0 <= k < 6]
    kept = scores.pos_mask.any(1)
    assert kept.tolist() == [0 <= a + k < 6 for a in range(6) for k in (-1, 1)]  # the batch's ends lack a target
    assert scores.pos_mask.nonzero()[:, 1].tolist() == targets  # sentence 2 -> 3 crosses from document 7 to 8
    # the other target and the anchor are negatives; a row without a target has neither
    assert torch.equal(scores.neg_mask, ~scores.pos_mask & kept[:, None])
    for row, a in zip(kept.nonzero()[:, 0].tolist(), anchors):
        assert scores.logits[row, a] == 0.0
        others = [k for k in range(6) if k != a]
        assert torch.allclose(scores.logits[row, others], (u @ v.T)[a, others])
    cos = qt_scores(u, v, doc_ids, positions, similarity="cosine", temperature=0.5, objective="authors")
    assert (cos.min_logit, cos.max_logit) == (-2.0, 2.0)


def test_dcl_on_the_authors_rows_matches_a_naive_loop():
    """DCL corrects each of S2V's classifications: g over every candidate but the target (N = B - 1)."""
    u, v, doc_ids, positions = _batch()
    tau = 0.1
    scores = qt_scores(u, v, doc_ids, positions, objective="authors")
    logits = u @ v.T
    logits.fill_diagonal_(0.0)
    per_row = []
    for a in range(6):
        for p in (a - 1, a + 1):
            if not 0 <= p < 6:
                continue
            neg = [k for k in range(6) if k != p]
            g = max((logits[a, neg].exp().mean() - tau * logits[a, p].exp()) / (1 - tau),
                    logits[a].min().exp())  # no logit bound for the raw dot product: the row's least logit
            per_row.append(-torch.log(logits[a, p].exp() / (logits[a, p].exp() + len(neg) * g)))
    assert torch.allclose(losses.get("dcl", tau_plus=tau)(scores), torch.stack(per_row).mean(), atol=1e-5)


def test_an_unknown_objective_is_refused():
    u, v, doc_ids, positions = _batch()
    with pytest.raises(ValueError, match="objective must be one of"):
        qt_scores(u, v, doc_ids, positions, objective="s2v")


@pytest.mark.parametrize("objective", ["spec", "authors"])
def test_the_negatives_same_class_share_counts_what_the_loss_sees(objective):
    """The share the prior page judges estimates by, against a count over the negatives of each batch's Scores."""
    rng = np.random.default_rng(0)
    documents = [[f"s{d}-{i}" for i in range(int(n))] for d, n in enumerate(rng.integers(1, 7, size=9))]
    corpus = from_documents([f"d{d}" for d in range(9)], documents, np.array([0, 1, 0, 2, 1, 1, 0, 2, 2]))
    labels = torch.from_numpy(corpus.doc_labels[corpus.doc_ids])
    doc_ids = torch.from_numpy(corpus.doc_ids)
    batches = contiguous_batches(len(corpus), 7)
    same = total = 0
    for sl in batches:
        n = sl.stop - sl.start
        scores = qt_scores(torch.randn(n, 3), torch.randn(n, 3), doc_ids[sl], torch.arange(sl.start, sl.stop),
                           context=2, objective=objective)
        anchor_of_row = torch.arange(n) if objective == "spec" else torch.arange(n).repeat_interleave(4)
        same_class = labels[sl][anchor_of_row][:, None] == labels[sl][None, :]
        same += int((scores.neg_mask & same_class).sum())
        total += int(scores.neg_mask.sum())
    assert negative_same_class_fraction(corpus, batches, 2, objective) == pytest.approx(same / total, abs=1e-12)
