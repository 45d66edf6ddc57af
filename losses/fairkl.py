"""FairKL (Barbano et al., ICLR 2023, "Unbiased Supervised Contrastive Learning", Eq. 10): a
regulariser that makes the similarity distributions of bias-aligned and bias-conflicting pairs match.

With ``S = z zᵀ`` (cosine) over ordered pairs i != j, four groups: PA same label & same bias,
PC same label & other bias, NA other label & same bias, NC other label & other bias. Each group
is summarised by its mean μ and population variance σ² (floored at 1e-6), and with
``KL(p‖q) = ½[(σ_p² + (μ_p − μ_q)²)/σ_q² − log(σ_p²/σ_q²) − 1]``:

    moments="full":  R = KL(PA‖PC) + KL(NA‖NC)
    moments="mean":  R = (μ_PA − μ_PC)² + (μ_NA − μ_NC)²     (EnD-like ablation)

A term whose two groups are not both non-empty contributes 0. Train with ``alpha·L + lambda·R``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.registry import HParam

MOMENTS = HParam("moments", "full", choices=("full", "mean"))
VAR_FLOOR = 1e-6


def _moments(sim: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, bool]:
    count = mask.sum()
    if int(count) == 0:
        return sim.new_zeros(()), sim.new_ones(()), False
    mean = (sim * mask).sum() / count
    var = (((sim - mean) ** 2) * mask).sum() / count
    return mean, var.clamp_min(VAR_FLOOR), True


def _gaussian_kl(mu_p: Tensor, var_p: Tensor, mu_q: Tensor, var_q: Tensor) -> Tensor:
    return 0.5 * ((var_p + (mu_p - mu_q) ** 2) / var_q - torch.log(var_p / var_q) - 1.0)


def fairkl(z: Tensor, labels: Tensor, bias_labels: Tensor, moments: str = "full") -> Tensor:
    """The FairKL regulariser on embeddings ``z [B, d]`` (normalised inside)."""
    moments = MOMENTS.check(moments)
    if not isinstance(z, Tensor) or z.dim() != 2:
        raise ValueError(f"z must be a 2-D tensor [B, d], got {getattr(z, 'shape', type(z))}")
    for name, lab in (("labels", labels), ("bias_labels", bias_labels)):
        if not isinstance(lab, Tensor) or lab.dim() != 1 or lab.shape[0] != z.shape[0]:
            raise ValueError(f"{name} must be a 1-D tensor of {z.shape[0]} ids, got {getattr(lab, 'shape', lab)}")
    z = F.normalize(z.float(), dim=1)
    sim = z @ z.T
    not_self = ~torch.eye(z.shape[0], dtype=torch.bool, device=z.device)
    same_label = labels[:, None] == labels[None, :]
    same_bias = bias_labels[:, None] == bias_labels[None, :]
    total = sim.new_zeros(())
    for label_group in (same_label, ~same_label):
        aligned = _moments(sim, label_group & same_bias & not_self)
        conflicting = _moments(sim, label_group & ~same_bias & not_self)
        if not (aligned[2] and conflicting[2]):
            continue
        if moments == "full":
            total = total + _gaussian_kl(aligned[0], aligned[1], conflicting[0], conflicting[1])
        else:
            total = total + (aligned[0] - conflicting[0]) ** 2
    return total
