"""HCL's graph objective: InfoGraph's Jensen-Shannon estimator with a debiasing term and hardness weights, as
the authors' public graph code computes it (Robinson, Chuang, Sra, Jegelka, ICLR 2021; joshr17/HCL,
``graph/losses.py`` and ``graph/cortex_DIM/functions/gan_losses.py``, the measure ``JSD_hard``).

Not in ``shared/specs/losses.md``: HCL's image and text experiments use the InfoNCE form (``hcl``), its graph
experiments this one. It is here to test whether published graph rows labelled "+HCL" or "+DEB" (PUCL's Table 2)
come from this form. Like ``jsd`` it scores raw logits pair by pair (``scoring=LOGITS``, no temperature).

With ``r = tau_plus / (1 - tau_plus)``, ``P`` the logits on the positive pairs and ``Q`` those on the negative
pairs, every other entry of the matrix read as a zero logit (the authors multiply by their masks), A anchors
(rows), K candidates and |N| negative pairs (the authors divide by A·(K-1), which is |N| in their layout of one
positive per anchor):

    E_pos = (1/A) Σ_{a,k} [log 2 - softplus(-P_ak) - r·softplus(P_ak)]
    beta = 0:  E_neg = (1/|N|) Σ_{a,k} (softplus(Q_ak) - log 2) / (1 - tau_plus)
    beta > 0:  w_ak  = exp(-2·beta·Q_ak / s) / ((1/K) Σ_k' exp(-2·beta·Q_ak' / s)),   s = max_{a,k} |Q_ak|
               E_neg = (1/|N|) Σ_{a,k} [w_ak·softplus(Q_ak) / (1 - tau_plus) - log 2]
    L = E_neg - E_pos

Where the authors' code departs from the paper, this loss follows the code (tests/test_losses_authors.py):

- The positive term is ``softplus(-p) + r·softplus(p)``: the debiasing enters with the opposite sign of the
  paper's estimator, which subtracts ``tau_plus·E⁺`` from the negatives' term. At ``tau_plus = 0.5`` it is
  ``softplus(-p) + softplus(p)``, smallest at ``p = 0``: a positive pair is not pulled above a zero score.
- The weights ``exp(-2·beta·q / s)`` grow as a negative's logit falls: they favour the easy negatives, where
  the paper's ``q_beta ∝ exp(beta·f(x)ᵀf(x⁻))`` favours the hard ones.
- Their graph runs never pass ``tau_plus``: it is 0.5, the default of their ``get_*_expectation``, hence ours.
- Neither ``w`` nor ``s`` is detached. ``s = 0`` (all negative logits zero) is taken as the smallest positive
  float, where theirs divides by zero; the weights are computed as a softmax, the same value without overflow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from losses._core import LOG2
from losses.checks import require
from losses.hcl import BETA
from losses.registry import LOGITS, HParam, register_loss
from losses.scores import Scores

TAU_PLUS_HALF = HParam("tau_plus", 0.5, low=0.0, high=1.0, high_open=True)


@register_loss("jsd_hard", hparams=(TAU_PLUS_HALF, BETA), scoring=LOGITS,
               paper="Robinson et al., ICLR 2021, Contrastive Learning with Hard Negative Samples (graph code)",
               summary="HCL's graph objective: InfoGraph's JSD with their debiasing and hardness weights")
def jsd_hard(scores: Scores, tau_plus: float = 0.5, beta: float = 1.0) -> Tensor:
    x = scores.logits.float()
    n_neg = scores.neg_mask.sum()
    require((n_neg > 0) & scores.pos_mask.any(),
            "jsd_hard: the batch needs at least one positive and one negative pair")
    p = torch.where(scores.pos_mask, x, 0.0)
    e_pos = (LOG2 - F.softplus(-p) - tau_plus / (1.0 - tau_plus) * F.softplus(p)).sum() / x.shape[0]
    q = torch.where(scores.neg_mask, x, 0.0)
    if beta == 0:  # the authors' separate branch: JSD's negative term over 1 - tau_plus
        e_neg = (F.softplus(q) - LOG2).sum() / ((1.0 - tau_plus) * n_neg)
    else:
        scale = q.abs().amax().clamp_min(torch.finfo(q.dtype).tiny)
        weights = torch.softmax(-2.0 * beta * q / scale, dim=1) * q.shape[1]  # each row's weights average 1
        e_neg = (weights * F.softplus(q) / (1.0 - tau_plus) - LOG2).sum() / n_neg
    return e_neg - e_pos
