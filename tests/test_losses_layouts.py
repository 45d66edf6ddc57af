"""The loss core's three ways of reading a layout give the naive references' values and one gradient.

Positives come as (anchor, candidate) pairs (given by a constructor, or found on the CPU) or, where
finding them would synchronise with a CUDA device, as the dense ``pos_mask``; negatives come as "all
but the few left-out entries" or as the dense ``neg_mask``. Here every combination runs on the CPU
(the dense positives by switching off ``nonzero``), on every case of the reference tests.
"""

from __future__ import annotations

import dataclasses

import pytest
import reference_losses as ref
import torch
from test_losses_reference import CASES, LOSSES, _loss_id

import losses
from losses import _core

READINGS = {
    "pairs-left-out": lambda s: s,
    "pairs-listed": lambda s: dataclasses.replace(s, positives_per_anchor=None),  # gathered, not reshaped
    "pairs-dense-negatives": lambda s: dataclasses.replace(s, ignored=None),
    "dense-positives": lambda s: dataclasses.replace(s, positives=None),
    "dense-everything": lambda s: dataclasses.replace(s, positives=None, ignored=None),
}


@pytest.fixture
def dense_positives(monkeypatch):
    monkeypatch.setattr(_core, "PAIRS_FROM_MASK_ON", frozenset())


def _with_grad(scores: losses.Scores) -> tuple[losses.Scores, torch.Tensor]:
    logits = scores.logits.detach().clone().requires_grad_()
    return dataclasses.replace(scores, logits=logits), logits


@pytest.mark.parametrize("reading", list(READINGS))
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("entry", LOSSES, ids=_loss_id)
def test_every_reading_matches_the_reference_and_the_pairs(entry, case, reading, dense_positives):
    name, hparams = entry
    scores = CASES[case]
    if losses.spec(name).needs_labels and not scores.has_labels:
        pytest.skip("layout without labels")
    loss = losses.get(name, **hparams)
    read = READINGS[reading](scores)
    try:
        expected = ref.REFERENCES[name](ref.to_ref(scores), **hparams)
    except ValueError:
        with pytest.raises(ValueError):
            loss(read)
        return
    if reading.startswith("dense"):
        assert _core.find_positives(read) is None  # the dense path is the one exercised
    got_scores, got_logits = _with_grad(read)
    got = loss(got_scores)
    assert got.item() == pytest.approx(expected, rel=1e-5, abs=1e-5)
    # The same gradient as with the pairs found on the CPU (the reference tests check that one).
    (grad,) = torch.autograd.grad(got, got_logits)
    base_scores, base_logits = _with_grad(scores)
    monkeypatched = _core.PAIRS_FROM_MASK_ON
    _core.PAIRS_FROM_MASK_ON = frozenset({"cpu"})
    try:
        (expected_grad,) = torch.autograd.grad(loss(base_scores), base_logits)
    finally:
        _core.PAIRS_FROM_MASK_ON = monkeypatched
    torch.testing.assert_close(grad, expected_grad, rtol=1e-5, atol=1e-6)


def test_constructors_list_their_positives_and_ignored_entries():
    """The index lists the constructors hand over name exactly the entries of the masks."""
    z, q, bank = torch.randn(5, 4), torch.randn(3, 4), torch.randn(6, 4)
    member_of = torch.tensor([0, 2, 1, 1, 0, 2])
    built = [losses.pair_scores(z, z.flip(0), 0.5), losses.multiview_scores([z, z, z], 0.5),
             losses.pairwise_scores([z, z, z, z], 0.5),
             losses.bank_scores(q, q, bank, 0.5), losses.membership_scores(q, bank, member_of, 0.5),
             losses.membership_scores(bank, q, member_of, 0.5, members="anchors"),
             losses.label_scores(z, torch.tensor([0, 1, 0, 1, 2]), 0.5)]
    for scores in built:
        shape = scores.logits.shape
        if scores.positives is not None:
            listed = torch.zeros(shape, dtype=torch.bool)
            listed[scores.positives] = True
            assert torch.equal(listed, scores.pos_mask) and len(scores.positives[0]) == int(scores.pos_mask.sum())
        neither = torch.zeros(shape, dtype=torch.bool)
        neither[scores.ignored] = True
        assert torch.equal(neither, ~scores.pos_mask & ~scores.neg_mask)
        assert len(scores.ignored[0]) == int(neither.sum())
