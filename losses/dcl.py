"""Debiased contrastive loss (Chuang, Robinson, Lin, Torralba, Jegelka, NeurIPS 2020,
"Debiased Contrastive Learning").

Negatives drawn from the data contain same-class samples with probability ``tau_plus``; DCL
corrects the negative term with the positives:

    g_a = max( (neg_mean_a - tau_plus·pos_mean_a) / (1 - tau_plus), floor )
    L_a = (1/M_a) Σ_{p∈P_a} -log( e_ap / (e_ap + N_a·g_a) )

``floor = exp(min_logit)`` (``e^{-1/t}`` for cosine logits). ``tau_plus = 0`` is InfoNCE.
``tau_plus="auto"`` (through ``losses.get``) estimates it from the data during training (:mod:`losses.prior`).
"""

from __future__ import annotations

from torch import Tensor

from losses._core import debiased_loss, log_neg_mean
from losses.registry import HParam, prior_settings, register_loss
from losses.scores import Scores

TAU_PLUS = HParam("tau_plus", 0.1, low=0.0, high=1.0, high_open=True, auto=True)


@register_loss("dcl", hparams=(TAU_PLUS, *prior_settings()),
               paper="Chuang et al., NeurIPS 2020, Debiased Contrastive Learning",
               summary="debiased negatives with class prior tau_plus")
def dcl(scores: Scores, tau_plus: float = 0.1) -> Tensor:
    return debiased_loss(scores, "dcl", (1.0,), log_neg_mean, 1.0 / (1.0 - tau_plus), tau_plus / (1.0 - tau_plus))
