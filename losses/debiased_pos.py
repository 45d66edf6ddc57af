"""Debiased positives (Troeshestova & Isachenko, "Positive-debiased contrastive learning").

The positive term itself is debiased: ``P_a`` estimates the positive density from every candidate
and the sample itself (``s_a = exp(max_logit)``, the logit of a sample with itself), with
``tau_minus = 1 - tau_plus``:

    P_a = (Σ_n e_an + pos_mean_a + s_a) / (N_a + 2)
    L_a = -log( max(P_a - tau_minus·neg_mean_a, tau_plus·floor) / (P_a + (N_a·tau_plus - tau_minus)·neg_mean_a) )

``aggregation="grouping"`` builds ``P_a`` from all positives at once; ``"combination"`` averages the
loss over positives, each building ``P_a`` from itself alone (``pos_mean_a = e_ap``). They agree for
M_a = 1. Where ``max_logit`` is None, ``s_a = exp(max_k logits[a, k])`` (detached).

Where we follow the authors' code rather than the spec (``shared/specs/losses.md``):

- **grouping with M_a > 1.** The spec sums the positives, ``P_a = (Σ_n e_an + Σ_p e_ap + s_a) /
  (N_a + M_a + 1)``. The authors' code (intsystems/2023-Project-123, ``code/loss.py``,
  ``DebiasedPosLossV3`` under ``m_agg_mode=pos_grouping``) puts the mean of the positives in the one
  entry of the positive, ``P_a = full.mean(-1)`` over its N + 2 columns: ``(Σ_n e_an + pos_mean_a +
  s_a) / (N_a + 2)``, the form above. For M_a = 1 the two are the same. Their grouping scores only the
  first two views as anchors and negatives, the extra views being positives alone; our vision domain
  scores grouping on :func:`losses.multiview_scores`, where every view is an anchor and a negative.
- **combination with V > 2 views.** The authors' "loss combination" (``code/main.py``, their default
  ``m_agg_mode``) is not a per-positive mean on pooled negatives: it averages the two-view loss over
  the pairs of views, each pair's negatives drawn from that pair alone. That is this loss (M_a = 1) on
  :func:`losses.pairwise_scores`, which the vision domain's SimCLR builds for ``aggregation=combination``
  with more than 2 views. On any other layout ``combination`` keeps the spec's per-positive mean.
- **the floor and the guard** are ours (the spec's): their V3 takes ``-log(o1 / o2)`` as it comes, a
  NaN where ``o1`` or ``o2`` is not positive.

For very few negatives (``N_a·tau_plus`` well below ``tau_minus``) the denominator can reach 0 or
below, where the ratio is undefined; there the ratio is taken as 1 (loss 0) instead of taking the
log of a non-positive number. A positive denominator below the numerator gives a negative loss, as
the formula says.

Behaviour to expect: the self term ``s_a`` sits in ``P_a``, so when ``exp(max_logit)`` dwarfs the other
entries of a row (a small temperature, e.g. cosine / 0.1 on quick-thought) the ratio tends to 1 and the loss
and its gradient vanish (the synthetic text task reached 69.4 against infonce's 89.9; that record, M_a = 2,
predates the authors' grouping and was trained with the spec's sum over N + M + 1). With raw logits the
detached row-maximum fallback moved training towards uniform logits (loss rising to ``log(N_a + 2)``;
chance accuracy). At SimCLR's temperature 0.5 and on InfoGraph's pairs it trains like the other losses.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from losses._core import prepare
from losses.registry import HParam, register_loss
from losses.scores import Scores

TAU_PLUS = HParam("tau_plus", 0.1, low=0.0, high=1.0, low_open=True, high_open=True)
AGGREGATION = HParam("aggregation", "grouping", choices=("grouping", "combination"))


@register_loss("debiased_pos", hparams=(TAU_PLUS, AGGREGATION),
               paper="Troeshestova & Isachenko, positive-debiased contrastive learning",
               summary="debiases the positive term; grouping or combination over positives")
def debiased_pos(scores: Scores, tau_plus: float = 0.1, aggregation: str = "grouping") -> Tensor:
    p = prepare(scores)
    # Shift every row by log s_a, the largest logit it can hold, so all exponentials are <= 1 and
    # the self term is exactly 1.
    shift: Tensor | float = (float(scores.max_logit) if scores.max_logit is not None
                             else p.logits.detach().amax(dim=1))
    neg_sum = torch.exp(p.lse[0] - shift)  # Σ_n e_an / s_a
    e_pos = torch.exp(p.pos_logit - (p.row(shift) if isinstance(shift, Tensor) else shift))  # e_ap / s_a per pair
    log_floor = math.log(tau_plus) + p.log_floor - shift  # log(tau_plus·floor / s_a)
    if aggregation == "grouping":  # P_a from the mean of the anchor's positives: every term is per anchor
        counts = p.constant(f"debiased_pos counts, tau_plus={tau_plus}", lambda: _Counts.of(p.n_neg, tau_plus))
        per_anchor = _loss(neg_sum, p.per_anchor_mean(e_pos), counts, log_floor, tau_plus)
    else:  # each positive builds P_a from itself alone
        counts = p.constant(f"debiased_pos counts per pair, tau_plus={tau_plus}",
                            lambda: _Counts.of(p.row(p.n_neg), tau_plus))
        at_pairs = p.row(log_floor) if isinstance(log_floor, Tensor) else log_floor
        per_anchor = p.per_anchor_mean(_loss(p.row(neg_sum), e_pos, counts, at_pairs, tau_plus))
    return p.reduce(per_anchor, "debiased_pos", "both a positive and a negative", negative=True)


class _Counts(NamedTuple):
    """What ``L`` takes of the negatives' count ``N``: ``N + 2``, ``max(N, 1)`` and ``max(N, 1)·tau_plus -
    tau_minus`` (the layout's constants)."""

    plus_two: Tensor
    at_least_one: Tensor
    denominator_coef: Tensor

    @staticmethod
    def of(n_neg: Tensor, tau_plus: float) -> _Counts:
        at_least_one = n_neg.clamp_min(1.0)
        return _Counts(n_neg + 2.0, at_least_one, at_least_one * tau_plus - (1.0 - tau_plus))


def _loss(neg_sum: Tensor, pos_term: Tensor, counts: _Counts, log_floor: Tensor | float, tau_plus: float) -> Tensor:
    """``L`` from the sum of the negatives' exponentials, the positives' term of ``P_a`` (their mean, or one
    positive), each divided by ``s_a``, the negatives' counts, and the log of the numerator's floor; any
    broadcastable shapes."""
    tau_minus = 1.0 - tau_plus
    density = (neg_sum + pos_term + 1.0) / counts.plus_two
    neg_mean = neg_sum / counts.at_least_one
    estimate = torch.sub(density, neg_mean, alpha=tau_minus)  # density - tau_minus·neg_mean
    floor = torch.exp(log_floor) if isinstance(log_floor, Tensor) else math.exp(log_floor)
    above = estimate > floor
    log_num = torch.where(above, torch.log(torch.where(above, estimate, 1.0)), log_floor)
    denom = torch.addcmul(density, counts.denominator_coef, neg_mean)  # density + (N·tau_plus - tau_minus)·neg_mean
    ok = denom > 0
    log_den = torch.where(ok, torch.log(torch.where(ok, denom, 1.0)), log_num)
    return log_den - log_num
