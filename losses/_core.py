"""Shared, vectorised building blocks of the losses: positive pairs, masked log-sum-exps, the
debiased negative term, and the reduction over anchors. Its parts live beside it: the masks in
``losses._masks``, the masked row reductions in ``losses._row_reductions``, the cached layouts in
``losses._layouts``.

Nothing here synchronises the host with a CUDA device: no ``nonzero``, no boolean indexing, no
``.item()``, every shape known from the inputs' shapes alone, and value checks queued (``checks``).
Positives are a list of (anchor, candidate) pairs where it is known without reading data (the
constructors give it; on the CPU ``nonzero`` is free), so the work on them is O(P); otherwise
(``label_scores`` or hand-built Scores on CUDA) the per-pair terms are computed on the whole
matrix and read through ``pos_mask``. One autograd function (``losses._row_reductions``) reads the
logits for the masked log-sum-exps and the positive logits, and writes one gradient matrix.

At the batch sizes of training (B = 512) a step on a GPU is bound by kernel launches, not by arithmetic,
so the core launches as few kernels as it can (``losses.benchmark`` counts them): what depends on the
layout alone (the constructors' index lists, the counts of positives and negatives, the anchors that
qualify) is built once per layout and kept (``losses._layouts``), a layout whose anchors all have the
same number of positives listed in order (``Scores.positives_per_anchor``) reaches its pairs by
reshapes, and the value checks of a step are folded into one queued assertion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses import checks
from losses._layouts import Layout, layout_of
from losses._masks import Mask, per_row, true_entries
from losses._row_reductions import EXP_LIMIT, row_logsumexps
from losses.checks import NonFiniteError, reads_values_now, require
from losses.scores import Entries, Scores

T = TypeVar("T")


PAIRS_FROM_MASK_ON = frozenset({"cpu"})
"""Devices where the positives are found from ``pos_mask`` by ``nonzero`` (it synchronises elsewhere)."""

CPU_KERNELS_ON = frozenset({"cpu"})
"""Devices where a loss may trade one kernel for several that are faster on a CPU."""


@contextmanager
def accelerator_path() -> Iterator[None]:
    """Inside, the CPU takes the path of an accelerator: positives never found by ``nonzero``, no kernel
    picked for the CPU, and value checks queued (``torch._assert_async``) instead of read. The same
    operations are dispatched as on a GPU, so that ``losses.benchmark`` counts them on any machine."""
    global PAIRS_FROM_MASK_ON, CPU_KERNELS_ON
    saved = PAIRS_FROM_MASK_ON, CPU_KERNELS_ON, checks.READS_VALUES_ON
    PAIRS_FROM_MASK_ON = CPU_KERNELS_ON = checks.READS_VALUES_ON = frozenset()
    try:
        yield
    finally:
        PAIRS_FROM_MASK_ON, CPU_KERNELS_ON, checks.READS_VALUES_ON = saved


def find_positives(scores: Scores) -> Entries | None:
    """(anchor, candidate) of every positive, or None where finding them would synchronise with the
    device (the losses then work on the dense ``pos_mask``)."""
    if scores.positives is not None:
        return scores.positives
    if scores.logits.device.type in PAIRS_FROM_MASK_ON and not torch.compiler.is_compiling():
        return true_entries(scores.pos_mask)  # (a graph's shapes cannot depend on the mask's values)
    return None


def negatives(scores: Scores, positives: Entries | None) -> Mask:
    layout = layout_of(scores)
    if layout is not None:
        return layout.neg
    shape = tuple(scores.logits.shape)
    if positives is not None and scores.ignored is not None:
        return Mask.excluding(shape, positives, scores.ignored)
    return Mask(shape, dense=scores.neg_mask)


def positives_or_negatives(scores: Scores) -> Mask:
    """``pos_mask | neg_mask``: every entry but the ignored ones."""
    layout = layout_of(scores)
    if layout is not None:
        return layout.kept
    shape = tuple(scores.logits.shape)
    if scores.ignored is not None:
        return Mask.excluding(shape, scores.ignored)
    return Mask(shape, dense=scores.pos_mask | scores.neg_mask)


@dataclass(frozen=True)
class Prepared:
    """Float32 logits, the requested log-sum-exps, and the positives, as pairs or dense.

    With pairs, ``pos_logit`` is ``[P]`` and a per-anchor quantity reaches the pairs by ``row``;
    dense, ``pos_logit`` is the whole ``[A, K]`` logits matrix, read only where ``pos_mask`` is set,
    and ``row`` broadcasts along the candidates. Either way a per-pair expression reads the same.
    ``per_anchor``: every anchor has exactly this many positives, listed anchor by anchor (then the pairs
    are an ``[A, per_anchor]`` matrix and ``row`` / ``per_anchor_sum`` are reshapes)."""

    logits: Tensor  # float32 [A, K]
    lse: list[Tensor]  # [A] each: the log-sum-exps over the mask, one per requested scale
    pos_logit: Tensor  # float32 [P], or [A, K] when dense
    anchor: Tensor | None  # long [P]: anchor of each positive pair; None when dense
    per_anchor: int | None
    pos_mask: Tensor
    n_pos: Tensor  # float32 [A]: M_a
    n_neg: Tensor  # float32 [A]: N_a
    log_floor: Tensor | float  # log of the floor: a number where min_logit is known, else [A] (detached)
    bounded: bool  # |logits| < EXP_LIMIT is known
    layout: Layout | None = None  # where the Scores have one

    def constant(self, name: str, make: Callable[[], T]) -> T:
        """``make()``, which depends on the layout alone (the counts, the masks): computed once per layout
        and kept with it (``name`` says what it is), or every call for Scores without a layout."""
        return make() if self.layout is None else self.layout.constant(name, make)

    def row(self, per_anchor: Tensor) -> Tensor:
        """A per-anchor quantity at every positive pair."""
        if self.anchor is None:
            return per_anchor[:, None]
        if self.per_anchor == 1:
            return per_anchor
        if self.per_anchor is not None:
            return per_anchor[:, None].expand(-1, self.per_anchor).reshape(-1)
        return per_anchor.index_select(0, self.anchor)

    def per_anchor_sum(self, per_pair: Tensor) -> Tensor:
        if self.anchor is None:
            return torch.where(self.pos_mask, per_pair, 0.0).sum(dim=1)
        if self.per_anchor == 1:
            return per_pair
        if self.per_anchor is not None:
            return per_pair.view(-1, self.per_anchor).sum(dim=1)
        return per_pair.new_zeros(self.n_pos.shape[0]).index_add(0, self.anchor, per_pair)

    def per_anchor_mean(self, per_pair: Tensor) -> Tensor:
        """Mean of a per-positive-pair quantity over each anchor's positives ([A]; 0 without positives)."""
        if self.per_anchor is not None and self.anchor is not None:  # M_a = per_anchor for every anchor
            return per_pair if self.per_anchor == 1 else self.per_anchor_sum(per_pair) / float(self.per_anchor)
        return self.per_anchor_sum(per_pair) / self.constant("n_pos>=1", lambda: self.n_pos.clamp_min(1.0))

    def log_pos_sum(self) -> Tensor:
        """``log Σ_{p∈P_a} e_ap`` per anchor (-inf without positives, with no NaN in its gradient)."""
        if self.anchor is None:
            return row_logsumexps(self.logits, Mask(tuple(self.logits.shape), dense=self.pos_mask), (1.0,),
                                  bounded=self.bounded)[0][0]
        if self.per_anchor == 1:  # log e_ap
            return self.pos_logit
        if self.per_anchor is not None:  # every anchor has positives: a row-wise log-sum-exp of [A, M]
            pairs = self.pos_logit.view(-1, self.per_anchor)
            shift = pairs.detach().amax(dim=1)
            return torch.exp(pairs - shift[:, None]).sum(dim=1).log() + shift
        has_pos = self.constant("n_pos>0", lambda: self.n_pos > 0)
        shift = torch.zeros_like(self.n_pos).scatter_reduce(0, self.anchor, self.pos_logit.detach(), "amax",
                                                            include_self=False)
        sums = self.per_anchor_sum(torch.exp(self.pos_logit - self.row(shift)))
        # Rows without positives take log(1) in the branch that is not used, never log(0).
        safe = torch.where(has_pos, sums, 1.0)
        return torch.where(has_pos, torch.log(safe) + shift, float("-inf"))

    def log_pos_mean(self) -> Tensor:
        """``log pos_mean_a`` for every anchor (0, a placeholder the callers mask out, without positives)."""
        if self.per_anchor is not None and self.anchor is not None:
            return self.log_pos_sum() - math.log(self.per_anchor) if self.per_anchor > 1 else self.log_pos_sum()
        has_pos = self.constant("n_pos>0", lambda: self.n_pos > 0)
        return torch.where(has_pos, self.log_pos_sum() - self.log_n("n_pos"), 0.0)

    def log_n(self, which: str) -> Tensor:
        """``log max(M_a, 1)`` (``which="n_pos"``) or ``log max(N_a, 1)`` (``"n_neg"``) per anchor."""
        return self.constant(f"log {which}", lambda: torch.log(getattr(self, which).clamp_min(1.0)))

    def valid(self, *, negative: bool) -> Tensor:
        """The anchors with a positive (and, with ``negative``, a negative): bool [A]."""
        if negative:
            return self.constant("n_pos>0 & n_neg>0", lambda: (self.n_pos > 0) & (self.n_neg > 0))
        return self.constant("n_pos>0", lambda: self.n_pos > 0)

    def reduce(self, per_anchor: Tensor, loss: str, needs: str, *, negative: bool = False,
               valid: Tensor | None = None) -> Tensor:
        """:func:`reduce_anchors` over :meth:`valid` (or over ``valid``, where given), with the constants of
        the layout."""
        if valid is None:
            valid = self.valid(negative=negative)
            n_valid = self.constant(f"count n_pos>0{' & n_neg>0' if negative else ''}", valid.sum)
        else:
            n_valid = valid.sum()
        return _reduce(per_anchor, valid, n_valid, self.n_neg, loss, needs,
                       self.constant("gate", lambda: _gate(self.n_neg)))


def _bounded(scores: Scores, scales: tuple[float, ...]) -> bool:
    if scores.min_logit is None or scores.max_logit is None:
        return False
    extent = max(abs(scores.min_logit), abs(scores.max_logit))
    return all(s * extent < EXP_LIMIT for s in scales)


def prepare(scores: Scores, scales: tuple[float, ...] = (1.0,), mask: Mask | None = None) -> Prepared:
    """The positives and, in the same pass, ``log Σ_{k∈mask} exp(s·logits)`` for each scale; ``mask``
    defaults to the negatives."""
    logits = scores.logits.float().contiguous()
    layout = layout_of(scores)
    bounded = _bounded(scores, scales)
    shape = tuple(logits.shape)
    per_anchor = scores.positives_per_anchor
    if layout is not None:
        neg, n_pos, n_neg, anchor = layout.neg, layout.n_pos, layout.n_neg, scores.positives[0]
        lse, pos_logit = row_logsumexps(logits, mask if mask is not None else neg, scales, bounded=bounded,
                                        pos_flat=layout.pos_flat, count=n_neg if mask is None else None)
    else:
        positives = find_positives(scores)
        neg = negatives(scores, positives)
        n_neg = neg.count()
        if positives is not None:
            anchor, cand = positives
            lse, pos_logit = row_logsumexps(logits, mask if mask is not None else neg, scales, bounded=bounded,
                                            pos_flat=anchor * shape[1] + cand)
            n_pos = per_row(anchor, shape[0])
        else:
            anchor, pos_logit, per_anchor = None, logits, None
            lse = row_logsumexps(logits, mask if mask is not None else neg, scales, bounded=bounded)[0]
            n_pos = scores.pos_mask.sum(dim=1, dtype=torch.float32)
        if scores.positives is None:  # found from the mask: in row-major order, not a count per anchor
            per_anchor = None
    if scores.min_logit is not None:
        log_floor: Tensor | float = float(scores.min_logit)
    else:
        log_floor = logits.detach().amin(dim=1)
    return Prepared(logits=logits, lse=lse, pos_logit=pos_logit, anchor=anchor, per_anchor=per_anchor,
                    pos_mask=scores.pos_mask, n_pos=n_pos, n_neg=n_neg, log_floor=log_floor,
                    bounded=_bounded(scores, (1.0,)), layout=layout)


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
    # (neg_coef·neg_mean - pos_coef·pos_mean) / neg_mean, in one kernel
    est = torch.rsub(torch.exp(log_ratio), neg_coef, alpha=pos_coef)
    floor_rel = torch.exp(p.log_floor - log_neg_mean.detach())
    above = est > floor_rel
    log_est = torch.log(torch.where(above, est, 1.0)) + log_neg_mean
    return torch.where(above, log_est, p.log_floor)


def contrast_with_negative_term(p: Prepared, log_neg_term: Tensor) -> Tensor:
    """Per-anchor mean over positives of ``-log( e_ap / (e_ap + exp(log_neg_term_a)) )``, which is
    ``softplus(log_neg_term_a - logit_ap)``: one kernel forward and one backward (``logaddexp`` takes
    four each way)."""
    return p.per_anchor_mean(F.softplus(p.row(log_neg_term) - p.pos_logit))


def _gate(n_neg: Tensor) -> Tensor:
    """0 where some anchor has a negative, NaN where none has: the factor by which :func:`_reduce` folds
    that check into its finiteness check."""
    return torch.where((n_neg > 0).any(), 0.0, float("nan"))


def reduce_anchors(per_anchor: Tensor, valid: Tensor, loss: str, needs: str, n_neg: Tensor) -> Tensor:
    """Mean of ``per_anchor`` over the anchors that qualify; ValueError if none does.

    The spec's mean, not every authors' one: Barbano et al.'s supervised losses count an anchor without a
    classmate as 0 in a mean over all anchors, which is this mean times the share of anchors that qualify
    (losses/supcon.py).

    One rule for every loss: a batch in which no anchor has a negative is refused, even by the losses
    whose anchors need only a positive (their value would be a constant 0, and no gradient at all).
    Without boolean indexing (its shape depends on the data): the anchors that do not qualify are
    zeroed, and the sum divided by their count."""
    return _reduce(per_anchor, valid, valid.sum(), n_neg, loss, needs, None)


def _reduce(per_anchor: Tensor, valid: Tensor, n_valid: Tensor, n_neg: Tensor, loss: str, needs: str,
            gate: Tensor | None) -> Tensor:
    """:func:`reduce_anchors` from the count of the anchors that qualify and, where known, the :func:`_gate`.

    Where checks read values now (the CPU) each refusal raises its own ValueError. On an accelerator
    the three checks (an anchor with a negative, an anchor that qualifies, a finite result; the last
    stands in for the Scores' check of the logits) are one queued assertion of 3 kernels instead of 10:
    without a qualifying anchor the result is 0/0, not finite, and the gate is NaN without a negative."""
    result = torch.where(valid, per_anchor, 0.0).sum() / n_valid
    if reads_values_now(result):
        require((n_neg > 0).any(), f"{loss}: no anchor has a negative (a batch of one sample?), so the loss is "
                "undefined")
        require(valid.any(), f"{loss}: no anchor has {needs}, so the loss is undefined")
    else:
        gate = _gate(n_neg) if gate is None else gate
        require((result * gate).eq(0.0),  # finite times 0 is 0; NaN, inf and the NaN gate are not
                f"{loss}: the loss is undefined or not finite: no anchor has a negative, or none has {needs}, or "
                "the logits contain NaN or infinite values", NonFiniteError)
    return result


def debiased_loss(scores: Scores, name: str, scales: tuple[float, ...],
                  log_neg_mean_fn: Callable[[Prepared], Tensor], neg_coef: float, pos_coef: float) -> Tensor:
    """The family of DCL, HCL and PUCL: ``-log(e_ap / (e_ap + N_a·g_a))`` with
    ``g_a = max(neg_coef·r_a - pos_coef·pos_mean_a, floor)``, ``r_a`` the (possibly reweighted)
    negative mean given in log form by ``log_neg_mean_fn(prepared)`` from the log-sum-exps over the
    negatives at ``scales``."""
    p = prepare(scores, scales)
    valid = p.valid(negative=True)
    log_g = debiased_log_negative(torch.where(valid, log_neg_mean_fn(p), 0.0),
                                  torch.where(valid, p.log_pos_mean(), 0.0), p, neg_coef, pos_coef)
    return p.reduce(contrast_with_negative_term(p, p.log_n("n_neg") + log_g), name,
                    "both a positive and a negative", negative=True)


def log_neg_mean(p: Prepared) -> Tensor:
    """``log neg_mean_a``: the plain mean of the negatives' exponentiated logits (scale 1)."""
    return p.lse[0] - p.log_n("n_neg")


LOG2 = math.log(2.0)
