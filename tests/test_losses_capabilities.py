"""Loss capabilities: registration that cannot be forgotten, what each loss declares (how it scores, what a positive
is to it, labels, objective), the accepted losses of every domain and method that follow from them, and the
cross-entropy baseline as a core loss."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

import pytest
import torch
import torch.nn.functional as F

import domains
import losses
from domains.base import Supplies

# Every public module of losses/ is imported here, so a loss file that losses/__init__ forgets still registers in
# this process, and the export check below catches it.
MODULES = [importlib.import_module(f"losses.{m.name}") for m in pkgutil.iter_modules(losses.__path__)
           if not m.name.startswith("_")]


def _is_loss_function(fn: object) -> bool:
    """A function of one Scores (and hyper-parameters) returning a tensor: what the core calls a loss."""
    if not inspect.isfunction(fn):
        return False
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters)
    return bool(params) and hints.get(params[0]) is losses.Scores and hints.get("return") is torch.Tensor


def test_every_loss_a_module_defines_is_registered():
    kernels = {losses.spec(name).fn for name in losses.available(objective=None)}
    found = [(module.__name__, name) for module in MODULES for name, fn in vars(module).items()
             if not name.startswith("_") and getattr(fn, "__module__", None) == module.__name__
             and _is_loss_function(fn)]
    assert len(found) >= 10
    unregistered = [f"{module}.{name}" for module, name in found
                    if getattr(vars(importlib.import_module(module))[name], "__wrapped__", None) not in kernels]
    assert not unregistered, f"decorate these with @register_loss: {unregistered}"


def test_every_registered_loss_is_exported_by_the_package():
    for name in losses.available(objective=None):
        assert name in losses.__all__, f"import the module of loss '{name}' in losses/__init__.py"
        assert getattr(losses, name).__wrapped__ is losses.spec(name).fn
    exported = [name for name in losses.__all__ if _is_loss_function(getattr(losses, name))]
    assert sorted(exported) == losses.available()


@pytest.mark.parametrize(("name", "scoring", "positives", "needs_labels"), [
    ("infonce", losses.PROBABILITIES, losses.VIEWS, False), ("dcl", losses.PROBABILITIES, losses.VIEWS, False),
    ("jsd", losses.LOGITS, losses.VIEWS, False), ("unbiased", losses.PROBABILITIES, losses.VIEWS, True),
    ("supcon", losses.PROBABILITIES, losses.CLASSMATES, True),
    ("eps_supinfonce", losses.PROBABILITIES, losses.CLASSMATES, True),
    ("ce", losses.PROBABILITIES, losses.CLASS, True),
])
def test_capabilities(name, scoring, positives, needs_labels):
    spec = losses.spec(name)
    assert (spec.scoring, spec.positives, spec.needs_labels, spec.objective) == (scoring, positives, needs_labels, True)


def test_a_regulariser_is_registered_but_no_objective():
    fairkl = losses.spec("fairkl")
    assert not fairkl.objective and fairkl.scoring is None and fairkl.positives is None
    with pytest.raises(ValueError, match="form must be one of gaussian, authors"):
        losses.get("fairkl", form="paper")
    z, y, bias = torch.randn(8, 4), torch.arange(8) % 2, torch.tensor([0, 1, 1, 0, 0, 1, 0, 1])
    assert losses.get("fairkl", form="authors")(z, y, bias).item() == losses.fairkl(z, y, bias, form="authors").item()
    assert not Supplies(positives=set(losses.POSITIVES), scorings=set(losses.SCORINGS), labels=True).admits(fairkl)


def test_supplies_refuse_an_unknown_capability():
    with pytest.raises(ValueError, match="unknown scorings raw"):
        Supplies(scorings={"raw"})


UNSUPERVISED = {"infonce", "dcl", "hcl", "pucl", "debiased_pos"}
# What each domain and method accepted when the lists were written by hand; the registry filtered by what they
# supply gives the same sets.
ACCEPTED = {
    ("graph", "infograph"): UNSUPERVISED | {"jsd", "jsd_hard"},
    ("vision", "simclr"): UNSUPERVISED | {"unbiased"},
    ("vision", "cmc"): UNSUPERVISED | {"unbiased"},
    ("vision", "moco"): UNSUPERVISED | {"unbiased"},
    ("vision", "biased"): {"supcon", "eps_supcon", "eps_supinfonce", "ce"},
    ("text", "quickthought"): UNSUPERVISED,
    ("text", "bow"): UNSUPERVISED,
    ("rl", "curl"): UNSUPERVISED | {"jsd", "jsd_hard"},
}


@pytest.mark.parametrize(("domain", "method"), sorted(ACCEPTED))
def test_accepted_losses_follow_from_what_a_method_supplies(domain, method):
    dom = domains.get(domain)
    accepted = dom.accepted_losses(method)
    assert set(accepted) == ACCEPTED[(domain, method)]
    assert accepted[0] == dom.baseline_loss_for(method)  # the baseline first, then by name
    assert list(accepted[1:]) == sorted(accepted[1:])
    assert set(dom.losses) == set().union(*(ACCEPTED[(domain, m)] for m in dom.methods if (domain, m) in ACCEPTED))


def test_infograph_scores_raw_logits_for_a_loss_that_reads_them_pair_by_pair():
    from domains.graph.config import GraphConfig
    from domains.graph.infograph import scoring

    cfg = GraphConfig()
    assert scoring("jsd", cfg) == (1.0, False)
    assert scoring("dcl", cfg) == (cfg.temperature, True)


def test_ce_trains_a_classifier_exactly_as_cross_entropy():
    """The biased track's baseline: the same gradient as F.cross_entropy to the bit (a classifier trains the
    same), the same value up to the order of the batch's sum."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):  # bf16: a classifier's logits under autocast
        logits = (3 * torch.randn(64, 10)).to(dtype).requires_grad_()
        y = torch.randint(10, (64,))
        expected = F.cross_entropy(logits.float(), y)
        value = losses.get("ce")(losses.class_scores(logits, y))
        assert value.item() == pytest.approx(expected.item(), rel=1e-6)
        assert torch.equal(torch.autograd.grad(value, logits)[0], torch.autograd.grad(expected, logits)[0])


def test_ce_is_infonce_with_one_positive_and_supcon_with_several():
    z1, z2, y = torch.randn(6, 4), torch.randn(6, 4), torch.arange(6) % 3
    pair = losses.pair_scores(z1, z2, 0.5, labels=y)
    assert losses.ce(pair).item() == pytest.approx(losses.infonce(pair).item(), rel=1e-6)
    label = losses.label_scores(z1, y, 0.5)
    assert losses.ce(label).item() == pytest.approx(losses.supcon(label).item(), rel=1e-6)


def test_class_scores_layout_and_errors():
    scores = losses.class_scores(torch.zeros(3, 4), torch.tensor([2, 0, 3]))
    assert scores.pos_mask.nonzero().tolist() == [[0, 2], [1, 0], [2, 3]]
    assert torch.equal(scores.neg_mask, ~scores.pos_mask) and scores.has_labels
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 4\)"):
        losses.class_scores(torch.zeros(3, 4), torch.tensor([0, 1, 4]))
    with pytest.raises(ValueError, match="logits must be a 2-D tensor"):
        losses.class_scores(torch.zeros(3), torch.tensor([0, 1, 2]))
