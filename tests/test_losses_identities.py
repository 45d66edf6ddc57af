"""The identities of the spec, NT-Xent, and Chuang et al.'s DCL reference code on the SimCLR layout.

Each identity is checked on the loss value and on the gradient with respect to the embeddings.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import losses


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _pair(batch: int, dim: int = 8, noise: float = 0.6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    base = torch.randn(batch, dim, generator=_g(seed), dtype=torch.float64)
    z1 = base + noise * torch.randn(batch, dim, generator=_g(seed + 1), dtype=torch.float64)
    z2 = base + noise * torch.randn(batch, dim, generator=_g(seed + 2), dtype=torch.float64)
    return z1.requires_grad_(), z2.requires_grad_()


def _value_and_grads(loss_fn, build, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    value = loss_fn(build(*inputs))
    return (value.detach(), *torch.autograd.grad(value, inputs))


def _same(loss_a, loss_b, build, inputs) -> None:
    for a, b in zip(_value_and_grads(loss_a, build, inputs), _value_and_grads(loss_b, build, inputs)):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-5, atol=1e-6)


def _layouts() -> dict[str, tuple]:
    """Builders and their inputs: SimCLR pairs, four views with labels, supervised, a memory bank."""
    z1, z2 = _pair(6, seed=1)
    views = tuple(torch.randn(5, 4, generator=_g(10 + v), dtype=torch.float64).requires_grad_() for v in range(4))
    y5 = torch.tensor([0, 1, 0, 1, 2])
    z = torch.randn(10, 4, generator=_g(20), dtype=torch.float64).requires_grad_()
    y10 = torch.tensor([0, 1, 0, 2, 1, 0, 2, 1, 2, 3])
    q, k = _pair(4, dim=6, seed=30)
    bank = torch.randn(9, 6, generator=_g(31), dtype=torch.float64)
    return {
        "pair": (lambda a, b: losses.pair_scores(a, b, 0.5, labels=torch.arange(6) % 2), (z1, z2)),
        "multiview": (lambda *v: losses.multiview_scores(list(v), 0.3, labels=y5), views),
        "label": (lambda x: losses.label_scores(x, y10, 0.2), (z,)),
        "bank": (lambda a, b: losses.bank_scores(a, b, bank, 0.1, labels=torch.tensor([0, 1, 2, 0]),
                                                 bank_labels=torch.arange(9) % 3), (q, k)),
        "pair-raw": (lambda a, b: losses.pair_scores(a, b, 1.0, labels=torch.arange(6) % 3, normalize=False),
                     (z1, z2)),
    }


LAYOUTS = _layouts()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_dcl_without_class_prior_is_infonce(layout):
    _same(losses.get("dcl", tau_plus=0.0), losses.get("infonce"), *LAYOUTS[layout])


@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.6])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_hcl_with_beta_zero_is_dcl(layout, tau_plus):
    _same(losses.get("hcl", tau_plus=tau_plus, beta=0.0), losses.get("dcl", tau_plus=tau_plus), *LAYOUTS[layout])


@pytest.mark.parametrize("alpha", [0.05, 0.3, 0.8])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_pucl_with_c_zero_is_dcl(layout, alpha):
    _same(losses.get("pucl", alpha=alpha, c=0.0), losses.get("dcl", tau_plus=alpha), *LAYOUTS[layout])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_eps_supcon_with_zero_margin_is_supcon(layout):
    _same(losses.get("eps_supcon", epsilon=0.0), losses.get("supcon"), *LAYOUTS[layout])


@pytest.mark.parametrize("layout", ["pair", "bank", "pair-raw"])
def test_eps_supinfonce_with_zero_margin_is_infonce_when_one_positive(layout):
    _same(losses.get("eps_supinfonce", epsilon=0.0), losses.get("infonce"), *LAYOUTS[layout])


@pytest.mark.parametrize("tau_plus", [0.1, 0.5])
@pytest.mark.parametrize("layout", ["pair", "bank", "pair-raw"])
def test_debiased_pos_aggregations_agree_when_one_positive(layout, tau_plus):
    _same(losses.get("debiased_pos", tau_plus=tau_plus, aggregation="grouping"),
          losses.get("debiased_pos", tau_plus=tau_plus, aggregation="combination"), *LAYOUTS[layout])


def test_unbiased_is_infonce_when_no_negative_shares_the_label():
    z1, z2 = _pair(6, seed=3)
    # Every sample its own class: no negative of the SimCLR layout shares the anchor's label.
    _same(losses.get("unbiased"), losses.get("infonce"),
          lambda a, b: losses.pair_scores(a, b, 0.5, labels=torch.arange(6)), (z1, z2))
    # label_scores puts every same-label row among the positives, so it never has such a negative.
    _same(losses.get("unbiased"), losses.get("infonce"), *LAYOUTS["label"])


def test_unbiased_differs_from_infonce_when_negatives_share_the_label():
    build, inputs = LAYOUTS["pair"]
    scores = build(*inputs)
    assert abs(losses.unbiased(scores).item() - losses.infonce(scores).item()) > 1e-3


def _nt_xent(z1: torch.Tensor, z2: torch.Tensor, t: float) -> torch.Tensor:
    """SimCLR's NT-Xent, written as usual with a cross-entropy over the 2B-1 other rows."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = (z @ z.T / t).fill_diagonal_(float("-inf"))
    b = z1.shape[0]
    target = torch.cat([torch.arange(b, 2 * b), torch.arange(b)])
    return F.cross_entropy(sim, target)


@pytest.mark.parametrize("batch, t", [(2, 0.5), (7, 0.1), (16, 0.07), (32, 1.0)])
def test_infonce_on_pairs_is_nt_xent(batch, t):
    z1, z2 = _pair(batch, seed=batch)
    ours = losses.infonce(losses.pair_scores(z1, z2, t))
    grads = torch.autograd.grad(ours, (z1, z2))
    expected = _nt_xent(z1, z2, t)  # float64 throughout
    expected_grads = torch.autograd.grad(expected, (z1, z2))
    assert ours.item() == pytest.approx(expected.item(), rel=1e-5)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


def _chuang_terms(z1: torch.Tensor, z2: torch.Tensor, t: float,
                  tau_plus: float) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The debiased objective's pieces as Chuang et al.'s code computes them (SimCLR layout, cosine
    logits): the exponentiated positive of each of the 2B rows, the unclamped estimator
    ``(-tau_plus·N·pos + Σ neg) / (1 - tau_plus)`` over the 2B-2 negatives (all but itself and its
    other view), and the clamp ``N·e^(-1/t)``."""
    b = z1.shape[0]
    u1, u2 = F.normalize(z1, dim=-1), F.normalize(z2, dim=-1)
    rows = torch.cat([u1, u2])
    sim = torch.exp(rows @ rows.T / t)
    not_neg = torch.eye(b, dtype=torch.bool).repeat(2, 2)  # itself and its other view
    neg_sum = sim.masked_fill(not_neg, 0.0).sum(dim=-1)
    pos = torch.exp((u1 * u2).sum(dim=-1) / t).repeat(2)
    n = 2 * b - 2
    return pos, (-tau_plus * n * pos + neg_sum) / (1 - tau_plus), n * math.exp(-1 / t)


def _chuang_dcl(z1: torch.Tensor, z2: torch.Tensor, t: float, tau_plus: float) -> torch.Tensor:
    """``Ng = max(estimator, N·e^(-1/t))``, ``-log(pos / (pos + Ng))`` averaged over the 2B rows."""
    pos, estimator, clamp = _chuang_terms(z1, z2, t, tau_plus)
    ng = estimator.clamp(min=clamp)
    return (-torch.log(pos / (pos + ng))).mean()


@pytest.mark.parametrize("tau_plus", [0.0, 0.1, 0.5, 0.9])
@pytest.mark.parametrize("batch, t, noise", [(4, 0.5, 0.6), (16, 0.5, 0.3), (16, 0.2, 1.0), (64, 0.1, 0.8)])
def test_dcl_matches_chuang_et_al_reference_code(batch, t, noise, tau_plus):
    z1, z2 = _pair(batch, noise=noise, seed=batch + 7)
    ours = losses.get("dcl", tau_plus=tau_plus)(losses.pair_scores(z1, z2, t))
    expected = _chuang_dcl(z1, z2, t, tau_plus)
    assert ours.item() == pytest.approx(expected.item(), rel=1e-5)
    for g, e in zip(torch.autograd.grad(ours, (z1, z2)), torch.autograd.grad(expected, (z1, z2))):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-6)


def test_chuang_cases_cover_the_clamp():
    """The cases above include rows where the official clamp is what is used, and rows where not."""
    _, estimator, clamp = _chuang_terms(*_pair(16, noise=1.0, seed=23), 0.2, 0.5)
    clamped = estimator < clamp
    assert bool(clamped.any()) and not bool(clamped.all())
    _, estimator, clamp = _chuang_terms(*_pair(16, noise=0.3, seed=23), 0.5, 0.1)
    assert bool((estimator > clamp).all())
