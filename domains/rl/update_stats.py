"""The update statistics that CURL's training keeps on the device, as the learning curve's points and as the live
trackers' scalars."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor


def curve_point(env_steps: int, agent_steps: int, updates: int, returns: list[float],
                train_returns: list[float], recent: dict[str, list[Tensor]]) -> dict[str, Any]:
    """The learning curve's point of an evaluation: its returns, the last training episode's, and the mean of each
    update statistic since the last evaluation."""
    point = {"env_steps": env_steps, "agent_steps": agent_steps, "updates": updates,
             "eval_return": float(np.mean(returns)), "eval_return_std": float(np.std(returns)),
             "eval_episode_returns": [float(r) for r in returns],
             "train_return": float(train_returns[-1]) if train_returns else None}
    point.update({key: float(np.mean(torch.stack(values).tolist())) for key, values in recent.items()})
    return point


# The live trackers' tag of an update statistic named otherwise in the record's curve: the contrastive loss is
# ``loss`` in every domain's log, so that one TensorBoard chart compares them (SAC's losses keep their names).
TAGS = {"curl_loss": "loss"}


def tracker_tags(scalars: dict[str, Any]) -> dict[str, Any]:
    """``scalars`` under the live trackers' tags (:data:`TAGS`)."""
    return {TAGS.get(key, key): value for key, value in scalars.items()}


def means_since(recent: dict[str, list[Tensor]], done: dict[str, int]) -> dict[str, float]:
    """The mean of each update statistic over its values past the first ``done[key]``, read in one transfer."""
    keys = [key for key, values in recent.items() if len(values) > done.get(key, 0)]
    if not keys:
        return {}
    means = torch.stack([torch.stack(recent[key][done.get(key, 0):]).float().mean() for key in keys]).tolist()
    return dict(zip(keys, means))
