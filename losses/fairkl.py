"""FairKL (Barbano et al., ICLR 2023, "Unbiased Supervised Contrastive Learning", Eq. 10): a
regulariser that makes the similarity distributions of bias-aligned and bias-conflicting pairs match.

Four groups of ordered pairs (i, j): PA same label & same bias, PC same label & other bias, NA other
label & same bias, NC other label & other bias.

``form="gaussian"`` (the paper's Eq. 10; the spec's definition). ``S = z zᵀ`` (cosine) over i != j;
each group is summarised by its mean μ and population variance σ² (floored at 1e-6), and with
``KL(p‖q) = ½[(σ_p² + (μ_p − μ_q)²)/σ_q² − log(σ_p²/σ_q²) − 1]``:

    moments="full":  R = KL(PA‖PC) + KL(NA‖NC)
    moments="mean":  R = (μ_PA − μ_PC)² + (μ_NA − μ_NC)²     (EnD-like ablation)

A term whose two groups are not both non-empty contributes 0. With one or two conflicting pairs
in a batch (Biased-MNIST at rho >= 0.99) σ² sits at the floor and the KL reaches 1e5 and more. It
stays finite and bounded all the same: |S| <= 1 gives σ² <= 1 and (μ_p − μ_q)² <= 4, so each KL is at
most ½[5/var_floor − log(var_floor) − 1] (2.5e6 at the spec's floor 1e-6; ``var_floor`` raises the
floor, which lowers the bound). For Biased-MNIST use ``form="authors"``, which is what reproduces them.

``form="authors"`` (what the authors ran: ``fairkl`` in EIDOSLAB/unbiased-contrastive-learning,
src/losses.py, called with temperature 1 on the L2-normalised encoder features). A bounded moment
matching penalty, kept with its quirks:

- the masks include i = j, so PA holds every self-pair (similarity 1);
- ``μ_G = Σ S·mask_G / max(count_G, 1)`` (an empty group has mean 0, no branch on the host);
- ``sd_G = std(S·mask_G)``: the unbiased std over all B² entries of the masked matrix, the zeros
  outside the group included, so it measures the group's size as much as its spread;
- ``R = (μ_PC − μ_PA)² + (μ_NA − μ_NC)² + kld·[(sd_PA − sd_PC)² + (sd_NA − sd_NC)²] − μ_PC + μ_NA``:
  the last two terms pull conflicting positives together and push aligned negatives apart.

Every term is bounded (|S| <= 1): ``|R| <= 10 + 2·kld`` (up to the std's Bessel factor). Train with
``alpha·L + lambda·R``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.checks import require
from losses.registry import HParam, register_loss

MOMENTS = HParam("moments", "full", choices=("full", "mean"))
FORM = HParam("form", "gaussian", choices=("gaussian", "authors"))
KLD = HParam("kld", 1.0, low=0.0)
VAR_FLOOR = HParam("var_floor", 1e-6, low=0.0, low_open=True, high=1.0)


def _moments(sim: Tensor, mask: Tensor, var_floor: float) -> tuple[Tensor, Tensor, Tensor]:
    """Mean and floored population variance of ``sim`` over ``mask``, and whether the group has a pair.
    Computed on the device with no branch on the host (an empty group gives mean 0, variance 1)."""
    count = mask.sum()
    present = count > 0
    n = count.clamp_min(1)
    mean = (sim * mask).sum() / n
    var = (((sim - mean) ** 2) * mask).sum() / n
    return mean, torch.where(present, var.clamp_min(var_floor), torch.ones_like(var)), present


def _gaussian_kl(mu_p: Tensor, var_p: Tensor, mu_q: Tensor, var_q: Tensor) -> Tensor:
    return 0.5 * ((var_p + (mu_p - mu_q) ** 2) / var_q - torch.log(var_p / var_q) - 1.0)


def _gaussian(sim: Tensor, same_label: Tensor, same_bias: Tensor, moments: str, var_floor: float) -> Tensor:
    not_self = ~torch.eye(sim.shape[0], dtype=torch.bool, device=sim.device)
    total = sim.new_zeros(())
    for label_group in (same_label, ~same_label):
        mu_a, var_a, has_a = _moments(sim, label_group & same_bias & not_self, var_floor)
        mu_c, var_c, has_c = _moments(sim, label_group & ~same_bias & not_self, var_floor)
        if moments == "full":
            term = _gaussian_kl(mu_a, var_a, mu_c, var_c)
        else:
            term = (mu_a - mu_c) ** 2
        # a term whose two groups are not both non-empty contributes 0 (where, not an if: no host sync)
        total = total + torch.where(has_a & has_c, term, torch.zeros_like(term))
    return total


def _authors(sim: Tensor, same_label: Tensor, same_bias: Tensor, kld: float) -> Tensor:
    def stats(mask: Tensor) -> tuple[Tensor, Tensor]:
        masked = sim * mask
        # clamp_min on a tensor, not max() on the host: no device sync per step
        return masked.sum() / mask.sum().clamp_min(1), masked.std()

    mu_pa, sd_pa = stats(same_label & same_bias)
    mu_pc, sd_pc = stats(same_label & ~same_bias)
    mu_na, sd_na = stats(~same_label & same_bias)
    mu_nc, sd_nc = stats(~same_label & ~same_bias)
    mu_term = (mu_pc - mu_pa) ** 2 + (mu_na - mu_nc) ** 2
    sd_term = (sd_pa - sd_pc) ** 2 + (sd_na - sd_nc) ** 2
    return mu_term + kld * sd_term - mu_pc + mu_na


@register_loss("fairkl", hparams=(MOMENTS, FORM, KLD, VAR_FLOOR), needs_labels=True, scoring=None, positives=None,
               objective=False, paper="Barbano et al., ICLR 2023, Unbiased Supervised Contrastive Learning, Eq. 10",
               summary="regulariser: bias-aligned and bias-conflicting pairs' similarities made alike")
def fairkl(z: Tensor, labels: Tensor, bias_labels: Tensor, moments: str = "full", form: str = "gaussian",
           kld: float = 1.0, var_floor: float = 1e-6) -> Tensor:
    """The FairKL regulariser on embeddings ``z [B, d]`` (normalised inside), with class ``labels`` and
    ``bias_labels`` [B]. ``moments`` and ``var_floor`` belong to the Gaussian form; ``kld`` weighs the authors'
    form's std term. Not a training objective (``objective=False``): it is added to one,
    ``losses.get("fairkl", ...)(z, labels, bias_labels)``."""
    if not isinstance(z, Tensor) or z.dim() != 2:
        raise ValueError(f"z must be a 2-D tensor [B, d], got {getattr(z, 'shape', type(z))}")
    for name, lab in (("labels", labels), ("bias_labels", bias_labels)):
        if not isinstance(lab, Tensor) or lab.dim() != 1 or lab.shape[0] != z.shape[0]:
            raise ValueError(f"{name} must be a 1-D tensor of {z.shape[0]} ids, got {getattr(lab, 'shape', lab)}")
    require(torch.isfinite(z).all(), "fairkl: z contains NaN or infinite values")  # queued on CUDA, no sync
    z = F.normalize(z.float(), dim=1)
    sim = z @ z.T
    same_label = labels[:, None] == labels[None, :]
    same_bias = bias_labels[:, None] == bias_labels[None, :]
    if form == "authors":
        return _authors(sim, same_label, same_bias, kld)
    return _gaussian(sim, same_label, same_bias, moments, var_floor)
