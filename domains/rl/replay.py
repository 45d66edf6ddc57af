"""CURL's replay buffer and its crops: the data an update reads.

- Observations: 3 stacked 100x100 RGB frames, stored as uint8; a random 84x84 crop (one offset per sample)
  for every update, the centre crop for acting and evaluation (:func:`center_crop`).
- Replay lives on the agent's device (uint8 frames on the GPU when training there): a batch is sampled,
  stacked and cropped there by indexing, and an update never copies from or waits for the host. Each frame is
  stored once (consecutive stacks share frames); see :class:`ReplayBuffer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

# --------------------------------------------------------------------------------------------- augmentation


def center_crop(obs: Tensor, size: int) -> Tensor:
    """The central ``size x size`` window of ``[..., H, W]`` (CURL's evaluation view)."""
    h, w = obs.shape[-2:]
    top, left = (h - size) // 2, (w - size) // 2
    return obs[..., top:top + size, left:left + size]


# --------------------------------------------------------------------------------------------- replay buffer


@dataclass
class Batch:
    """A replay batch, cropped (uint8 pixels ``[B, frame_stack·C, size, size]``, on the buffer's device).

    ``obs`` is the anchor crop, also the RL input (as CURL); ``keys`` are further random crops of the same
    observations for the contrastive part. ``index`` and ``tops``/``lefts`` (``[2 + len(keys), B]``: obs,
    next_obs, keys) say which transitions and windows were taken."""

    obs: Tensor
    action: Tensor  # float [B, A]
    reward: Tensor  # float [B, 1]
    next_obs: Tensor
    not_done: Tensor  # float [B, 1]
    keys: list[Tensor]
    index: Tensor  # long [B]
    tops: Tensor  # long [2 + M, B]
    lefts: Tensor  # long [2 + M, B]


class ReplayBuffer:
    """Transitions ``(obs, action, reward, next_obs, not_done)`` with uint8 pixels, ``capacity`` of them, all
    held on ``device`` (the GPU when the agent trains there), so that a batch never leaves it.

    Consecutive stacked observations share frames, so each frame is stored once: a ring of single frames,
    and for each transition the ``frame_stack + 1`` frame slots of its obs (the first ``frame_stack``) and
    next_obs (the last ``frame_stack``). Samples are the same stacks as CURL's buffer returns (it stores both
    stacks whole), in a sixth of the memory. The ring holds enough frames for ``capacity`` transitions of
    episodes of ``episode_length`` agent steps: one frame per transition and ``frame_stack`` at each
    episode start.
    """

    def __init__(self, capacity: int, frame_shape: tuple[int, int, int], frame_stack: int, action_dim: int,
                 episode_length: int, device: torch.device | str = "cpu"):
        self.capacity, self.frame_stack, self.device = capacity, frame_stack, torch.device(device)
        self.frame_capacity = capacity + frame_stack * (capacity // episode_length + 4)
        self.frames = torch.zeros((self.frame_capacity, *frame_shape), dtype=torch.uint8, device=self.device)
        self.slots = torch.zeros((capacity, frame_stack + 1), dtype=torch.int64, device=self.device)
        # action, reward, not_done side by side: one host-to-device copy per transition, not three.
        self.scalars = torch.zeros((capacity, action_dim + 2), dtype=torch.float32, device=self.device)
        self.idx = self.size = self.frame_idx = 0
        # The size again, on the device: sampling reads it there, so that a captured update (a CUDA graph
        # freezes every host value) draws from the whole buffer as it grows.
        self.count = torch.zeros((), dtype=torch.int64, device=self.device)
        self.frames_wrapped = False
        self._stack: list[int] = []  # frame slots of the current observation

    def __len__(self) -> int:
        return self.size

    def _put_frame(self, frame: np.ndarray) -> int:
        slot = self.frame_idx
        self.frames[slot] = torch.from_numpy(np.ascontiguousarray(frame))
        self.frame_idx = (slot + 1) % self.frame_capacity
        self.frames_wrapped = self.frames_wrapped or self.frame_idx == 0
        return slot

    def start_episode(self, obs: np.ndarray) -> None:
        """Store the first observation of an episode (``[frame_stack·C, H, W]``)."""
        self._stack = [self._put_frame(f) for f in np.split(obs, self.frame_stack)]

    def add(self, action: np.ndarray, reward: float, next_obs: np.ndarray, not_done: float) -> None:
        """Store the transition from the current observation; ``next_obs`` becomes the current one."""
        if not self._stack:
            raise RuntimeError("call start_episode(obs) before add()")
        channels = next_obs.shape[0] // self.frame_stack
        slots = self._stack + [self._put_frame(next_obs[-channels:])]
        i = self.idx
        self.slots[i] = torch.tensor(slots)
        self.scalars[i] = torch.from_numpy(np.concatenate([np.asarray(action, np.float32).reshape(-1),
                                                           np.float32([reward, not_done])]))
        self.idx = (i + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        self.count.fill_(self.size)
        self._stack = slots[1:]

    def sample(self, batch_size: int, crop_size: int, num_keys: int = 1,
               generator: torch.Generator | None = None) -> Batch:
        """A uniform batch (with replacement, as CURL) with one random crop per sample and view: obs,
        next_obs and ``num_keys`` key crops of obs, each at its own uniformly drawn offset (all
        ``H - crop_size + 1`` positions; CURL's numpy version never picks the last one). Indices and
        offsets are drawn on the buffer's device from the size held there (:attr:`count`): sampling never
        waits for the host, and a CUDA graph of it keeps sampling from the whole buffer as it grows."""
        if self.size == 0:
            raise RuntimeError("the replay buffer is empty")
        _, h, w = self.frames.shape[1:]
        if not 0 < crop_size <= min(h, w):
            raise ValueError(f"crop_size must lie in [1, {min(h, w)}], got {crop_size}")
        dev, views = self.device, 2 + num_keys
        # floor(u·size) with u uniform on [0, 1) in float64: below size for any size under 2^53, and uniform
        # over the indices up to ~size/2^53 (float32's 2^24 steps would tilt 100k slots by ~0.6%).
        u = torch.rand(batch_size, dtype=torch.float64, device=dev, generator=generator)
        index = (u * self.count).long()
        tops = torch.randint(0, h - crop_size + 1, (views, batch_size), device=dev, generator=generator)
        lefts = torch.randint(0, w - crop_size + 1, (views, batch_size), device=dev, generator=generator)
        return self.gather(index, tops, lefts, crop_size)

    def gather(self, index: Tensor, tops: Tensor, lefts: Tensor, crop_size: int) -> Batch:
        """The batch of transitions ``index`` ([B]), cropped at ``tops``/``lefts`` ([2 + M, B]: obs,
        next_obs, then M key crops of obs): one gather from the frame ring, no stack is ever built whole."""
        slots = self.slots[index]  # [B, k + 1]
        k = self.frame_stack
        obs_slots, next_slots = slots[:, :k], slots[:, 1:]
        view_slots = torch.stack([obs_slots, next_slots, *[obs_slots] * (tops.shape[0] - 2)])  # [V, B, k]
        # Every crop window of every frame as a view [F, C, H-S+1, W-S+1, S, S]; indexing slot, top and
        # left (not adjacent: the channel slice lies between them) puts the index dims first.
        windows = self.frames.unfold(2, crop_size, 1).unfold(3, crop_size, 1)
        crops = windows[view_slots, :, tops[:, :, None], lefts[:, :, None]]  # [V, B, k, C, S, S]
        crops = crops.flatten(2, 3)  # [V, B, k·C, S, S]
        scalars = self.scalars[index]
        return Batch(obs=crops[0], action=scalars[:, :-2], reward=scalars[:, -2:-1], next_obs=crops[1],
                     not_done=scalars[:, -1:], keys=list(crops[2:]), index=index, tops=tops, lefts=lefts)

    def state_dict(self) -> dict[str, Any]:
        n = self.size
        used = self.frame_capacity if self.frames_wrapped else self.frame_idx
        host = {name: getattr(self, name)[:count].to("cpu", copy=True)
                for name, count in (("frames", used), ("slots", n), ("scalars", n))}
        return {**host, "idx": self.idx, "size": self.size, "frame_idx": self.frame_idx,
                "frames_wrapped": self.frames_wrapped, "stack": list(self._stack)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in ("frames", "slots", "scalars"):
            getattr(self, name)[:len(state[name])] = state[name]
        self.idx, self.size, self.frame_idx = state["idx"], state["size"], state["frame_idx"]
        self.count.fill_(self.size)
        self.frames_wrapped = state["frames_wrapped"]
        self._stack = list(state["stack"])
