"""Numerical stability: small temperatures, collapsed embeddings, half-precision inputs.

Every loss must give a finite value and finite gradients; at small temperatures the value must
still match the float64 reference (logits reach 1/t = 100, far past float32's exp range).
"""

from __future__ import annotations

import pytest
import reference_losses as ref
import torch

import losses

ENTRIES = [(name, {}) for name in losses.available()] + [
    ("debiased_pos", {"aggregation": "combination"}), ("dcl", {"tau_plus": 0.9}),
    ("hcl", {"tau_plus": 0.5, "beta": 5.0}), ("pucl", {"alpha": 0.5, "c": 0.5}), ("eps_supcon", {"epsilon": 2.0}),
    ("eps_supinfonce", {"epsilon": 2.0}),
]


def _loss_id(entry: tuple[str, dict]) -> str:
    name, hparams = entry
    return "-".join([name] + [f"{k}={v}" for k, v in hparams.items()])


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _finite_value_and_grads(entry, build, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    name, hparams = entry
    value = losses.get(name, **hparams)(build(*inputs))
    assert value.dtype == torch.float32 and torch.isfinite(value), value
    for grad, x in zip(torch.autograd.grad(value, inputs), inputs):
        assert grad.dtype == x.dtype and bool(torch.isfinite(grad).all()), f"non-finite gradient: {grad}"
    return value


def _pair_builder(t: float, labels: torch.Tensor):
    return lambda a, b: losses.pair_scores(a, b, t, labels=labels)


@pytest.mark.parametrize("t", [0.01, 0.05])
@pytest.mark.parametrize("entry", ENTRIES, ids=_loss_id)
def test_small_temperature(entry, t):
    base = torch.randn(12, 8, generator=_g(0))
    z1 = (base + 0.3 * torch.randn(12, 8, generator=_g(1))).requires_grad_()
    z2 = (base + 0.3 * torch.randn(12, 8, generator=_g(2))).requires_grad_()
    labels = torch.arange(12) % 3
    value = _finite_value_and_grads(entry, _pair_builder(t, labels), (z1, z2))
    name, hparams = entry
    expected = ref.REFERENCES[name](ref.to_ref(losses.pair_scores(z1, z2, t, labels=labels)), **hparams)
    assert value.item() == pytest.approx(expected, rel=1e-4, abs=1e-4)


@pytest.mark.parametrize("t", [0.05, 0.5])
@pytest.mark.parametrize("entry", ENTRIES, ids=_loss_id)
def test_collapsed_embeddings(entry, t):
    """Every row of every view is the same vector up to 1e-4: all logits are ~1/t."""
    point = torch.randn(1, 8, generator=_g(3))
    z1 = (point + 1e-4 * torch.randn(10, 8, generator=_g(4))).requires_grad_()
    z2 = (point + 1e-4 * torch.randn(10, 8, generator=_g(5))).requires_grad_()
    _finite_value_and_grads(entry, _pair_builder(t, torch.arange(10) % 2), (z1, z2))
    views = tuple((point + 1e-4 * torch.randn(5, 8, generator=_g(6 + v))).requires_grad_() for v in range(4))
    _finite_value_and_grads(entry, lambda *v: losses.multiview_scores(list(v), t, labels=torch.arange(5) % 2),
                            views)


@pytest.mark.parametrize("entry", ENTRIES, ids=_loss_id)
def test_exactly_identical_embeddings(entry):
    z1 = torch.ones(6, 4).requires_grad_()
    z2 = torch.ones(6, 4).requires_grad_()
    _finite_value_and_grads(entry, _pair_builder(0.1, torch.arange(6) % 2), (z1, z2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("entry", ENTRIES, ids=_loss_id)
def test_half_precision_inputs(entry, dtype):
    base = torch.randn(16, 32, generator=_g(7))
    z1 = (base + 0.5 * torch.randn(16, 32, generator=_g(8))).to(dtype).requires_grad_()
    z2 = (base + 0.5 * torch.randn(16, 32, generator=_g(9))).to(dtype).requires_grad_()
    labels = torch.arange(16) % 4
    value = _finite_value_and_grads(entry, _pair_builder(0.05, labels), (z1, z2))
    # The loss is computed in float32 from the half inputs: same as upcasting them first.
    name, hparams = entry
    upcast = losses.get(name, **hparams)(losses.pair_scores(z1.float(), z2.float(), 0.05, labels=labels))
    assert value.item() == pytest.approx(upcast.item(), rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits(dtype):
    """Scores built directly from half logits (e.g. under autocast) are upcast before any exp."""
    logits = (torch.randn(6, 6, generator=_g(10)) * 20).to(dtype).requires_grad_()
    pos = torch.roll(torch.eye(6, dtype=torch.bool), 3, dims=1)
    neg = ~pos & ~torch.eye(6, dtype=torch.bool)
    scores = losses.Scores(logits, pos, neg, anchor_labels=torch.arange(6) % 3,
                           candidate_labels=torch.arange(6) % 3)
    for name in losses.available():
        value = losses.get(name)(scores)
        (grad,) = torch.autograd.grad(value, logits)
        assert value.dtype == torch.float32 and torch.isfinite(value) and bool(torch.isfinite(grad).all()), name


@pytest.mark.parametrize("moments", ["full", "mean"])
def test_fairkl_collapsed_and_half(moments):
    y, bias = torch.arange(8) % 2, torch.tensor([0, 1, 1, 0, 0, 1, 0, 1])
    for z in (torch.ones(8, 4), torch.randn(8, 4, generator=_g(11)).half(), torch.randn(8, 4).bfloat16()):
        z = z.requires_grad_()
        value = losses.fairkl(z, y, bias, moments=moments)
        (grad,) = torch.autograd.grad(value, z)
        assert torch.isfinite(value) and bool(torch.isfinite(grad).all())
