"""Gradients of every loss and of FairKL.

The losses compute in float32 whatever the input precision (the spec), so two checks are made:

* ``torch.autograd.gradcheck`` on small float64 inputs. The float64 input is cast to float32 inside,
  so the finite differences carry float32 rounding: with ``eps=1e-3`` that rounding contributes about
  1e-7 / 1e-3 = 1e-4 to each numerical derivative and the truncation error is O(eps²) = 1e-6, hence
  ``atol=1e-3, rtol=1e-2``. A wrong gradient (a detached term, a missing factor) is off by far more.
* the autograd gradient against central differences (h = 1e-6) of the float64 loops of
  ``reference_losses``, which are accurate to ~1e-9, at ``atol=2e-5``: this check is tight and
  independent of the package. The detached quantities (the row-min floor and debiased_pos's row-max
  ``s_a`` when the Scores know no bound) are held fixed in the reference, as the spec detaches them.

The fused kernels (masked log-sum-exp, masked softplus sum) also get gradgradcheck, and second-order
gradients through whole losses are compared with the same losses written in plain torch.
"""

from __future__ import annotations

import math

import pytest
import reference_losses as ref
import torch

import losses

GRADCHECK = {"eps": 1e-3, "atol": 1e-3, "rtol": 1e-2}
LOSSES = [
    ("infonce", {}), ("dcl", {"tau_plus": 0.1}), ("dcl", {"tau_plus": 0.6}),
    ("hcl", {"tau_plus": 0.1, "beta": 1.0}), ("hcl", {"tau_plus": 0.4, "beta": 2.0}),
    ("pucl", {"alpha": 0.2, "c": 0.1}), ("pucl", {"alpha": 0.5, "c": 1.0}),
    ("debiased_pos", {"tau_plus": 0.1, "aggregation": "grouping"}),
    ("debiased_pos", {"tau_plus": 0.1, "aggregation": "combination"}),
    ("debiased_pos", {"tau_plus": 0.5, "aggregation": "grouping"}),
    ("supcon", {}), ("eps_supcon", {"epsilon": 0.3}), ("eps_supinfonce", {"epsilon": 0.3}),
    ("unbiased", {}), ("jsd", {}), ("jsd_hard", {"tau_plus": 0.5, "beta": 0.0}),
    ("jsd_hard", {"tau_plus": 0.5, "beta": 1.0}), ("jsd_hard", {"tau_plus": 0.2, "beta": 3.0}),
]


def _loss_id(entry: tuple[str, dict]) -> str:
    name, hparams = entry
    return "-".join([name] + [f"{k}={v}" for k, v in hparams.items()])


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _masks() -> tuple[torch.Tensor, torch.Tensor]:
    """5 anchors, 7 candidates: M_a = 0, 1, 2, 3, 1; row 3 has two ignored entries."""
    pos = torch.zeros(5, 7, dtype=torch.bool)
    for row, cols in {1: [0], 2: [1, 4], 3: [2, 3, 6], 4: [5]}.items():
        pos[row, cols] = True
    neg = ~pos
    neg[3, [0, 1]] = False
    return pos, neg


LABELS = (torch.tensor([0, 1, 0, 1, 2]), torch.tensor([1, 0, 0, 1, 2, 0, 1]))


def _scores(logits: torch.Tensor, bounded: bool) -> losses.Scores:
    pos, neg = _masks()
    bound = 3.0 if bounded else None
    return losses.Scores(logits, pos, neg, -bound if bounded else None, bound, *LABELS)


def _logits(seed: int = 0) -> torch.Tensor:
    return (torch.rand(5, 7, generator=_g(seed), dtype=torch.float64) * 5.0 - 2.5).requires_grad_()


@pytest.mark.parametrize("entry", LOSSES, ids=_loss_id)
def test_gradcheck_on_logits(entry):
    name, hparams = entry
    loss = losses.get(name, **hparams)
    assert torch.autograd.gradcheck(lambda x: loss(_scores(x, bounded=True)), (_logits(),), **GRADCHECK)


@pytest.mark.parametrize("entry", LOSSES, ids=_loss_id)
def test_gradcheck_through_the_constructors(entry):
    """Normalisation, the matmul and the temperature are differentiated too (SimCLR layout)."""
    name, hparams = entry
    loss = losses.get(name, **hparams)
    z1 = torch.randn(3, 4, generator=_g(1), dtype=torch.float64).requires_grad_()
    z2 = (z1.detach() + 0.5 * torch.randn(3, 4, generator=_g(2), dtype=torch.float64)).requires_grad_()
    labels = torch.tensor([0, 1, 0])
    assert torch.autograd.gradcheck(lambda a, b: loss(losses.pair_scores(a, b, 0.5, labels=labels)), (z1, z2),
                                    **GRADCHECK)


@pytest.mark.parametrize("name", ["supcon", "eps_supcon", "unbiased"])
def test_gradcheck_supervised_layout(name):
    loss = losses.get(name)
    z = torch.randn(6, 3, generator=_g(3), dtype=torch.float64).requires_grad_()
    y = torch.tensor([0, 1, 0, 1, 2, 0])
    assert torch.autograd.gradcheck(lambda x: loss(losses.label_scores(x, y, 0.3)), (z,), **GRADCHECK)


@pytest.mark.parametrize("moments", ["full", "mean"])
def test_gradcheck_fairkl(moments):
    z = torch.randn(8, 3, generator=_g(4), dtype=torch.float64).requires_grad_()
    y, bias = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]), torch.tensor([0, 1, 0, 1, 0, 1, 1, 0])
    assert torch.autograd.gradcheck(lambda x: losses.fairkl(x, y, bias, moments=moments), (z,), **GRADCHECK)


def _hard_logits() -> torch.Tensor:
    """Row 1's negatives crowd the top of the range (debiased_pos's floor is reached), row 4's positive
    stands far above its negatives (DCL's floor is reached)."""
    logits = _logits(5).detach().clone()
    logits[1] = torch.tensor([-2.0, 2.5, 2.6, 2.4, 2.7, 2.5, 2.55], dtype=torch.float64)
    logits[4] = torch.tensor([-1.0, -1.5, -0.5, -2.0, -1.2, 2.5, -0.8], dtype=torch.float64)
    return logits.requires_grad_()


@pytest.mark.parametrize("bounded", [True, False], ids=["bounds", "row-min-max"])
@pytest.mark.parametrize("make_logits", [_logits, _hard_logits], ids=["random", "hard"])
@pytest.mark.parametrize("entry", LOSSES, ids=_loss_id)
def test_gradient_matches_reference_finite_differences(entry, make_logits, bounded):
    name, hparams = entry
    logits = make_logits()
    scores = _scores(logits, bounded)
    (grad,) = torch.autograd.grad(losses.get(name, **hparams)(scores), logits)
    expected = ref.numerical_grad(lambda r: ref.REFERENCES[name](r, **hparams), ref.to_ref(scores))
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=torch.float64), rtol=1e-4, atol=2e-5)


def test_hard_logits_reach_the_floors():
    for bounded in (True, False):
        r = ref.to_ref(_scores(_hard_logits(), bounded))
        floored = ref.dcl_floor_rows(r, 0.6)  # anchors 1 to 4
        assert floored[3] and not floored[0]
        # With the bound 3 the self term keeps P_a high; with the row max (2.7) the floor is reached.
        assert ref.debiased_pos_regimes(r, 0.1)[0] == ("plain" if bounded else "floor")


def test_detached_bounds_carry_no_gradient():
    """Without known bounds the floor is the detached row min: a floored DCL row keeps only the
    gradient of its positive through e_ap / (e_ap + N·floor)."""
    logits = _hard_logits()
    (grad,) = torch.autograd.grad(losses.dcl(_scores(logits, bounded=False), tau_plus=0.6), logits)
    assert torch.count_nonzero(grad[4]).item() == 1 and grad[4, 5] < 0


@pytest.mark.parametrize("sparse", [False, True], ids=["bool-mask", "left-out-entries"])
def test_fused_kernels_have_right_second_order_gradients(sparse):
    """The row reductions (masked log-sum-exps with the positive logits, shifted or not) and the masked
    softplus sums are custom autograd functions; under create_graph their backward is differentiable
    (gradgradcheck, exact in float64). The mask is given as a bool matrix or as its left-out entries."""
    from losses._masks import Mask
    from losses._row_reductions import row_logsumexps
    from losses.jsd import _SoftplusSums

    x = _logits(8)
    pos, neg = _masks()
    neg[0] = False  # an empty row
    mask = Mask.excluding((5, 7), (~neg).nonzero(as_tuple=True)) if sparse else Mask((5, 7), dense=neg)
    anchor, cand = pos.nonzero(as_tuple=True)
    pos_flat = anchor * 7 + cand

    def reductions(v: torch.Tensor, bounded: bool) -> torch.Tensor:
        lse, at_pos = row_logsumexps(v, mask, (1.0, 2.5, 0.0), bounded=bounded, pos_flat=pos_flat)
        return torch.stack(lse).nan_to_num(neginf=0.0).sum() + at_pos.pow(2).sum()

    for fn in (lambda v: reductions(v, False), lambda v: reductions(v, True),
               lambda v: sum(_SoftplusSums.apply(v, mask, pos_flat)), lambda v: _SoftplusSums.apply(v, mask, None)[0]):
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("name", ["infonce", "hcl", "jsd"])
def test_second_order_gradients_match_plain_torch(name):
    """Through a whole loss: the gradient of the squared gradient norm equals that of the same loss
    written with plain torch operations (``logsumexp``, ``softplus``)."""
    def plain(scores: losses.Scores) -> torch.Tensor:
        x, pos, neg = scores.logits, scores.pos_mask, scores.neg_mask
        anchor, cand = pos.nonzero(as_tuple=True)
        if name == "jsd":
            return (torch.nn.functional.softplus(-x[anchor, cand]).mean()
                    + (torch.nn.functional.softplus(x) * neg).sum() / neg.sum() - 2 * math.log(2))
        lse = x.masked_fill(~neg, float("-inf")).logsumexp(1)
        if name == "hcl":  # tau_plus = 0 keeps only the reweighted negatives: N·r_a
            lse = ((2 * x).masked_fill(~neg, float("-inf")).logsumexp(1)
                   - x.masked_fill(~neg, float("-inf")).logsumexp(1) + neg.sum(1).log())
        return (torch.logaddexp(x[anchor, cand], lse[anchor]) - x[anchor, cand]).mean()

    ours = losses.get(name, **({"tau_plus": 0.0} if name == "hcl" else {}))
    z = torch.randn(5, 3, generator=_g(6), dtype=torch.float64).requires_grad_()
    results = []
    for fn in (ours, plain):
        (grad,) = torch.autograd.grad(fn(losses.pair_scores(z, z.roll(1, 0), 0.5)), z, create_graph=True)
        results.append(torch.autograd.grad(grad.pow(2).sum(), z)[0])
    torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=1e-6)
