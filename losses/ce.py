"""Cross-entropy of a classifier's logits, the biased-data track's baseline (Barbano et al., ICLR 2023,
"Unbiased Supervised Contrastive Learning": their main_ce.py), as a loss of the core.

On ``class_scores`` the candidates are the C classes and the one positive of sample a is its class y_a, so

    L_a = -log( e_{a,y_a} / Σ_c e_ac )                    (temperature 1: the logits as the classifier gives them)

is InfoNCE with the positive counted among the candidates, and ``F.cross_entropy(logits, y)``: the gradient is
the same computation (log-softmax, then minus one over the batch at the label), so a classifier trains exactly as
with it. On other Scores each anchor averages over its positives, ``-(1/M_a) Σ_{p∈P_a} log( e_ap / Σ_{k∈P_a∪U_a}
e_ak )``: SupCon's L_out (Khosla et al., NeurIPS 2020), which they note reduces to cross-entropy when the
candidates are class prototypes. Anchors without a positive are skipped; ignored entries are left out.
"""

from __future__ import annotations

import torch
from torch import Tensor

from losses._core import positives_or_negatives, reduce_anchors
from losses.registry import CLASS, register_loss
from losses.scores import Scores
from losses.supcon import require_labels

# Ignored entries: a finite floor, not -inf, so that a row with none kept gives no NaN (exp of it is 0 in float32).
_FLOOR = torch.finfo(torch.float32).min


@register_loss("ce", needs_labels=True, positives=CLASS,
               paper="Barbano et al., ICLR 2023, Unbiased Supervised Contrastive Learning (baseline, main_ce.py)",
               summary="cross-entropy of class logits (class_scores): the anchor's class is its one positive")
def ce(scores: Scores) -> Tensor:
    require_labels(scores, "ce")
    log_p = torch.log_softmax(positives_or_negatives(scores).fill_outside(scores.logits.float(), _FLOOR), dim=1)
    n_pos = scores.pos_mask.sum(dim=1, dtype=torch.int32).float()
    per_anchor = -torch.where(scores.pos_mask, log_p, 0.0).sum(dim=1) / n_pos.clamp_min(1.0)
    n_neg = scores.neg_mask.sum(dim=1, dtype=torch.int32).float()
    return reduce_anchors(per_anchor, n_pos > 0, "ce", "a positive", n_neg=n_neg)
