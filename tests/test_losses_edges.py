"""One rule at the loss core's edges (issue 18): non-finite hyper-parameters and inputs are refused
with a ValueError that names them, and a batch with no negative gets the same answer from every loss."""

from __future__ import annotations

import math

import pytest
import torch

import losses

UNSUPERVISED = ("infonce", "dcl", "hcl", "pucl", "debiased_pos", "jsd")
SUPERVISED = ("supcon", "eps_supcon", "eps_supinfonce", "unbiased")


@pytest.mark.parametrize("name", UNSUPERVISED)
def test_a_batch_of_one_pair_has_no_negative_and_every_unsupervised_loss_refuses_it(name):
    z = torch.randn(1, 4)
    with pytest.raises(ValueError, match="negative"):
        losses.get(name)(losses.pair_scores(z, z + 0.1, 0.5))


@pytest.mark.parametrize("name", SUPERVISED)
def test_a_batch_of_one_class_has_no_negative_and_every_supervised_loss_refuses_it(name):
    scores = losses.label_scores(torch.randn(4, 4), torch.zeros(4, dtype=torch.long), 0.5)
    with pytest.raises(ValueError, match="negative"):
        losses.get(name)(scores)


@pytest.mark.parametrize("name", UNSUPERVISED)
def test_an_empty_batch_is_a_value_error(name):
    z = torch.randn(0, 4)
    with pytest.raises(ValueError, match=name):
        losses.get(name)(losses.pair_scores(z, z, 0.5))


@pytest.mark.parametrize(("name", "param"), [("eps_supcon", "epsilon"), ("eps_supinfonce", "epsilon"),
                                             ("hcl", "beta"), ("dcl", "tau_plus"), ("pucl", "alpha")])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_hyper_parameters_are_refused_by_name(name, param, value):
    with pytest.raises(ValueError, match=param):
        losses.get(name, **{param: value})


def test_fairkl_refuses_a_non_finite_feature():
    z = torch.randn(6, 3)
    z[2, 1] = math.nan
    with pytest.raises(ValueError, match="z contains NaN"):
        losses.fairkl(z, torch.arange(6) % 2, torch.arange(6) % 3)
