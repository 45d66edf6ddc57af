"""Hard-negative contrastive loss (Robinson, Chuang, Sra, Jegelka, ICLR 2021, "Contrastive
Learning with Hard Negative Samples").

DCL with the negatives importance-weighted towards the hard ones:

    w_an = exp(beta·logits[a,n]) / ((1/N_a) Σ_n' exp(beta·logits[a,n']))      (not detached)
    r_a  = (1/N_a) Σ_n w_an e_an  = Σ_n exp((1+beta)·l_an) / Σ_n exp(beta·l_an)
    g_a  = max( (r_a - tau_plus·pos_mean_a) / (1 - tau_plus), floor )
    L_a  = (1/M_a) Σ_{p∈P_a} -log( e_ap / (e_ap + N_a·g_a) )

``beta = 0`` is DCL. ``tau_plus="auto"``: estimated during training, as for DCL.
"""

from __future__ import annotations

from torch import Tensor

from losses._core import Prepared, debiased_loss
from losses.dcl import TAU_PLUS
from losses.registry import HParam, prior_settings, register_loss
from losses.scores import Scores

BETA = HParam("beta", 1.0, low=0.0)


@register_loss("hcl", hparams=(TAU_PLUS, BETA, *prior_settings()),
               paper="Robinson et al., ICLR 2021, Contrastive Learning with Hard Negative Samples",
               summary="DCL with negatives reweighted by hardness beta")
def hcl(scores: Scores, tau_plus: float = 0.1, beta: float = 1.0) -> Tensor:
    def log_reweighted_mean(p: Prepared) -> Tensor:
        log_num, log_den = p.lse  # the log-sum-exps over the negatives at scales 1 + beta and beta
        return log_num - log_den

    return debiased_loss(scores, "hcl", (1.0 + beta, beta), log_reweighted_mean, 1.0 / (1.0 - tau_plus),
                         tau_plus / (1.0 - tau_plus))
