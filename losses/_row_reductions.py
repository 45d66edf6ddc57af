"""The masked row reductions of the loss core: one autograd function (:class:`_RowReductions`) reads the logits
for the masked log-sum-exps at every scale and for the positive logits, and writes one gradient matrix
(:func:`row_logsumexps` calls it)."""

from __future__ import annotations

import torch
from torch import Tensor

from losses._masks import Mask

EXP_LIMIT = 40.0
"""Where every ``|s·logit|`` is known to stay below this, ``exp(s·logit)`` is taken without a shift:
e^40 times 10^9 entries is far below float32's range, e^-40 far above its smallest normal number."""


class _RowReductions(torch.autograd.Function):
    """From one read of ``x``: for each ``s > 0`` of ``scales`` the row-wise
    ``log Σ_{k∈mask} exp(s·x)`` (one ``[A]`` output per scale; -inf for an empty row), and ``x`` at the
    flat indices ``pos_flat`` (the positive logits). The backward writes a single gradient matrix: the
    softmax over the mask of each scale times its incoming gradient (from the forward's saved
    exponentials, exactly 0 outside the mask), plus the positives' gradients added at their indices.

    ``bounded``: every ``|s·x|`` is below EXP_LIMIT, so ``exp(s·x)`` needs no shift (no row maximum,
    no masked copy). Otherwise each row is shifted by its maximum over the mask. Under
    ``create_graph=True`` the backward recomputes the same gradient from differentiable operations,
    so that higher-order gradients stay right."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Mask, scales: tuple[float, ...], pos_flat: Tensor | None,  # type: ignore[override]
                bounded: bool) -> tuple[Tensor, ...]:
        results, saved = [], []
        if bounded and scales:
            # Only the smallest scale's exponentials are kept for the backward (see there): one [A, K] matrix,
            # whatever the number of scales. The other scales' sums read it too, as exp(s·x) = exp(s0·x)·exp((s -
            # s0)·x): it holds the mask's zeros already, so they need no scatter of their own, and a compiled step
            # fuses each product into its sum instead of writing one more [A, K] matrix.
            smallest = min(scales)
            kept = mask.zero_outside_(torch.exp(x) if smallest == 1.0 else (x * smallest).exp_())
            for scale in scales:
                step = scale - smallest
                if step == 0.0:
                    total = kept.sum(dim=1)
                elif step == smallest:  # exp(step·x) is the kept matrix itself
                    total = (kept * kept).sum(dim=1)
                else:
                    total = (torch.exp(x) if step == 1.0 else (x * step).exp_()).mul_(kept).sum(dim=1)
                results.append(total.log())
                saved += [kept if step == 0.0 else None, total]
        elif scales:
            masked = mask.fill_outside(x, float("-inf"))
            row_max = masked.amax(dim=1, keepdim=True)
            row_max.masked_fill_(~torch.isfinite(row_max), 0.0)  # a row with no entry stays all -inf
            centred = masked.sub_(row_max)  # <= 0 on the mask, so s·centred is shifted by its row max too
            for i, scale in enumerate(scales):
                last = i == len(scales) - 1  # the last scale may overwrite the centred matrix
                if scale == 1.0:
                    exps = centred.exp_() if last else centred.exp()
                else:
                    exps = (centred.mul_(scale) if last else centred * scale).exp_()
                total = exps.sum(dim=1)
                results.append(total.log() + scale * row_max.squeeze(1))
                saved += [exps, total]
        pos = x.reshape(-1).index_select(0, pos_flat) if pos_flat is not None else x.new_zeros(0)
        ctx.mask, ctx.scales, ctx.pos_flat, ctx.bounded = mask, scales, pos_flat, bounded
        ctx.save_for_backward(x, *results, *saved)
        ctx.set_materialize_grads(False)
        return (*results, pos)

    @staticmethod
    def backward(ctx, *grads: Tensor | None):  # type: ignore[override]
        x, *rest = ctx.saved_tensors
        n_scales = len(ctx.scales)
        lses, saved = rest[:n_scales], rest[n_scales:]
        *grad_lses, grad_pos = grads
        differentiable = torch.is_grad_enabled()  # create_graph
        grad_x = None
        coefs: list[tuple[float, Tensor, Tensor | None]] = []  # (scale, coefficient [A], kept exponentials)
        for i, (scale, grad_lse) in enumerate(zip(ctx.scales, grad_lses)):
            if grad_lse is None:
                continue
            if differentiable:  # softmax over the mask, recomputed from the inputs
                row = torch.where(torch.isfinite(lses[i]), lses[i], torch.zeros_like(lses[i]))
                term = ctx.mask.fill_outside(scale * x - row[:, None], float("-inf")).exp() \
                    * (scale * grad_lse)[:, None]
                grad_x = term if grad_x is None else grad_x + term
                continue
            exps, total = saved[2 * i], saved[2 * i + 1]
            # A row with an entry sums to at least e^-EXP_LIMIT (bounded) or 1 (shifted), far above the
            # smallest normal number; an empty row holds only zeros, which the clamp keeps from 0/0.
            coef = (grad_lse if scale == 1.0 else grad_lse * scale) / total.clamp_min(torch.finfo(total.dtype).tiny)
            coefs.append((scale, coef, exps))
        if coefs and ctx.bounded:
            grad_x = _bounded_softmax_sum(x, ctx.scales, saved, coefs)
        else:  # every scale's exponentials were kept
            for _, coef, exps in coefs:
                grad_x = exps * coef[:, None] if grad_x is None else grad_x.addcmul_(exps, coef[:, None])
        if grad_pos is not None and ctx.pos_flat is not None:
            if grad_x is None:
                grad_x = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
            if differentiable:
                grad_x = grad_x.reshape(-1).index_add(0, ctx.pos_flat, grad_pos).view(x.shape)
            else:
                grad_x.view(-1).index_add_(0, ctx.pos_flat, grad_pos)
        return grad_x, None, None, None, None


def _bounded_softmax_sum(x: Tensor, scales: tuple[float, ...], saved: list[Tensor | None],
                         coefs: list[tuple[float, Tensor, Tensor | None]]) -> Tensor:
    """``Σ_s c_s·exp(s·x)`` over the mask from the one matrix the bounded forward kept, that of the smallest scale
    s0: ``exp(s0·x)·(c_s0 + Σ_{s > s0} c_s·exp((s - s0)·x))``. Every exponent stays below EXP_LIMIT, and the
    product is 0 outside the mask, as the kept matrix is. For HCL's two scales: one [A, K] matrix fewer held from
    the forward to the backward (4 GiB at B = 16384), for two more elementwise passes."""
    smallest = min(scales)
    kept = saved[2 * scales.index(smallest)]
    own = [coef for scale, coef, _ in coefs if scale == smallest]  # the smallest scale's coefficient, if any
    factor = None
    for scale, coef, _ in coefs:
        if scale != smallest:
            step = scale - smallest
            term = (torch.exp(x) if step == 1.0 else (x * step).exp_()).mul_(coef[:, None])
            factor = term if factor is None else factor.add_(term)
    if factor is None:
        return kept * own[0][:, None]
    if own:
        factor.add_(own[0][:, None])
    return factor.mul_(kept)


def row_logsumexps(logits: Tensor, mask: Mask, scales: tuple[float, ...], *, bounded: bool = False,
                   pos_flat: Tensor | None = None, count: Tensor | None = None) -> tuple[list[Tensor], Tensor]:
    """Row-wise ``log Σ_{k∈mask} exp(s·logits)`` for each ``s >= 0`` of ``scales`` ([A] each; -inf
    for an empty row), and the logits at ``pos_flat``, in one pass (see :class:`_RowReductions`).
    ``count``: the mask's entries per row, where already known."""
    positive = tuple(s for s in scales if s != 0.0)
    *lses, pos = _RowReductions.apply(logits, mask, positive, pos_flat, bounded)
    rows = iter(lses)
    # With s = 0 every entry of the mask contributes exp(0) = 1: the log of the count.
    return [next(rows) if s != 0.0 else torch.log(mask.count() if count is None else count) for s in scales], pos
