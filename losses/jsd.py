"""The Jensen-Shannon mutual-information estimator of Deep InfoMax (Hjelm et al. 2019), which
InfoGraph (Sun et al., ICLR 2020) trains with; the graph domain's baseline.

Not a per-anchor loss: pairs are pooled over the whole batch,

    L = mean_{(a,p) positive} softplus(-logits[a,p]) + mean_{(a,n) negative} softplus(logits[a,n]) - 2·log 2

which is InfoGraph's ``E_neg - E_pos`` with ``E_pos = log 2 - softplus(-l)``, ``E_neg = softplus(l) - log 2``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses._core import LOG2, prepare, true_entries
from losses.registry import LossSpec, register
from losses.scores import Scores


class _MaskedSoftplusSum(torch.autograd.Function):
    """``Σ_{mask} softplus(x)`` over the whole matrix. ``F.softplus`` runs a scalar ``log1p`` kernel
    on the CPU (about ten times the cost of ``exp``); ``softplus(x) = max(x, 0) - log(sigmoid(|x|))``
    uses vectorised kernels only (absolute error below 1e-7), and its gradient is ``sigmoid(x)``.
    The entries outside the mask (usually few: the positives, the anchor itself) are zeroed in place by
    index rather than by a masked pass over the whole matrix."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor) -> Tensor:  # type: ignore[override]
        outside = true_entries(~mask)
        ctx.save_for_backward(x, *outside)
        softplus = x.abs().sigmoid_().log_().neg_().add_(x.clamp_min(0.0))  # in place: one matrix held
        softplus[outside] = 0.0
        return softplus.sum()

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, *outside = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph: out of place, so higher-order gradients stay right
            return (torch.sigmoid(x) * grad).index_put(tuple(outside), x.new_zeros(())), None
        grad_x = torch.sigmoid(x).mul_(grad)
        grad_x[tuple(outside)] = 0.0
        return grad_x, None


def jsd(scores: Scores) -> Tensor:
    p = prepare(scores)
    n_neg = p.n_neg.sum()
    if p.pos_logit.numel() == 0 or int(n_neg) == 0:
        raise ValueError("jsd: the batch needs at least one positive and one negative pair")
    neg_term = _MaskedSoftplusSum.apply(p.logits, scores.neg_mask) / n_neg
    return F.softplus(-p.pos_logit).mean() + neg_term - 2.0 * LOG2


register(LossSpec("jsd", jsd, paper="Hjelm et al., ICLR 2019 (DIM); Sun et al., ICLR 2020 (InfoGraph)",
                  summary="Jensen-Shannon MI estimator, InfoGraph's own objective"))
