"""The registry: names, hyper-parameters with their defaults, label needs, papers; validation at get."""

from __future__ import annotations

import pytest
import torch

import losses

EXPECTED = {  # name: (hyper-parameter defaults, needs labels, a word of the paper's citation)
    "infonce": ({}, False, "Oord"),
    "dcl": ({"tau_plus": 0.1}, False, "Chuang"),
    "hcl": ({"tau_plus": 0.1, "beta": 1.0}, False, "Robinson"),
    "pucl": ({"alpha": 0.1, "c": 0.01}, False, "Wang"),
    "debiased_pos": ({"tau_plus": 0.1, "aggregation": "grouping"}, False, "Troeshestova"),
    "supcon": ({}, True, "Khosla"),
    "eps_supcon": ({"epsilon": 0.0}, True, "Barbano"),
    "eps_supinfonce": ({"epsilon": 0.0}, True, "Barbano"),
    "unbiased": ({}, True, "Chuang"),
    "jsd": ({}, False, "InfoGraph"),
}


def test_available_lists_every_loss_of_the_spec():
    assert losses.available() == sorted(EXPECTED)
    assert losses.available(needs_labels=True) == ["eps_supcon", "eps_supinfonce", "supcon", "unbiased"]
    assert losses.available(needs_labels=False) == ["dcl", "debiased_pos", "hcl", "infonce", "jsd", "pucl"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_spec_entry(name):
    defaults, needs_labels, author = EXPECTED[name]
    entry = losses.spec(name)
    assert entry.name == name
    assert {h.name: h.default for h in entry.hparams if not h.prior_setting} == defaults == entry.defaults
    assert entry.needs_labels is needs_labels
    assert author in entry.paper
    for h in entry.hparams:
        assert h.check(h.default) == h.default  # every default lies in its own range
        assert h.describe()


def test_get_binds_and_validates_hyperparameters():
    loss = losses.get("pucl", alpha=0.3)
    assert loss.name == "pucl" and loss.hparams == {"alpha": 0.3, "c": 0.01}
    assert repr(loss) == "pucl(alpha=0.3, c=0.01)"
    scores = losses.pair_scores(torch.randn(5, 4), torch.randn(5, 4), 0.5)
    assert loss(scores).item() == losses.pucl(scores, alpha=0.3, c=0.01).item()
    assert losses.get("hcl", beta=2).hparams["beta"] == 2.0  # ints are accepted as numbers
    assert losses.get("debiased_pos", aggregation="combination").hparams["aggregation"] == "combination"


def test_get_fails_before_any_scores_exist():
    """A bad value is reported when the loss is built, not at the first training step."""
    with pytest.raises(ValueError, match="tau_plus"):
        losses.get("dcl", tau_plus=1.2)


def test_every_loss_is_exported_under_its_name():
    for name in losses.available():
        assert losses.spec(name).fn is getattr(losses, name)
