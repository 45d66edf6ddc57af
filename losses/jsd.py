"""The Jensen-Shannon mutual-information estimator of Deep InfoMax (Hjelm et al. 2019), which
InfoGraph (Sun et al., ICLR 2020) trains with; the graph domain's baseline.

Not a per-anchor loss: pairs are pooled over the whole batch,

    L = mean_{(a,p) positive} softplus(-logits[a,p]) + mean_{(a,n) negative} softplus(logits[a,n]) - 2·log 2

which is InfoGraph's ``E_neg - E_pos`` with ``E_pos = log 2 - softplus(-l)``, ``E_neg = softplus(l) - log 2``.
Each pair is scored on its own, from its raw logit (``scoring=LOGITS``): InfoGraph feeds it dot products with no
temperature.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses import _core
from losses._core import LOG2
from losses._layouts import layout_of
from losses._masks import Mask
from losses.checks import require
from losses.registry import LOGITS, register_loss
from losses.scores import Scores


def _softplus(x: Tensor) -> Tensor:
    """``softplus(x)`` as a new tensor. ``F.softplus`` runs a scalar ``log1p`` kernel on the CPU (about
    ten times the cost of ``exp``); there ``softplus(x) = max(x, 0) - log(sigmoid(|x|))`` uses vectorised
    kernels only (absolute error below 1e-7), in place so that one matrix is held."""
    if x.device.type not in _core.CPU_KERNELS_ON:
        return F.softplus(x)
    return x.abs().sigmoid_().log_().neg_().add_(x.clamp_min(0.0))


class _SoftplusSums(torch.autograd.Function):
    """From one read of ``x``: ``Σ_{mask} softplus(x)`` over the whole matrix, and
    ``Σ softplus(-x)`` at the flat indices ``pos_flat``. The backward writes one gradient matrix:
    ``sigmoid(x)`` on the mask (exactly 0 outside), ``-sigmoid(-x)`` added at the positives."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Mask, pos_flat: Tensor | None) -> tuple[Tensor, Tensor]:  # type: ignore[override]
        neg = mask.zero_outside_(_softplus(x)).sum()
        pos = (F.softplus(-x.reshape(-1).index_select(0, pos_flat)).sum() if pos_flat is not None
               else x.new_zeros(()))
        ctx.mask, ctx.pos_flat = mask, pos_flat
        ctx.save_for_backward(x)
        ctx.set_materialize_grads(False)
        return neg, pos

    @staticmethod
    def backward(ctx, grad_neg: Tensor | None, grad_pos: Tensor | None):  # type: ignore[override]
        (x,) = ctx.saved_tensors
        differentiable = torch.is_grad_enabled()  # create_graph: out of place, so higher orders stay right
        if grad_neg is None:
            grad_x = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        elif differentiable:
            grad_x = ctx.mask.fill_outside(torch.sigmoid(x), 0.0) * grad_neg
        else:
            grad_x = ctx.mask.zero_outside_(torch.sigmoid(x).mul_(grad_neg))
        if grad_pos is not None and ctx.pos_flat is not None:
            x_pos = x.reshape(-1).index_select(0, ctx.pos_flat)
            grad_p = -torch.sigmoid(-x_pos) * grad_pos
            if differentiable:
                grad_x = grad_x.reshape(-1).index_add(0, ctx.pos_flat, grad_p).view(x.shape)
            else:
                grad_x.view(-1).index_add_(0, ctx.pos_flat, grad_p)
        return grad_x, None, None


@register_loss("jsd", scoring=LOGITS, paper="Hjelm et al., ICLR 2019 (DIM); Sun et al., ICLR 2020 (InfoGraph)",
               summary="Jensen-Shannon MI estimator, InfoGraph's own objective")
def jsd(scores: Scores) -> Tensor:
    logits = scores.logits.float().contiguous()
    message = "jsd: the batch needs at least one positive and one negative pair"
    layout = layout_of(scores)
    if layout is not None:  # the counts and their check depend on the layout alone
        n_pos: Tensor | float = float(scores.positives[0].shape[0])
        n_neg = layout.constant("n_neg total", lambda: layout.n_neg.sum())
        require(layout.constant("jsd pairs", lambda: (n_neg > 0) & (n_pos > 0)), message)
        neg_sum, pos_sum = _SoftplusSums.apply(logits, layout.neg, layout.pos_flat)
        return pos_sum / n_pos + neg_sum / n_neg - 2.0 * LOG2
    positives = _core.find_positives(scores)
    neg = _core.negatives(scores, positives)
    n_neg = neg.count().sum()
    if positives is not None:
        anchor, cand = positives
        n_pos = float(anchor.shape[0])  # known from the shape: nothing to read
        neg_sum, pos_sum = _SoftplusSums.apply(logits, neg, anchor * logits.shape[1] + cand)
    else:  # dense positives: softplus(-x) on the whole matrix, read through pos_mask
        n_pos = scores.pos_mask.sum().float()
        neg_sum = _SoftplusSums.apply(logits, neg, None)[0]
        pos_sum = torch.where(scores.pos_mask, F.softplus(-logits), 0.0).sum()
    require((n_neg > 0) & (n_pos > 0), message)
    return pos_sum / n_pos + neg_sum / n_neg - 2.0 * LOG2
