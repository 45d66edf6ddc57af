"""Speed of the two halves of CURL: environment steps per second (physics + rendering + frame stacking,
random actions) per task, and gradient updates per second (critic + actor + EMA + contrastive, replay
sampling and cropping included, the replay buffer on the device) at batch 128 and 512.

Every row has ``what`` (``env_steps_per_s`` or ``updates_per_s``) and ``value`` in that unit; update rows
also have ``batch_size``, ``device``, ``ms_per_update`` and ``sample_ms`` (one replay sample alone: the
part of an update that the old host-side buffer spent copying)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

import losses
from domains.rl.config import TASKS, CurlConfig
from domains.rl.curl import CurlSac, ReplayBuffer
from domains.rl.env import DMCEnv, rendering_backend


def env_steps_per_s(task: str, agent_steps: int) -> float:
    env = DMCEnv(task, seed=0)
    rng = np.random.default_rng(0)
    try:
        env.reset()
        start, t0 = env.env_steps, time.perf_counter()
        for _ in range(agent_steps):
            _, _, terminated, truncated, _ = env.step(env.sample_action(rng))
            if terminated or truncated:
                env.reset()
        return (env.env_steps - start) / (time.perf_counter() - t0)
    finally:
        env.close()


def filled_buffer(cfg: CurlConfig, action_dim: int, device: torch.device, capacity: int = 1000) -> ReplayBuffer:
    """A full replay buffer of random frames in episodes of 125 agent steps (cartpole's length)."""
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(capacity, (3, cfg.image_size, cfg.image_size), cfg.frame_stack, action_dim, 125, device)
    obs = rng.integers(0, 256, size=(cfg.frame_stack * 3, cfg.image_size, cfg.image_size), dtype=np.uint8)
    for i in range(capacity):
        if i % 125 == 0:
            buffer.start_episode(obs)
        obs = np.concatenate([obs[3:], rng.integers(0, 256, size=(3, cfg.image_size, cfg.image_size),
                                                    dtype=np.uint8)])
        buffer.add(rng.uniform(-1, 1, action_dim), float(rng.normal()), obs, 1.0)
    return buffer


def update_speed(device: torch.device, batch_size: int, updates: int, action_dim: int = 1) -> dict[str, float]:
    """Updates per second (replay sampling and crops included) and, alone, the milliseconds of one
    replay sample (indices, stacks and the three crops)."""
    cfg = CurlConfig(batch_size=batch_size)
    agent = CurlSac(cfg, action_dim, 1e-3, losses.get("infonce"), device)
    buffer = filled_buffer(cfg, action_dim, device)

    def timed(fn, n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    def sample(_: int):
        return buffer.sample(batch_size, cfg.crop_size, cfg.num_positives)

    # Warm-up: first allocations, CUDA context and kernels, cuDNN's choice of algorithms for both kinds
    # of update (with and without the actor and EMA steps).
    warmup = 2 if device.type == "cuda" else 1
    timed(lambda step: agent.update(sample(step), step), warmup)
    seconds = timed(lambda i: agent.update(sample(i), warmup + i), updates)
    sample_s = timed(sample, updates)
    return {"updates_per_s": updates / seconds, "sample_ms": 1000.0 * sample_s / updates}


def benchmark(device: torch.device, quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    backend = rendering_backend()
    tasks = ["cartpole-swingup"] if quick else list(TASKS)
    for task in tasks:
        rate = env_steps_per_s(task, 100 if quick else 500)
        rows.append({"what": "env_steps_per_s", "task": task, "action_repeat": TASKS[task].action_repeat,
                     "rendering": backend, "value": round(rate, 1),
                     "note": "environment steps (agent steps x action repeat), rendering 100x100 included"})
    for batch in (128, 512):
        if device.type == "cuda":
            n = 50 if quick else 200
        else:
            n = (3 if batch == 128 else 1) if quick else (20 if batch == 128 else 10)
        speed = update_speed(device, batch, n)
        rate = speed["updates_per_s"]
        rows.append({"what": "updates_per_s", "device": str(device), "batch_size": batch, "value": round(rate, 3),
                     "ms_per_update": round(1000.0 / rate, 2), "sample_ms": round(speed["sample_ms"], 3),
                     "updates_timed": n,
                     "note": "one CURL+SAC update (critic, actor+alpha and EMA every 2nd, contrastive), "
                             "replay sampling and crops on the device included"})
    return rows
