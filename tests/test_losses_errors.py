"""Every bad input of the spec's "Bad input" section raises ValueError naming the problem."""

from __future__ import annotations

import math

import pytest
import torch

import losses

Z1, Z2 = torch.randn(4, 8), torch.randn(4, 8)
GOOD = losses.pair_scores(Z1, Z2, 0.5)

# (loss, hyper-parameter, bad value, text the message must contain: the name and the allowed range)
OUT_OF_RANGE = [
    ("dcl", "tau_plus", -0.1, "[0, 1)"), ("dcl", "tau_plus", 1.0, "[0, 1)"), ("dcl", "tau_plus", math.nan, "[0, 1)"),
    ("hcl", "tau_plus", 1.5, "[0, 1)"), ("hcl", "beta", -1.0, "beta must be a number >= 0, got -1"),
    ("pucl", "alpha", 0.0, "(0, 1)"), ("pucl", "alpha", 1.0, "(0, 1)"),
    ("pucl", "c", -0.01, "[0, 1]"), ("pucl", "c", 1.01, "[0, 1]"),
    ("debiased_pos", "tau_plus", 0.0, "(0, 1)"), ("debiased_pos", "tau_plus", 1.0, "(0, 1)"),
    ("debiased_pos", "aggregation", "mean", "grouping, combination"),
    ("eps_supcon", "epsilon", -0.5, ">= 0, got -0.5"), ("eps_supinfonce", "epsilon", -1e-9, ">= 0, got -1e-09"),
    ("dcl", "tau_plus", "0.1", "tau_plus"), ("hcl", "beta", True, "beta"),
]


def _bad_id(case: tuple) -> str:
    return f"{case[0]}-{case[1]}={case[2]!r}"


@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=_bad_id)
def test_out_of_range_hyperparameter_fails_at_get(case):
    name, param, value, allowed = case
    with pytest.raises(ValueError) as err:
        losses.get(name, **{param: value})
    assert param in str(err.value) and allowed in str(err.value)


@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=_bad_id)
def test_out_of_range_hyperparameter_fails_on_direct_call(case):
    name, param, value, allowed = case
    scores = losses.pair_scores(Z1, Z2, 0.5, labels=torch.arange(4))
    with pytest.raises(ValueError) as err:
        getattr(losses, name)(scores, **{param: value})
    assert param in str(err.value) and allowed in str(err.value)


def test_unknown_hyperparameter_and_unknown_loss():
    with pytest.raises(ValueError, match="no hyper-parameter tau.*valid: tau_plus"):
        losses.get("dcl", tau=0.1)
    with pytest.raises(ValueError, match="no hyper-parameter beta.*valid: none"):
        losses.get("infonce", beta=1.0)
    for call in (lambda: losses.get("simclr"), lambda: losses.spec("simclr")):
        with pytest.raises(ValueError, match="unknown loss 'simclr'.*available:.*infonce"):
            call()


def test_fairkl_moments_must_be_known():
    with pytest.raises(ValueError, match="moments must be one of full, mean"):
        losses.fairkl(Z1, torch.arange(4), torch.arange(4), moments="var")


@pytest.mark.parametrize("t", [0.0, -0.5, math.nan])
def test_temperature_must_be_positive(t):
    q, k, bank = torch.randn(3, 8), torch.randn(3, 8), torch.randn(5, 8)
    builders = [
        lambda: losses.pair_scores(Z1, Z2, t),
        lambda: losses.multiview_scores([Z1, Z2, Z1], t),
        lambda: losses.bank_scores(q, k, bank, t),
        lambda: losses.label_scores(Z1, torch.arange(4), t),
        lambda: losses.membership_scores(q, bank, torch.tensor([0, 1, 2, 0, 1]), t),
    ]
    for build in builders:
        with pytest.raises(ValueError, match="temperature must be > 0"):
            build()


@pytest.mark.parametrize("build, message", [
    (lambda: losses.pair_scores(Z1, torch.randn(5, 8), 0.5), "z1 and z2 must hold the same samples"),
    (lambda: losses.pair_scores(Z1, torch.randn(4, 7), 0.5), "z2 has embedding size 7, expected 8"),
    (lambda: losses.pair_scores(torch.randn(8), Z2, 0.5), "z1 must be a 2-D tensor"),
    (lambda: losses.pair_scores(Z1, Z2, 0.5, labels=torch.arange(3)), "labels must be a 1-D tensor of 4"),
    (lambda: losses.pair_scores(Z1, Z2, 0.5, labels=torch.ones(4)), "labels must hold integer class ids"),
    (lambda: losses.multiview_scores([Z1, torch.randn(3, 8)], 0.5), r"views\[1\] has 3 rows"),
    (lambda: losses.multiview_scores([Z1], 0.5), "at least 2 views"),
    (lambda: losses.bank_scores(Z1, torch.randn(3, 8), torch.randn(5, 8), 0.5), "key must have one row per query"),
    (lambda: losses.bank_scores(Z1, Z2, torch.randn(5, 6), 0.5), "bank has embedding size 6"),
    (lambda: losses.bank_scores(Z1, Z2, torch.randn(5, 8), 0.5, labels=torch.arange(4)),
     "labels and bank_labels must be given together"),
    (lambda: losses.bank_scores(Z1, Z2, torch.randn(5, 8), 0.5, labels=torch.arange(4), bank_labels=torch.arange(4)),
     "bank_labels must be a 1-D tensor of 5"),
    (lambda: losses.label_scores(Z1, torch.arange(5), 0.5), "labels must be a 1-D tensor of 4"),
    (lambda: losses.membership_scores(Z1, torch.randn(6, 8), torch.zeros(5, dtype=torch.long), 0.5),
     r"member_of must have one entry per candidate \(6\)"),
    (lambda: losses.membership_scores(Z1, torch.randn(6, 8), torch.tensor([0, 1, 2, 3, 4, 0]), 0.5),
     r"member_of values must lie in \[0, 4\)"),
    (lambda: losses.membership_scores(Z1, Z2, torch.arange(4), 0.5, members="graphs"), "members must be"),
])
def test_constructor_rejects_mismatched_inputs(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def _masks(a: int = 3, k: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    pos = torch.zeros(a, k, dtype=torch.bool)
    pos[:, 0] = True
    return pos, ~pos


@pytest.mark.parametrize("build, message", [
    (lambda: losses.Scores(torch.zeros(3, 4), *_masks(3, 5)), r"pos_mask has shape \(3, 5\) but logits have \(3, 4\)"),
    (lambda: losses.Scores(torch.zeros(3, 4), _masks()[0], _masks(2, 4)[1]), "neg_mask has shape"),
    (lambda: losses.Scores(torch.zeros(12), *_masks()), "logits must be a 2-D tensor"),
    (lambda: losses.Scores(torch.zeros(3, 4, dtype=torch.long), *_masks()), "logits must be floating point"),
    (lambda: losses.Scores(torch.zeros(3, 4), _masks()[0].float(), _masks()[1]), "pos_mask must be a bool tensor"),
    (lambda: losses.Scores(torch.zeros(3, 4), _masks()[0], torch.ones(3, 4, dtype=torch.bool)),
     "pos_mask and neg_mask overlap"),
    (lambda: losses.Scores(torch.tensor([[0.0, math.nan], [0.0, 1.0]]), *_masks(2, 2)), "logits contain NaN"),
    (lambda: losses.Scores(torch.tensor([[0.0, math.inf], [0.0, 1.0]]), *_masks(2, 2)), "infinite"),
    (lambda: losses.Scores(torch.zeros(3, 4), *_masks(), anchor_labels=torch.arange(3)),
     "anchor_labels and candidate_labels must be given together"),
    (lambda: losses.Scores(torch.zeros(3, 4), *_masks(), anchor_labels=torch.arange(4),
                           candidate_labels=torch.arange(4)), r"anchor_labels must have shape \[3\]"),
    (lambda: losses.pair_scores(torch.full((4, 8), math.nan), Z2, 0.5), "logits contain NaN"),
])
def test_scores_reject_bad_inputs(build, message):
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize("name", losses.available(needs_labels=True))
def test_supervised_loss_without_labels(name):
    with pytest.raises(ValueError, match=f"{name} is supervised: the Scores carry no labels"):
        losses.get(name)(GOOD)


def _no_positive() -> losses.Scores:
    return losses.Scores(torch.randn(3, 4), torch.zeros(3, 4, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool),
                         anchor_labels=torch.arange(3), candidate_labels=torch.arange(4))


def _no_negative() -> losses.Scores:
    pos = torch.zeros(3, 4, dtype=torch.bool)
    pos[:, 1] = True
    return losses.Scores(torch.randn(3, 4), pos, torch.zeros(3, 4, dtype=torch.bool),
                         anchor_labels=torch.arange(3), candidate_labels=torch.arange(4))


@pytest.mark.parametrize("name", losses.available())
def test_no_qualifying_anchor(name):
    with pytest.raises(ValueError, match=f"{name}: .*(no anchor has|at least one positive)"):
        losses.get(name)(_no_positive())


@pytest.mark.parametrize("name", ["dcl", "hcl", "pucl", "debiased_pos", "unbiased", "jsd"])
def test_losses_that_need_negatives_refuse_a_batch_without_any(name):
    with pytest.raises(ValueError, match=f"{name}: .*(negative|at least one positive and one negative)"):
        losses.get(name)(_no_negative())


def test_unbiased_needs_a_negative_of_another_class():
    # Every negative shares its anchor's label (one class): no anchor qualifies.
    scores = losses.pair_scores(Z1, Z2, 0.5, labels=torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="unbiased: no anchor has a positive and a negative of another class"):
        losses.unbiased(scores)


@pytest.mark.parametrize("build, message", [
    (lambda: losses.fairkl(torch.randn(8), torch.arange(8), torch.arange(8)), "z must be a 2-D tensor"),
    (lambda: losses.fairkl(torch.randn(8, 3), torch.arange(7), torch.arange(8)), "labels must be a 1-D tensor of 8"),
    (lambda: losses.fairkl(torch.randn(8, 3), torch.arange(8), torch.arange(9)),
     "bias_labels must be a 1-D tensor of 8"),
])
def test_fairkl_rejects_mismatched_inputs(build, message):
    with pytest.raises(ValueError, match=message):
        build()
