"""The loss entries and the layouts that the device tests run every loss on: each layout as its float32 inputs
(float leaves first, then integer tensors) and a builder of Scores from them, so that a test can build the same
Scores on another device (test_losses_gpu) or inside ``torch.compile`` (test_losses_compile)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import losses

ENTRIES = [(name, {}) for name in losses.available()] + [
    ("debiased_pos", {"aggregation": "combination"}), ("hcl", {"tau_plus": 0.5, "beta": 0.0}),
    ("eps_supcon", {"epsilon": 0.5}), ("eps_supinfonce", {"epsilon": 0.5}), ("pucl", {"alpha": 0.5, "c": 0.5}),
]
Build = Callable[[list[torch.Tensor]], losses.Scores]


def entry_id(entry: tuple[str, dict]) -> str:
    name, hparams = entry
    return "-".join([name] + [f"{k}={v}" for k, v in hparams.items()])


def hand_built(x: list[torch.Tensor]) -> losses.Scores:
    logits = x[0] @ x[1].T
    pos = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    pos[:, :3] = True
    pos[0] = False  # an anchor without positives
    neg = ~pos
    neg[:, 3] = False  # ignored entries
    labels = torch.arange(logits.shape[0], device=logits.device) % 3
    return losses.Scores(logits, pos, neg, None, None, labels, torch.arange(logits.shape[1], device=logits.device) % 3)


def layouts(t: float) -> dict[str, tuple[list[torch.Tensor], Build]]:
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
        "hand-built": ([z(10, 16), z(12, 16)], hand_built),
    }


LAYOUTS = [(name, t) for t in (0.5, 0.02) for name in layouts(t)]


def applies(entry: tuple[str, dict], scores: losses.Scores) -> bool:
    return scores.has_labels or not losses.spec(entry[0]).needs_labels


def value_and_grads(entry, inputs: list[torch.Tensor], build: Build, backend=None
                    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The loss of the layout and its gradient to the float inputs; with a ``backend``, the constructor and the
    loss through ``torch.compile`` with it, as one graph."""
    leaves = [x.requires_grad_() if x.is_floating_point() else x for x in inputs]
    loss = losses.get(entry[0], **entry[1])

    def step(*x: torch.Tensor) -> torch.Tensor:
        return loss(build(list(x)))

    if backend is not None:
        step = torch.compile(step, backend=backend, fullgraph=True, dynamic=False)
    value = step(*leaves)
    grads = torch.autograd.grad(value, [x for x in leaves if x.is_floating_point()])
    return value, list(grads)


def case(entry, layout: str, t: float):
    """The inputs and constructor of a layout; skips a supervised loss on a layout without labels."""
    inputs, build = layouts(t)[layout]
    if not applies(entry, build(inputs)):
        pytest.skip("layout without labels")
    return inputs, build
