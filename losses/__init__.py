"""The shared loss core: every loss is a function of one :class:`Scores` object.

    import losses
    scores = losses.pair_scores(z1, z2, temperature=0.5)
    loss = losses.get("dcl", tau_plus=0.1)(scores)

The maths and conventions follow ``shared/specs/losses.md``.
"""

# Importing each loss module registers its loss.
from losses.checks import NonFiniteError, set_sync_checks
from losses.dcl import dcl
from losses.debiased_pos import debiased_pos
from losses.fairkl import fairkl
from losses.hcl import hcl
from losses.infonce import infonce
from losses.jsd import jsd
from losses.pucl import pucl
from losses.registry import HParam, Loss, LossSpec, available, get, register, spec
from losses.scores import (
    Scores,
    bank_scores,
    label_scores,
    membership_scores,
    multiview_scores,
    pair_scores,
)
from losses.supcon import eps_supcon, eps_supinfonce, supcon
from losses.unbiased import unbiased

__all__ = [
    "HParam", "Loss", "LossSpec", "NonFiniteError", "Scores", "available", "bank_scores", "dcl", "debiased_pos",
    "eps_supcon", "eps_supinfonce", "fairkl", "get", "hcl", "infonce", "jsd", "label_scores",
    "membership_scores", "multiview_scores", "pair_scores", "pucl", "register", "set_sync_checks", "spec", "supcon",
    "unbiased",
]
