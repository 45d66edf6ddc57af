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
from pathlib import Path

import pytest
import torch
from loss_layouts import ENTRIES, LAYOUTS, case, entry_id, value_and_grads
from support import no_sync

import losses

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("layout, t", LAYOUTS, ids=[f"{n}-t{t}" for n, t in LAYOUTS])
@pytest.mark.parametrize("entry", ENTRIES, ids=entry_id)
def test_cuda_gives_the_cpu_value_and_gradient(entry, layout, t, cuda):
    inputs, build = case(entry, layout, t)
    value, grads = value_and_grads(entry, [x.clone() for x in inputs], build)
    value_gpu, grads_gpu = value_and_grads(entry, [x.to(cuda) for x in inputs], build)
    assert value_gpu.device.type == "cuda"
    assert value_gpu.item() == pytest.approx(value.item(), rel=1e-4, abs=1e-5)
    for g_cpu, g_gpu in zip(grads, grads_gpu):
        torch.testing.assert_close(g_gpu.cpu(), g_cpu, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("layout, t", LAYOUTS, ids=[f"{n}-t{t}" for n, t in LAYOUTS])
@pytest.mark.parametrize("entry", ENTRIES, ids=entry_id)
def test_no_host_device_synchronisation(entry, layout, t, cuda):
    inputs, build = case(entry, layout, t)
    leaves = [x.to(cuda) for x in inputs]
    with no_sync():  # the constructor, the loss, its queued checks and the backward pass
        value, grads = value_and_grads(entry, leaves, build)
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
