"""``harness bench vision``: SimCLR pretraining speed (images per second) of ResNet-18 (CIFAR stem) on
32x32 random images at batch 512, through the harness code path (the SimCLR method, the shared training
loop, ``pair_scores`` and the core ``infonce``) beside a hand-written PyTorch SimCLR loop on the same
device, in the same process.

The hand-written loop is the anchor, as strong as the harness: the same network and projection head,
the same batch-wise augmentation on the device (both views, normalised), the images held on the
device and drawn in a random order, NT-Xent as one cross-entropy over the masked similarity matrix,
Adam with the same settings (fused on CUDA, foreach on the CPU), channels_last weights, bf16 autocast
where the harness uses it, and with ``torch.compile`` on the encoder, the head and the augmentation
when the harness compiles. Each rate is taken from a second pass over the data (the first warms up and
compiles), the loops alternate and each keeps its best of ``repeats``. Target: the harness within 5%
of the hand-written loop. On CUDA: float32 and bf16, each eager and compiled (``--quick``: eager only);
on the CPU: float32, eager.

One more row times the biased track (``benchmark: biased_pretrain``): the ``paper-biased`` preset
(SimpleConvNet, batch 256, eps-SupInfoNCE with FairKL, the online classifier) on random 28x28 images
with random class and bias labels, its images per second from the second epoch, and ``epoch_s``, the
time that rate gives one epoch of Biased-MNIST's 60,000 training images.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

import losses
from domains.base import RunContext
from domains.vision import augment as aug
from domains.vision.biased import Biased
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.data import CIFAR_STATS, HALF_STATS, ImageSet, VisionData
from domains.vision.models import encoder, projection_head
from domains.vision.simclr import SimCLR
from domains.vision.train import data_info, pretrain


def _random_data(n: int, device: torch.device) -> VisionData:
    """Random CIFAR-size images, on the device as the harness holds an in-memory set there."""
    images = ImageSet(torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8), torch.zeros(n, dtype=torch.long))
    return VisionData("random", images, images, images, 10, 32, *CIFAR_STATS).to(device)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


BIASED_MNIST_TRAIN = 60_000


def harness_rate(method: torch.nn.Module, device: torch.device, cfg: VisionConfig,
                 data: VisionData) -> tuple[float, bool]:
    """Images/s of the harness loop, from its second epoch (the first warms up), and whether it ran
    compiled (False where compilation failed and it fell back)."""
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(seed=0, device=device, data_root=Path(tmp), work_dir=Path(tmp), quiet=True)
        result = pretrain(method, data, cfg, ctx, device, desc="bench")
    rate = (len(data.pretrain) // cfg.batch_size) * cfg.batch_size / result.curve[-1]["seconds"]
    return rate, result.info["compiled"]


class Minimal:
    """The hand-written SimCLR loop: its network, optimizer and loss, built once per setting."""

    def __init__(self, device: torch.device, cfg: VisionConfig):
        self.device, self.cfg = device, cfg
        self.encoder = encoder("resnet18", 3, 32).to(device)
        self.head = projection_head("resnet18", cfg.proj_dim).to(device)
        cuda = device.type == "cuda"
        if cuda:
            self.encoder.to(memory_format=torch.channels_last)
            torch.backends.cudnn.benchmark = True
        if cfg.compile:
            self.encoder.compile()
            self.head.compile()
        params = [*self.encoder.parameters(), *self.head.parameters()]
        self.opt = torch.optim.Adam(params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                    **({"fused": True} if cuda else {"foreach": True}))
        b = cfg.batch_size
        self.mask = torch.eye(2 * b, dtype=torch.bool, device=device)
        self.target = torch.arange(2 * b, device=device).roll(b)  # row i's positive is row i ± b

    def step(self, x: torch.Tensor) -> torch.Tensor:
        cfg = self.cfg
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and self.device.type == "cuda"):
            views = torch.cat([aug.normalize(aug.augment(x, "simclr", 32, cfg.crop_min_scale), *CIFAR_STATS)
                               for _ in range(2)])
            z = self.head(self.encoder(views))
        z = F.normalize(z.float(), dim=1)
        logits = (z @ z.T / cfg.temperature).masked_fill(self.mask, float("-inf"))
        loss = F.cross_entropy(logits, self.target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss

    def rate(self, data: VisionData) -> float:
        """Images/s of the second of two passes over the data."""
        images, b = data.pretrain.images, self.cfg.batch_size
        previous = aug.set_compiled(self.cfg.compile)
        try:
            for _ in range(2):
                order = torch.randperm(len(images), device=images.device)
                _sync(self.device)
                t0 = time.perf_counter()
                for start in range(0, len(images) - b + 1, b):
                    loss = self.step(images[order[start:start + b]])
                loss.item()
                _sync(self.device)
                elapsed = time.perf_counter() - t0
        finally:
            aug.set_compiled(previous)
        return (len(images) // b) * b / elapsed


def biased_row(device: torch.device, quick: bool) -> dict:
    """The biased track's training speed at the ``paper-biased`` preset (bf16 autocast on CUDA, as there)."""
    batch, steps = (64, 3) if quick else (256, 30)
    n = batch * steps
    gen = torch.Generator().manual_seed(0)
    images = ImageSet(torch.randint(0, 256, (n, 3, 28, 28), dtype=torch.uint8, generator=gen),
                      torch.randint(0, 10, (n,), generator=gen), torch.randint(0, 10, (n,), generator=gen))
    data = VisionData("random-biased", images, images, images, 10, 28, *HALF_STATS).to(device)
    cfg = resolved(replace(VisionConfig(), **{**PRESETS["paper-biased"].overrides, "batch_size": batch,
                                              "epochs": 2, "num_workers": 0}), "biased", "biased-mnist")
    torch.manual_seed(0)
    method = Biased(cfg, data_info(data), losses.get("eps_supinfonce", epsilon=0.5), True).to(device)
    rate, _ = harness_rate(method, device, cfg, data)
    return {"benchmark": "biased_pretrain", "arch": cfg.arch, "image_size": 28, "batch_size": batch, "steps": steps,
            "device": str(device), "bf16": cfg.bf16 and device.type == "cuda", "loss": "eps_supinfonce+fairkl",
            "harness_images_per_s": round(rate, 2), "epoch_s": round(BIASED_MNIST_TRAIN / rate, 3)}


def run(device: torch.device, quick: bool, repeats: int = 2) -> list[dict]:
    batch, steps = (64, 3) if quick else (512, 30 if device.type == "cuda" else 20)
    data = _random_data(batch * steps, device)
    cuda = device.type == "cuda"
    settings = [(bf16, comp) for comp in ((False, True) if cuda and not quick else (False,))
                for bf16 in ((False, True) if cuda else (False,))]
    rows = []
    for bf16, comp in settings:
        cfg = resolved(replace(VisionConfig(), arch="resnet18", batch_size=batch, epochs=2, knn_every=0,
                               bf16=bf16, compile=comp, num_workers=0), "simclr", "cifar10")
        torch.manual_seed(0)
        minimal_loop = Minimal(device, cfg)
        method = SimCLR(cfg, data_info(data), losses.get("infonce"), False).to(device)
        # Alternate the two loops and keep each one's best pass: load from other processes hits both alike.
        minimal = harness = 0.0
        for _ in range(repeats):
            minimal = max(minimal, minimal_loop.rate(data))
            rate, compiled = harness_rate(method, device, cfg, data)
            harness = max(harness, rate)
        row = {"benchmark": "simclr_pretrain", "arch": "resnet18", "image_size": 32, "batch_size": batch,
               "steps": steps, "repeats": repeats, "device": str(device), "bf16": bf16, "compile": comp,
               "compiled": compiled,
               "augment": "batch-wise on the device",
               "harness_images_per_s": round(harness, 2), "minimal_images_per_s": round(minimal, 2),
               "ratio": round(harness / minimal, 4)}
        print(f"vision simclr resnet18 batch {batch} bf16={bf16} compile={comp} on {device}: harness "
              f"{harness:.1f} img/s, minimal loop {minimal:.1f} img/s, ratio {harness / minimal:.3f} (target >= 0.95)")
        rows.append(row)
    rows.append(biased_row(device, quick))
    print(f"vision biased track (paper-biased, batch {rows[-1]['batch_size']}) on {device}: "
          f"{rows[-1]['harness_images_per_s']:.1f} img/s, {rows[-1]['epoch_s']:.1f} s per Biased-MNIST epoch")
    return rows
