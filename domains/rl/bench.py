"""Speed of the two halves of CURL: environment steps per second (physics + rendering + frame stacking,
random actions) per task, and gradient updates per second (critic + actor + EMA + contrastive, buffer
sampling and cropping included) at batch 128 and 512."""

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


def updates_per_s(device: torch.device, batch_size: int, updates: int, action_dim: int = 1) -> float:
    cfg = CurlConfig(batch_size=batch_size)
    agent = CurlSac(cfg, action_dim, 1e-3, losses.get("infonce"), device)
    rng = np.random.default_rng(0)
    buffer = ReplayBuffer(1000, (3, cfg.image_size, cfg.image_size), cfg.frame_stack, action_dim, 125)
    frames = rng.integers(0, 256, size=(cfg.frame_stack * 3, cfg.image_size, cfg.image_size), dtype=np.uint8)
    buffer.start_episode(frames)
    for _ in range(buffer.capacity):
        buffer.add(rng.uniform(-1, 1, action_dim), 0.0, np.roll(frames, 1, axis=-1), 1.0)

    def run(n: int, first_step: int) -> None:
        for step in range(first_step, first_step + n):
            agent.update(buffer.sample(batch_size, rng), step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    run(1, 0)  # warm-up: first allocations, CUDA context and kernels
    t0 = time.perf_counter()
    run(updates, 1)
    return updates / (time.perf_counter() - t0)


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
        n = (3 if batch == 128 else 1) if quick else (20 if batch == 128 else 10)
        if device.type == "cuda":
            n *= 10
        rows.append({"what": "updates_per_s", "device": str(device), "batch_size": batch,
                     "value": round(updates_per_s(device, batch, n), 3),
                     "note": "one CURL+SAC update: critic, actor+alpha every 2nd, EMA every 2nd, contrastive"})
    return rows
