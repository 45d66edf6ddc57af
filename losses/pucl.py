"""Positive-unlabeled contrastive loss, PUCL (Wang et al. 2024, "Contrastive Learning with Negative Sampling
Correction", arXiv 2401.08690; not Acharya et al.'s "Positive Unlabeled Contrastive Learning", another method).

The negatives are unlabeled data with a fraction ``alpha`` of positives; ``c`` is the labelling
frequency of the positives. The PU-corrected negative term is

    g_a = max( (1 - alpha·c)/(1 - alpha)·neg_mean_a - alpha·(1 - c)/(1 - alpha)·pos_mean_a, floor )
    L_a = (1/M_a) Σ_{p∈P_a} -log( e_ap / (e_ap + N_a·g_a) )

``c = 0`` gives DCL with ``tau_plus = alpha``. ``alpha="auto"`` estimates the class prior during training
(:mod:`losses.prior`); ``c`` stays the user's.
"""

from __future__ import annotations

from torch import Tensor

from losses._core import debiased_loss, log_neg_mean
from losses.registry import HParam, prior_settings, register_loss
from losses.scores import Scores

ALPHA = HParam("alpha", 0.1, low=0.0, high=1.0, low_open=True, high_open=True, auto=True)
C = HParam("c", 0.01, low=0.0, high=1.0)


@register_loss("pucl", hparams=(ALPHA, C, *prior_settings()),
               paper="Wang et al. 2024, Contrastive Learning with Negative Sampling Correction (PUCL)",
               summary="PU-corrected negatives with class prior alpha and label frequency c")
def pucl(scores: Scores, alpha: float = 0.1, c: float = 0.01) -> Tensor:
    return debiased_loss(scores, "pucl", (1.0,), log_neg_mean, (1.0 - alpha * c) / (1.0 - alpha),
                         alpha * (1.0 - c) / (1.0 - alpha))
