"""The loss core on CUDA: the CPU's values and gradients, and no host-device synchronisation.

Each layout is built from the same float32 leaves on both devices, through every constructor (and
a hand-built Scores, which the losses read through its dense masks on CUDA), at a moderate
temperature (no shift before exp) and a small one (rows shifted by their maximum). Under
``torch.cuda.set_sync_debug_mode("error")`` any synchronising call (``nonzero``, ``.item()``,
``bool(tensor)``, a blocking copy) raises, so a clean forward and backward proves there is none.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from support import no_sync

import losses

pytestmark = pytest.mark.gpu

ENTRIES = [(name, {}) for name in losses.available()] + [
    ("debiased_pos", {"aggregation": "combination"}), ("hcl", {"tau_plus": 0.5, "beta": 0.0}),
    ("eps_supcon", {"epsilon": 0.5}), ("eps_supinfonce", {"epsilon": 0.5}), ("pucl", {"alpha": 0.5, "c": 0.5}),
]
Build = Callable[[list[torch.Tensor]], losses.Scores]


def _entry_id(entry: tuple[str, dict]) -> str:
    name, hparams = entry
    return "-".join([name] + [f"{k}={v}" for k, v in hparams.items()])


def _hand_built(x: list[torch.Tensor]) -> losses.Scores:
    logits = x[0] @ x[1].T
    pos = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    pos[:, :3] = True
    pos[0] = False  # an anchor without positives
    neg = ~pos
    neg[:, 3] = False  # ignored entries
    labels = torch.arange(logits.shape[0], device=logits.device) % 3
    return losses.Scores(logits, pos, neg, None, None, labels, torch.arange(logits.shape[1], device=logits.device) % 3)


def _layouts(t: float) -> dict[str, tuple[list[torch.Tensor], Build]]:
    """Name -> (CPU inputs: float leaves first, then integer tensors, and a builder of Scores)."""
    g = torch.Generator().manual_seed(0)

    def z(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    y, bank_y = torch.randint(4, (24,), generator=g), torch.randint(4, (40,), generator=g)
    member_of = torch.randint(6, (30,), generator=g)
    base = z(24, 16)
    return {
        "pair": ([base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), y],
                 lambda x: losses.pair_scores(x[0], x[1], t, labels=x[2])),
        "pair-raw": ([base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), y],
                     lambda x: losses.pair_scores(x[0], x[1], t, labels=x[2], normalize=False)),
        "multiview": ([base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), y],
                      lambda x: losses.multiview_scores(x[:3], t, labels=x[3])),
        "pairwise": ([base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), base + 0.3 * z(24, 16), y],
                     lambda x: losses.pairwise_scores(x[:3], t, labels=x[3])),
        "bank": ([base, base + 0.3 * z(24, 16), z(40, 16), y, bank_y],
                 lambda x: losses.bank_scores(x[0], x[1], x[2], t, labels=x[3], bank_labels=x[4])),
        "label": ([base, y], lambda x: losses.label_scores(x[0], x[1], t)),
        "membership-graphs": ([z(6, 16), z(30, 16), member_of],
                              lambda x: losses.membership_scores(x[0], x[1], x[2], t)),
        "membership-nodes": ([z(30, 16), z(6, 16), member_of],
                             lambda x: losses.membership_scores(x[0], x[1], x[2], t, members="anchors")),
        "hand-built": ([z(10, 16), z(12, 16)], _hand_built),
    }


LAYOUTS = [(name, t) for t in (0.5, 0.02) for name in _layouts(t)]


def _applies(entry: tuple[str, dict], scores: losses.Scores) -> bool:
    return scores.has_labels or not losses.spec(entry[0]).needs_labels


def _value_and_grads(entry, inputs: list[torch.Tensor], build: Build) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.requires_grad_() if x.is_floating_point() else x for x in inputs]
    value = losses.get(entry[0], **entry[1])(build(leaves))
    grads = torch.autograd.grad(value, [x for x in leaves if x.is_floating_point()])
    return value, list(grads)


def _case(entry, layout: str, t: float):
    """The inputs and constructor of a layout; skips a supervised loss on a layout without labels."""
    inputs, build = _layouts(t)[layout]
    if not _applies(entry, build(inputs)):
        pytest.skip("layout without labels")
    return inputs, build


@pytest.mark.parametrize("layout, t", LAYOUTS, ids=[f"{n}-t{t}" for n, t in LAYOUTS])
@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_cuda_gives_the_cpu_value_and_gradient(entry, layout, t, cuda):
    inputs, build = _case(entry, layout, t)
    value, grads = _value_and_grads(entry, [x.clone() for x in inputs], build)
    value_gpu, grads_gpu = _value_and_grads(entry, [x.to(cuda) for x in inputs], build)
    assert value_gpu.device.type == "cuda"
    assert value_gpu.item() == pytest.approx(value.item(), rel=1e-4, abs=1e-5)
    for g_cpu, g_gpu in zip(grads, grads_gpu):
        torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("layout, t", LAYOUTS, ids=[f"{n}-t{t}" for n, t in LAYOUTS])
@pytest.mark.parametrize("entry", ENTRIES, ids=_entry_id)
def test_no_host_device_synchronisation(entry, layout, t, cuda):
    inputs, build = _case(entry, layout, t)
    leaves = [x.to(cuda) for x in inputs]
    with no_sync():  # the constructor, the loss, its queued checks and the backward pass
        value, grads = _value_and_grads(entry, leaves, build)
    assert torch.isfinite(value) and all(bool(torch.isfinite(g).all()) for g in grads)


def test_sync_checks_raise_the_cpu_error_on_cuda(cuda):
    """With synchronous checks, a batch without any positive fails as on the CPU, with its message."""
    z = torch.randn(8, 4, device=cuda)
    scores = losses.label_scores(z, torch.arange(8, device=cuda), 0.5)  # every label distinct
    previous = losses.set_sync_checks(True)
    try:
        with pytest.raises(ValueError, match="supcon: no anchor has a positive"):
            losses.supcon(scores)
    finally:
        losses.set_sync_checks(previous)


def test_queued_checks_stop_the_process_on_cuda(cuda):
    """By default the same check is queued: the process stops with a device-side assertion at the next
    CUDA call that reports the error (a later kernel launch or the synchronisation; measured on an H100,
    it surfaced before the loss call returned). In a subprocess: the assertion leaves the context unusable."""
    script = ("import torch, losses\n"
              "z = torch.randn(8, 4, device='cuda')\n"
              "loss = losses.supcon(losses.label_scores(z, torch.arange(8, device='cuda'), 0.5))\n"
              "print('queued', flush=True)\n"
              "torch.cuda.synchronize()\n"
              "print('not reached', flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode != 0 and "not reached" not in done.stdout
    assert "assert" in (done.stderr + done.stdout).lower()
