"""Supervised contrastive losses.

``supcon`` (Khosla et al., NeurIPS 2020, "Supervised Contrastive Learning", L_out):

    L_a = -(1/M_a) Σ_{p∈P_a} log( e_ap / Σ_{k∈P_a∪U_a} e_ak )

``eps_supcon`` (Barbano et al., ICLR 2023, "Unbiased Supervised Contrastive Learning", Eq. 5),
margin ``epsilon`` in logit units:

    L_a = epsilon - (1/M_a) Σ_p log( e_ap / (exp(-epsilon)·Σ_{p'∈P_a} e_ap' + Σ_{n∈U_a} e_an) )

``eps_supinfonce`` (Barbano et al. 2023, Eq. 4):

    L_a = -(1/M_a) Σ_p log( e_ap / (exp(-epsilon)·e_ap + Σ_{n∈U_a} e_an) )

``eps_supcon(epsilon=0)`` is ``supcon``; ``eps_supinfonce(epsilon=0)`` is ``infonce`` when M_a = 1.
All three need labels in the Scores (``label_scores``, or ``labels=`` in the other constructors).
"""

from __future__ import annotations

import torch
from torch import Tensor

from losses._core import positives_or_negatives, prepare, reduce_anchors
from losses.registry import CLASSMATES, HParam, register_loss
from losses.scores import Scores

EPSILON = HParam("epsilon", 0.0, low=0.0)


def require_labels(scores: Scores, loss: str) -> None:
    if not scores.has_labels:
        raise ValueError(f"{loss} is supervised: the Scores carry no labels (build them with "
                         "label_scores, or pass labels= to the constructor)")


@register_loss("supcon", needs_labels=True, positives=CLASSMATES,
               paper="Khosla et al., NeurIPS 2020, Supervised Contrastive Learning (L_out)",
               summary="supervised contrastive loss")
def supcon(scores: Scores) -> Tensor:
    require_labels(scores, "supcon")
    p = prepare(scores, mask=positives_or_negatives(scores))  # p.lse[0]: log Σ_{k∈P_a∪U_a} e_ak
    per_pair = p.row(p.lse[0]) - p.pos_logit
    return reduce_anchors(p.per_anchor_mean(per_pair), p.n_pos > 0, "supcon", "a positive", n_neg=p.n_neg)


@register_loss("eps_supcon", hparams=(EPSILON,), needs_labels=True, positives=CLASSMATES,
               paper="Barbano et al., ICLR 2023, Unbiased Supervised Contrastive Learning, Eq. 5",
               summary="SupCon with a margin epsilon (logit units)")
def eps_supcon(scores: Scores, epsilon: float = 0.0) -> Tensor:
    require_labels(scores, "eps_supcon")
    p = prepare(scores)
    log_den = torch.logaddexp(p.log_pos_sum() - epsilon, p.lse[0])
    per_pair = epsilon + p.row(log_den) - p.pos_logit
    return reduce_anchors(p.per_anchor_mean(per_pair), p.n_pos > 0, "eps_supcon", "a positive", n_neg=p.n_neg)


@register_loss("eps_supinfonce", hparams=(EPSILON,), needs_labels=True, positives=CLASSMATES,
               paper="Barbano et al., ICLR 2023, Unbiased Supervised Contrastive Learning, Eq. 4",
               summary="supervised InfoNCE with a margin epsilon (logit units)")
def eps_supinfonce(scores: Scores, epsilon: float = 0.0) -> Tensor:
    require_labels(scores, "eps_supinfonce")
    p = prepare(scores)
    per_pair = torch.logaddexp(p.pos_logit - epsilon, p.row(p.lse[0])) - p.pos_logit
    return reduce_anchors(p.per_anchor_mean(per_pair), p.n_pos > 0, "eps_supinfonce", "a positive", n_neg=p.n_neg)
