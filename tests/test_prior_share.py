"""The measured share of same-class negatives (losses.prior.SameClassShare), the τ+ the prior page judges estimates
against: counted on the device batch by batch, against a naive loop over every anchor and candidate."""

from __future__ import annotations

import pytest
import torch

from losses.prior import SameClassShare


def _naive(batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> float:
    same = total = 0
    for neg, anchors, candidates in batches:
        for a in range(neg.shape[0]):
            for k in range(neg.shape[1]):
                if neg[a, k]:
                    total += 1
                    same += int(anchors[a] == candidates[k])
    return same / total


def _batch(gen: torch.Generator, anchors: int, candidates: int, classes: int):
    neg = torch.rand(anchors, candidates, generator=gen) < 0.7
    labels = torch.randint(classes, (anchors + candidates,), generator=gen)
    return neg, labels[:anchors], labels[anchors:]


@pytest.mark.parametrize("seed", range(3))
def test_the_share_over_batches_is_a_naive_count_and_survives_a_checkpoint(seed):
    gen = torch.Generator().manual_seed(seed)
    batches = [_batch(gen, 7, 5, 3), _batch(gen, 4, 9, 2), _batch(gen, 6, 6, 4)]
    share = SameClassShare()
    for batch in batches[:2]:
        share.add(*batch)
    resumed = SameClassShare()  # a run stopped after two batches and resumed from its checkpoint
    resumed.load_state_dict(share.state_dict())
    share.add(*batches[2])
    resumed.add(*batches[2])
    assert share.value() == resumed.value() == pytest.approx(_naive(batches), rel=1e-12)


def test_batches_whose_negatives_are_the_other_items_count_ordered_pairs_of_distinct_items():
    labels = torch.tensor([[0, 0, 1, 2, 2, 2], [3, 1, 3, 1, 3, 0]])
    share = SameClassShare()
    share.add_batches(labels)
    # same-class ordered pairs: 2·1 (class 0) + 3·2 (class 2) = 8, then 3·2 + 2·1 = 8, of 2·6·5 = 60
    assert share.value() == pytest.approx(16 / 60)
    every_other = ~torch.eye(6, dtype=torch.bool)
    assert share.value() == pytest.approx(_naive([(every_other, row, row) for row in labels]))
    with pytest.raises(ValueError, match=r"\[batches, batch size\]"):
        share.add_batches(labels[0])


def test_nothing_counted_is_none_and_a_mismatched_mask_is_refused():
    assert SameClassShare().value() is None
    with pytest.raises(ValueError, match="does not match"):
        SameClassShare().add(torch.ones(3, 4, dtype=torch.bool), torch.zeros(3), torch.zeros(5))
