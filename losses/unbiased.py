"""The unbiased oracle of Chuang et al. 2020 (Eq. 2 with Q = N): the upper bound DCL approximates.

With the true labels, the negatives that share the anchor's class are dropped and the remaining
``T_a = {n∈U_a : label_n != label_a}`` are rescaled to the full count:

    L_a = (1/M_a) Σ_{p∈P_a} -log( e_ap / (e_ap + (N_a / N'_a)·Σ_{n∈T_a} e_an) ),   N'_a = |T_a|

Anchors with N'_a = 0 are skipped. Equal to ``infonce`` when no negative shares the anchor's label.
"""

from __future__ import annotations

import torch
from torch import Tensor

from losses._core import contrast_with_negative_term, prepare
from losses._masks import Mask
from losses.registry import register_loss
from losses.scores import Scores
from losses.supcon import require_labels


@register_loss("unbiased", needs_labels=True,
               paper="Chuang et al., NeurIPS 2020, Debiased Contrastive Learning, Eq. 2 (oracle)",
               summary="oracle: drops same-class negatives using the true labels")
def unbiased(scores: Scores) -> Tensor:
    require_labels(scores, "unbiased")
    true_neg = Mask(tuple(scores.logits.shape),
                    dense=scores.neg_mask & (scores.anchor_labels[:, None] != scores.candidate_labels[None, :]))
    p = prepare(scores, mask=true_neg)  # p.lse[0]: log Σ_{n∈T_a} e_an
    n_true = true_neg.count()
    log_term = p.lse[0] + p.log_n("n_neg") - torch.log(n_true.clamp_min(1.0))
    return p.reduce(contrast_with_negative_term(p, log_term), "unbiased", "a positive and a negative of another class",
                    valid=p.valid(negative=False) & (n_true > 0))
