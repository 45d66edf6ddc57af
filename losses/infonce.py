"""InfoNCE / NT-Xent (van den Oord et al. 2018; Chen et al. 2020, "A Simple Framework for
Contrastive Learning of Visual Representations").

    L_a = (1/M_a) Σ_{p∈P_a} -log( e_ap / (e_ap + Σ_{n∈U_a} e_an) )

With ``pair_scores`` this is SimCLR's NT-Xent. Each positive is contrasted with the negatives only,
not with the other positives. An anchor without negatives has loss 0 (its positives win trivially).
"""

from __future__ import annotations

from torch import Tensor

from losses._core import contrast_with_negative_term, prepare
from losses.registry import register_loss
from losses.scores import Scores


@register_loss("infonce", paper="van den Oord et al. 2018 (CPC); Chen et al. 2020 (SimCLR)",
               summary="InfoNCE / NT-Xent, the biased baseline")
def infonce(scores: Scores) -> Tensor:
    p = prepare(scores)  # p.lse[0]: log Σ_{n∈U_a} e_an
    return p.reduce(contrast_with_negative_term(p, p.lse[0]), "infonce", "a positive", negative=False)
