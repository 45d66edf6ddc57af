"""Shared, vectorised building blocks of the losses: positive pairs, masked log-sum-exps, the
debiased negative term, and the reduction over anchors. No Python loop touches anchors or
candidates; positives are handled as a list of (anchor, candidate) index pairs, so the work on
them is O(number of positives), not O(A·K)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from losses.scores import Scores


@dataclass(frozen=True)
class Prepared:
    """Float32 logits and the per-row counts and index lists the losses share."""

    logits: Tensor  # float32 [A, K]
    anchor: Tensor  # long [P]: anchor of each positive pair
    pos_logit: Tensor  # float32 [P]
    n_pos: Tensor  # float32 [A]: M_a
    n_neg: Tensor  # float32 [A]: N_a
    log_floor: Tensor  # float32 [A]: log of the floor (detached)


def true_entries(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column of every True entry of a bool matrix, in row-major order: ``mask.nonzero``.

    Positives are sparse, and ``nonzero`` over a large bool matrix is slow on the CPU; reading the
    mask as 64-bit words (8 entries each), finding the nonzero words, and expanding only those is
    several times faster."""
    flat = mask.reshape(-1)
    if mask.device.type != "cpu" or flat.numel() % 8 or flat.storage_offset() % 8:
        return mask.nonzero(as_tuple=True)
    words = flat.view(torch.int64).nonzero().squeeze(1)
    cells = (words[:, None] * 8 + torch.arange(8)).reshape(-1)
    index = cells[flat[cells]]
    return index // mask.shape[1], index % mask.shape[1]


def prepare(scores: Scores) -> Prepared:
    logits = scores.logits.float()
    anchor, cand = true_entries(scores.pos_mask)
    if scores.min_logit is not None:
        log_floor = logits.new_full((logits.shape[0],), float(scores.min_logit))
    else:
        log_floor = logits.detach().amin(dim=1)
    return Prepared(
        logits=logits,
        anchor=anchor,
        pos_logit=logits[anchor, cand],
        # Counted from the positive pairs already found, and in int32 for the negatives: summing a
        # bool matrix plainly first copies it to int64.
        n_pos=torch.bincount(anchor, minlength=logits.shape[0]).float(),
        n_neg=scores.neg_mask.sum(dim=1, dtype=torch.int32).float(),
        log_floor=log_floor,
    )


class _MaskedLogSumExp(torch.autograd.Function):
    """For each ``s > 0`` of ``scales``, ``(s·x).masked_fill(~mask, -inf).logsumexp(1)``, stacked
    ``[S, A]``: the same values in fewer passes over the matrix. The mask is applied once for every
    scale; the backward reuses the forward's exponentials (their softmax over the mask times the
    incoming gradient) instead of recomputing them, and entries outside the mask get an exact 0.
    Under ``create_graph=True`` the backward recomputes the same gradient from differentiable
    operations instead, so that higher-order gradients stay right."""

    @staticmethod
    def forward(ctx, x: Tensor, mask: Tensor, scales: tuple[float, ...]) -> Tensor:  # type: ignore[override]
        masked = torch.where(mask, x, float("-inf"))
        row_max = masked.amax(dim=1, keepdim=True)
        row_max.masked_fill_(~torch.isfinite(row_max), 0.0)  # a row with no entry stays all -inf
        centred = masked.sub_(row_max)  # <= 0 on the mask, so s·centred is shifted by its row max too
        results, saved = [], []
        for i, scale in enumerate(scales):
            last = i == len(scales) - 1  # the last scale may overwrite the centred matrix
            if scale == 1.0:
                exps = centred.exp_() if last else centred.exp()
            else:
                exps = (centred.mul_(scale) if last else centred * scale).exp_()
            total = exps.sum(dim=1)
            results.append(total.log() + scale * row_max.squeeze(1))
            saved += [exps, total]
        result = torch.stack(results)
        ctx.scales = scales
        ctx.save_for_backward(x, mask, result, *saved)
        return result

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        x, mask, result, *saved = ctx.saved_tensors
        grad_x = None
        for i, scale in enumerate(ctx.scales):
            if torch.is_grad_enabled():  # create_graph: softmax over the mask, from the inputs
                lse = torch.where(torch.isfinite(result[i]), result[i], torch.zeros_like(result[i]))
                exps = torch.exp(torch.where(mask, scale * x - lse[:, None], float("-inf")))
                term = exps * (scale * grad[i])[:, None]
                grad_x = term if grad_x is None else grad_x + term
                continue
            exps, total = saved[2 * i], saved[2 * i + 1]
            # An empty row gets 0, not 0/0.
            coef = torch.where(total > 0, grad[i] * scale / total, torch.zeros_like(total))[:, None]
            grad_x = exps * coef if grad_x is None else grad_x.addcmul_(exps, coef)
        return grad_x, None, None


def masked_logsumexps(logits: Tensor, mask: Tensor, scales: tuple[float, ...]) -> list[Tensor]:
    """Row-wise ``log Σ_{k∈mask} exp(s·logits)`` for each ``s >= 0`` of ``scales`` ([A] each; -inf for
    an empty row), with one masking pass for all of them."""
    positive = tuple(s for s in scales if s != 0.0)
    stacked = iter(_MaskedLogSumExp.apply(logits, mask, positive) if positive else ())
    # With s = 0 every entry of the mask contributes exp(0) = 1: the log of the count.
    return [next(stacked) if s != 0.0 else torch.log(mask.sum(dim=1, dtype=torch.int32).float()) for s in scales]


def masked_logsumexp(logits: Tensor, mask: Tensor, scale: float = 1.0) -> Tensor:
    """Row-wise ``log Σ_{k∈mask} exp(scale·logits)`` for ``scale >= 0``; -inf for an empty row."""
    return masked_logsumexps(logits, mask, (scale,))[0]


def per_anchor_mean(per_pair: Tensor, p: Prepared) -> Tensor:
    """Mean of a per-positive-pair quantity over each anchor's positives ([A]; 0 without positives)."""
    total = per_pair.new_zeros(p.n_pos.shape[0]).index_add(0, p.anchor, per_pair)
    return total / p.n_pos.clamp_min(1.0)


def log_pos_mean(p: Prepared) -> Tensor:
    """``log pos_mean_a`` for every anchor (-inf without positives)."""
    shift = torch.zeros_like(p.n_pos).scatter_reduce(0, p.anchor, p.pos_logit.detach(), "amax",
                                                     include_self=False)
    sums = torch.zeros_like(p.n_pos).index_add(0, p.anchor, torch.exp(p.pos_logit - shift[p.anchor]))
    has_pos = p.n_pos > 0
    # Rows without positives get 0 (a placeholder the callers mask out), never log(0).
    safe = torch.where(has_pos, sums / p.n_pos.clamp_min(1.0), torch.ones_like(sums))
    return torch.log(safe) + shift


def debiased_log_negative(log_neg_mean: Tensor, log_pos_mean_: Tensor, p: Prepared,
                          neg_coef: float, pos_coef: float) -> Tensor:
    """``log max(neg_coef·neg_mean - pos_coef·pos_mean, floor)`` per anchor, stably.

    Computed relative to ``log neg_mean`` so nothing overflows, and the log is only ever taken of a
    quantity proven positive: where the estimate falls below the floor, the floor is used and no
    gradient flows (as the ``max`` of the paper's formula)."""
    log_ratio = log_pos_mean_ - log_neg_mean  # log(pos_mean / neg_mean)
    if pos_coef > 0:
        # Past log(neg_coef/pos_coef) the estimate is negative and the floor wins anyway; capping
        # the exponent there keeps exp finite (an inf would turn the zero gradient into NaN).
        log_ratio = log_ratio.clamp_max(math.log(neg_coef / pos_coef) + 1.0)
    ratio = torch.exp(log_ratio)
    est = neg_coef - pos_coef * ratio  # (neg_coef·neg_mean - pos_coef·pos_mean) / neg_mean
    floor_rel = torch.exp(p.log_floor - log_neg_mean.detach())
    above = est > floor_rel
    log_est = torch.log(torch.where(above, est, torch.ones_like(est))) + log_neg_mean
    return torch.where(above, log_est, p.log_floor)


def contrast_with_negative_term(p: Prepared, log_neg_term: Tensor) -> Tensor:
    """Per-anchor mean over positives of ``-log( e_ap / (e_ap + exp(log_neg_term_a)) )``."""
    per_pair = torch.logaddexp(p.pos_logit, log_neg_term[p.anchor]) - p.pos_logit
    return per_anchor_mean(per_pair, p)


def reduce_anchors(per_anchor: Tensor, valid: Tensor, loss: str, needs: str) -> Tensor:
    """Mean of ``per_anchor`` over the anchors that qualify; ValueError if none does."""
    if not bool(valid.any()):
        raise ValueError(f"{loss}: no anchor has {needs}, so the loss is undefined")
    return per_anchor[valid].mean()


def debiased_loss(scores: Scores, name: str, log_neg_mean_fn, neg_coef: float, pos_coef: float) -> Tensor:
    """The family of DCL, HCL and PUCL: ``-log(e_ap / (e_ap + N_a·g_a))`` with
    ``g_a = max(neg_coef·r_a - pos_coef·pos_mean_a, floor)``, ``r_a`` the (possibly reweighted)
    negative mean given in log form by ``log_neg_mean_fn(prepared, scores)``."""
    p = prepare(scores)
    log_r = log_neg_mean_fn(p, scores)
    valid = (p.n_pos > 0) & (p.n_neg > 0)
    zeros = torch.zeros_like(log_r)
    log_g = debiased_log_negative(torch.where(valid, log_r, zeros), torch.where(valid, log_pos_mean(p), zeros),
                                  p, neg_coef, pos_coef)
    log_ng = torch.log(p.n_neg.clamp_min(1.0)) + log_g
    return reduce_anchors(contrast_with_negative_term(p, log_ng), valid, name,
                          "both a positive and a negative")


def log_neg_mean(p: Prepared, scores: Scores) -> Tensor:
    """``log neg_mean_a``: the plain mean of the negatives' exponentiated logits."""
    return masked_logsumexp(p.logits, scores.neg_mask) - torch.log(p.n_neg.clamp_min(1.0))


LOG2 = math.log(2.0)
