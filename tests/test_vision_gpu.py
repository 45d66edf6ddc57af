"""The vision domain on CUDA: the quick preset end to end through the CLI, one SimCLR step in
channels_last and bf16 against the same step on the CPU, the pixel functions on both devices and
compiled, and training steps that never wait for the device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support import no_sync

import losses
from domains.vision import augment as aug
from domains.vision.cmc import CMC
from domains.vision.config import VisionConfig, resolved
from domains.vision.method import Batch, DataInfo
from domains.vision.moco import MoCo
from domains.vision.simclr import SimCLR
from domains.vision.train import accelerate, multi_tensor
from harness.run.model_file import load_model

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent
STATS = ((0.49, 0.48, 0.45), (0.25, 0.24, 0.26))


def _info(n: int, size: int = 32) -> DataInfo:
    return DataInfo(n, torch.arange(n) % 10, 10, size, *STATS)


def _cfg(method: str, **kw) -> VisionConfig:
    return resolved(replace(VisionConfig(arch="resnet18"), **kw), method, "cifar10")


def test_quick_preset_end_to_end_on_cuda_through_the_cli(cuda, tmp_path):
    """The quick preset on CUDA through the CLI, with ``--save-model``: the networks come back on the CPU."""
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "vision", "--loss", "infonce", "--preset", "quick",
           "--seeds", "0", "--save-model",
           "--device", "cuda", "--quiet", "--results", str(tmp_path), "--set", "epochs=2", "--set", "knn_every=1",
           "--set", "linear_epochs=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = tmp_path.glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "completed" and record["domain"] == "vision"
    assert record["hardware"]["device"].startswith("cuda") and record["hardware"]["peak_gpu_memory_gib"] > 0
    assert [p["epoch"] for p in record["curve"]] == [1, 2] and "knn_top1" in record["curve"][-1]
    assert 0.0 <= record["metrics"]["top1"] <= 100.0 and record["throughput"]["images_per_s"] > 0
    kept = tmp_path / "models" / f"{record['run_id']}.pt"
    saved = torch.load(kept, weights_only=True)
    assert saved["run_id"] == record["run_id"] and set(saved["modules"]) == {"encoder", "head"}
    assert all(t.device.type == "cpu" for state in saved["modules"].values() for t in state.values())
    _, modules = load_model(kept)
    assert {name: m.state_dict().keys() for name, m in modules.items()} == \
        {name: state.keys() for name, state in saved["modules"].items()}


def _step_losses(method: SimCLR, batch: Batch, device: torch.device, bf16: bool) -> tuple[float, float]:
    """Loss of one step, and of the same batch after that step."""
    accelerate(method, device)
    opt = method.optimizer()
    multi_tensor(opt, device)
    out = []
    for _ in range(2):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = method(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out[0], out[1]


@pytest.mark.parametrize("bf16", [False, True])
def test_simclr_step_on_cuda_matches_the_cpu(cuda, bf16):
    # Without augmentation the two views are the image itself on both devices: the same inputs.
    cfg = _cfg("simclr", augment="none", batch_size=64)
    torch.manual_seed(0)
    cpu_method = SimCLR(cfg, _info(64), losses.get("infonce"), False)
    gpu_method = SimCLR(cfg, _info(64), losses.get("infonce"), False)
    gpu_method.load_state_dict(cpu_method.state_dict())
    gpu_method.to(cuda)
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    batch = Batch(torch.arange(64), images, torch.arange(64) % 10)
    on_gpu = Batch(*(t.to(cuda) for t in (batch.index, batch.images, batch.labels)))
    expected = _step_losses(cpu_method, batch, torch.device("cpu"), bf16=False)
    got = _step_losses(gpu_method, on_gpu, cuda, bf16=bf16)
    assert next(gpu_method.encoder.parameters()).is_contiguous(memory_format=torch.channels_last)
    tol = 0.05 if bf16 else 0.01  # bf16 activations; TF32 convolutions in float32
    assert got == pytest.approx(expected, abs=tol)
    assert expected[1] < expected[0]  # the step learned on this batch, on both devices
    assert got[1] < got[0]


def test_pixel_functions_agree_on_cpu_cuda_and_compiled(cuda, monkeypatch):
    monkeypatch.setattr(aug, "_compiled_fns", {})
    torch.manual_seed(0)
    images = torch.randint(0, 256, (32, 3, 32, 32), dtype=torch.uint8)
    u = torch.rand(5, 32)

    def crop(x, u, flip=True):
        return aug._crop(x, u, 24, 0.2, flip, 1 / 255)

    def jitter(x, u):  # each image's operation at each position, as color_jitter draws them on the device
        which = (u[:4] * 4).long().clamp(max=3)
        for position in range(4):
            x = aug._jitter_position(x, which[position], u, aug.JITTER)
        return x

    pipelines = {
        "crop": crop,
        "jitter": lambda x, u: aug._choose(u[2], 0.8, jitter(crop(x, u), u), crop(x, u)),
        "gray+normalize": lambda x, u: aug.normalize(aug._gray(u[0], 0.5, crop(x, u, False)), *STATS),
        "lab": lambda x, u: torch.cat(aug.lab_views(crop(x, u, False)), 1),
    }
    for name, fn in pipelines.items():
        reference = fn(images, u)
        eager = fn(images.to(cuda), u.to(cuda))
        previous = aug.set_compiled(True)
        try:
            compiled = fn(images.to(cuda), u.to(cuda))
        finally:
            aug.set_compiled(previous)
        assert torch.allclose(eager.cpu(), reference, atol=1e-4), name
        assert torch.allclose(compiled.cpu(), reference, atol=1e-4), name


def _steps_never_sync(method, batches, device):
    accelerate(method, device)
    opt = method.optimizer()
    multi_tensor(opt, device)
    total = torch.zeros((), device=device)

    def step(batch):
        nonlocal total
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = method(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.detach().float()

    step(batches[0])  # cuDNN's autotuner and the first allocations may wait; later steps may not
    with no_sync():
        for batch in batches[1:]:
            step(batch)
    assert torch.isfinite(total).item()
    assert all(g["fused"] for g in opt.param_groups)


def _device_batches(n: int, b: int, device: torch.device, steps: int = 3) -> list[Batch]:
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, device=device)
    labels = torch.arange(n, device=device) % 10
    order = torch.randperm(n, device=device)
    return [Batch(idx, images[idx], labels[idx]) for idx in order[: steps * b].split(b)]


def test_augmentation_never_syncs(cuda):
    images = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8, device=cuda)
    aug.normalize(aug.augment(images, "simclr", 32, 0.2), *STATS)  # constants made once, here
    with no_sync():
        for mode in ("simclr", "crop", "none"):
            aug.normalize(aug.augment(images, mode, 32, 0.2), *STATS)
        aug.lab_views(aug.augment(images, "crop", 32, 0.2))


@pytest.mark.parametrize("method", ["moco", "cmc"])
def test_moco_and_cmc_steps_never_sync(cuda, method):
    n, b = 512, 64
    cfg = _cfg(method, batch_size=b, num_negatives=256)
    cls = MoCo if method == "moco" else CMC
    torch.manual_seed(0)
    model = cls(cfg, _info(n), losses.get("infonce"), False).to(cuda)
    _steps_never_sync(model, _device_batches(n, b, cuda), cuda)


def test_simclr_step_never_syncs(cuda):
    n, b = 512, 64
    torch.manual_seed(0)
    model = SimCLR(_cfg("simclr", batch_size=b), _info(n), losses.get("infonce"), False).to(cuda)
    _steps_never_sync(model, _device_batches(n, b, cuda), cuda)
