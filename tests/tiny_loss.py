"""A loss plugged in from outside the repository, as a user's own would be (``HARNESS_PLUGINS=tiny_loss`` with
``tests/`` on the path): InfoNCE with its negative term scaled by ``weight``, written on the public API only."""

from __future__ import annotations

import torch
from torch import Tensor

from losses import HParam, Scores, register_loss


@register_loss("tiny_weighted_nce", paper="(tests only)", summary="InfoNCE with a weighted negative term",
               hparams=(HParam("weight", 1.0, low=0.0, low_open=True),))
def tiny_weighted_nce(scores: Scores, weight: float = 1.0) -> Tensor:
    logits = scores.logits
    negatives = torch.logsumexp(logits.masked_fill(~scores.neg_mask, -torch.inf), dim=1, keepdim=True)
    per_pair = torch.logaddexp(logits, negatives + torch.log(torch.tensor(weight))) - logits
    pos = scores.pos_mask.float()
    return ((per_pair * pos).sum(1) / pos.sum(1).clamp(min=1)).mean()
