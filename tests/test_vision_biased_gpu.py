"""The biased track on CUDA: a tiny run end to end, and FairKL (the authors' form) with no host sync."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from support import no_sync

import domains
import losses
from domains.base import RunSpec
from domains.context import RunContext
from domains.vision.config import PRESETS, VisionConfig

pytestmark = pytest.mark.gpu
VISION = domains.get("vision")


def test_fairkl_authors_form_forward_backward_never_syncs(cuda):
    g = torch.Generator(device=cuda).manual_seed(0)
    z = torch.randn(256, 128, device=cuda, generator=g, requires_grad=True)
    y = torch.randint(0, 10, (256,), device=cuda, generator=g)
    b = torch.randint(0, 10, (256,), device=cuda, generator=g)
    with no_sync():
        value = losses.fairkl(z, y, b, form="authors")
        value.backward()
    assert torch.isfinite(value).item() and z.grad is not None


def test_tiny_paper_biased_run_on_cuda(cuda, tmp_path):
    cfg = replace(VisionConfig(), **PRESETS["paper-biased"].overrides)
    cfg = replace(cfg, arch="small", epochs=2, batch_size=128, linear_epochs=2)
    spec = RunSpec("vision", "biased", "biased-digits", "eps_supinfonce", {"epsilon": 0.5}, "paper-biased", 0, cfg)
    ctx = RunContext(seed=0, device=cuda, data_root=tmp_path, work_dir=tmp_path / "w", resume=False, quiet=True)
    data = VISION.prepare(spec, ctx).data
    pre = VISION.pretrain(spec, ctx, data)
    assert next(pre.model.parameters()).is_cuda
    assert all("online_top1" in p for p in pre.curve)
    metrics = VISION.evaluate(spec, pre, ctx, data).metrics
    assert metrics["top1"] == pytest.approx(pre.curve[-1]["online_top1"])
    assert metrics["online_best_top1"] >= metrics["top1"]
