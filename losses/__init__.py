"""The shared loss core: every loss is a function of one :class:`Scores` object.

    import losses
    scores = losses.pair_scores(z1, z2, temperature=0.5)
    loss = losses.get("dcl", tau_plus=0.1)(scores)

The maths and conventions follow ``shared/specs/losses.md``.
"""

# Importing each loss module registers its loss (tests/test_losses_capabilities.py checks that none is missed).
from losses.ce import ce
from losses.checks import NonFiniteError, set_sync_checks
from losses.dcl import dcl
from losses.debiased_pos import debiased_pos
from losses.fairkl import fairkl
from losses.hcl import hcl
from losses.infonce import infonce
from losses.jsd import jsd
from losses.jsd_hard import jsd_hard
from losses.pucl import pucl
from losses.registry import (
    CLASS,
    CLASSMATES,
    LOGITS,
    POSITIVES,
    PROBABILITIES,
    SCORINGS,
    VIEWS,
    HParam,
    KernelOutputError,
    Loss,
    LossSpec,
    available,
    get,
    register,
    register_loss,
    spec,
)
from losses.scores import (
    Scores,
    bank_scores,
    class_scores,
    label_scores,
    membership_scores,
    multiview_scores,
    pair_scores,
    pairwise_scores,
)
from losses.supcon import eps_supcon, eps_supinfonce, supcon
from losses.unbiased import unbiased

__all__ = [
    "CLASS", "CLASSMATES", "LOGITS", "POSITIVES", "PROBABILITIES", "SCORINGS", "VIEWS", "HParam", "KernelOutputError",
    "Loss", "LossSpec", "NonFiniteError", "Scores", "available", "bank_scores", "ce", "class_scores", "dcl",
    "debiased_pos", "eps_supcon", "eps_supinfonce", "fairkl", "get", "hcl", "infonce", "jsd", "jsd_hard",
    "label_scores", "membership_scores", "multiview_scores", "pair_scores", "pairwise_scores", "pucl", "register",
    "register_loss", "set_sync_checks", "spec", "supcon", "unbiased",
]
