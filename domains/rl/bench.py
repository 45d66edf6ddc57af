"""Speed of the two halves of CURL: environment steps per second (physics + rendering + frame stacking,
random actions) per task, and gradient updates per second (critic + actor + EMA + contrastive, replay
sampling and cropping included, the replay buffer on the device) at batch 128 and 512.

Every row has ``what`` (``env_steps_per_s`` or ``updates_per_s``) and ``value`` in that unit; update rows
also have ``batch_size``, ``device``, ``cuda_graph`` (whether the updates were replayed from CUDA graphs:
on CUDA both ways, one row each), ``encoder_bf16`` (the convolutions in bf16: one more CUDA row),
``ms_per_update``, the milliseconds of each kind of update alone (``ms_with_actor``: with the actor, α and
target EMA parts; ``ms_without_actor``), ``sample_ms`` (one replay sample alone, eager) and on CUDA
``peak_memory_mb``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import losses
from domains.base import BenchPart
from domains.rl.config import TASKS, CurlConfig
from domains.rl.curl import CurlSac
from domains.rl.env import DMCEnv, rendering_backend
from domains.rl.graphed_updates import GraphedUpdates
from domains.rl.replay import ReplayBuffer


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


def update_speed(device: torch.device, batch_size: int, updates: int, cuda_graph: bool, encoder_bf16: bool = False,
                 action_dim: int = 1) -> dict[str, float]:
    """Updates per second as training runs them (replay sampling and crops included; the two kinds of
    update alternate), the milliseconds of each kind alone (with the actor, α and target EMA parts, and
    without), of one replay sample alone (indices, stacks and the three crops, eager), and on CUDA the peak
    of allocated memory (what decides how many runs share a GPU)."""
    cfg = CurlConfig(batch_size=batch_size, cuda_graph=cuda_graph, encoder_bf16=encoder_bf16)
    torch.manual_seed(0)
    agent = CurlSac(cfg, action_dim, 1e-3, losses.get("infonce"), device)
    buffer = filled_buffer(cfg, action_dim, device)
    updater = GraphedUpdates(agent, buffer, enabled=cfg.cuda_graph)

    def timed(fn: Callable[[int], Any], n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    # Warm-up: first allocations, CUDA context and kernels, cuDNN's choice of algorithms for both kinds of
    # update, and on CUDA the graphs' eager warm-up and capture (3 eager updates of each kind, then one capture).
    timed(updater, 8 if device.type == "cuda" else 2)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds = timed(updater, updates)
    half = max(updates // 2, 1)  # updates of each kind: even steps run the actor and EMA parts, odd ones do not
    with_actor = timed(lambda i: updater(2 * i), half) / half
    without_actor = timed(lambda i: updater(2 * i + 1), half) / half
    sample_s = timed(lambda _: buffer.sample(batch_size, cfg.crop_size, cfg.num_positives), updates)
    speed = {"updates_per_s": updates / seconds, "ms_with_actor": 1000.0 * with_actor,
             "ms_without_actor": 1000.0 * without_actor, "sample_ms": 1000.0 * sample_s / updates,
             "replayed": updater.replays > 0}
    if device.type == "cuda":
        speed["peak_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return speed


def benchmark(device: torch.device, quick: bool) -> list[BenchPart]:
    """One part per task's environment speed, then one per batch size's update speed."""
    tasks = ["cartpole-swingup"] if quick else list(TASKS)
    return [*(BenchPart(f"env {task}", lambda task=task: [env_row(task, quick)]) for task in tasks),
            *(BenchPart(f"updates B={batch}", lambda batch=batch: update_rows(device, batch, quick))
              for batch in (128, 512))]


def env_row(task: str, quick: bool) -> dict[str, Any]:
    return {"what": "env_steps_per_s", "task": task, "action_repeat": TASKS[task].action_repeat,
            "rendering": rendering_backend(), "value": round(env_steps_per_s(task, 100 if quick else 500), 1),
            "note": "environment steps (agent steps x action repeat), rendering 100x100 included"}


def update_rows(device: torch.device, batch: int, quick: bool) -> list[dict[str, Any]]:
    """On CUDA the updates replayed from CUDA graphs (training's default), eagerly, and graphed with the
    encoder's convolutions in bf16 (encoder_bf16, not the paper's float32); on the CPU eagerly."""
    settings = [(True, False), (False, False), (True, True)] if device.type == "cuda" else [(False, False)]
    rows = []
    for cuda_graph, bf16 in settings:
        if device.type == "cuda":
            n = 50 if quick else 200
        else:
            n = (2 if batch == 128 else 1) if quick else (20 if batch == 128 else 10)
        speed = update_speed(device, batch, n, cuda_graph, bf16)
        rate = speed["updates_per_s"]
        rows.append({"what": "updates_per_s", "device": str(device), "batch_size": batch,
                     "cuda_graph": speed["replayed"], "encoder_bf16": bf16, "value": round(rate, 3),
                     "ms_per_update": round(1000.0 / rate, 2),
                     "ms_with_actor": round(speed["ms_with_actor"], 2),
                     "ms_without_actor": round(speed["ms_without_actor"], 2),
                     "sample_ms": round(speed["sample_ms"], 3),
                     **({"peak_memory_mb": round(speed["peak_memory_mb"])} if "peak_memory_mb" in speed else {}),
                     "updates_timed": n,
                     "note": "one CURL+SAC update (critic, actor+alpha and EMA every 2nd, contrastive), "
                             "replay sampling and crops on the device included; ms_with_actor and "
                             "ms_without_actor: each kind of update alone"})
    return rows
