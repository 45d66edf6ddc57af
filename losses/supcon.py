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

Conventions in which the authors' code (EIDOSLAB/unbiased-contrastive-learning, ``src/losses.py``:
``EpsilonSupCon``, ``EpsilonSupInfoNCE``, ``form="out"``; their SupCon is ``EpsilonSupCon`` at epsilon 0)
differs from the spec, which we keep; none changes what training does in their setting
(tests/test_losses_authors.py checks each relation against a naive loop of their code):

- **The constant epsilon.** Their eps_supcon leaves out the leading ``epsilon``: their value is ours minus
  ``epsilon``, with the same gradient.
- **1e-6 inside the log.** Their losses shift each row by its maximum ``m_a`` (the anchor with itself,
  ``max_logit = 1/t`` for cosine) and take ``log(Σ + 1e-6)`` of the shifted denominator; ours adds nothing. In our
  terms their denominator ``D`` gains ``1e-6·exp(m_a)``: each positive's term grows by
  ``log(1 + 1e-6·exp(m_a) / D)``, negligible unless every candidate sits far below ``m_a``: at t = 0.1 with 255
  candidates all orthogonal to the anchor it is 9e-5, and it reaches 1 only when nearly all are opposite to it (a
  classmate near the anchor keeps it about 1e-6); at t = 0.04 it exceeds 1e-2 on 8 random embeddings.
- **Anchors without a classmate.** Theirs count such an anchor as 0 in a mean over all anchors; ours average
  over the anchors that have one (``_core.reduce_anchors``, the spec's rule for every loss): their value is ours
  (less epsilon) times the share of anchors with a classmate, 1 in practice at batch 256 on 10 classes.
- **The scale ``temperature / 0.07``** of their loss (SupContrast's ``base_temperature``) is the vision
  domain's, not the loss's: ``objective=authors`` (domains/vision/biased.py).
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
