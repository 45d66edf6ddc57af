"""How a CURL agent is evaluated: the mean return of the deterministic policy tanh(μ), on centre crops, over
``eval_episodes`` episodes of an environment of its own.

The eval environment's seed depends only on the run's seed and the environment step it is evaluated at
(:func:`eval_seed`), not on the training history: a resumed run evaluates on the same episodes. Training
evaluates every ``eval_freq`` environment steps (its learning curve, ``domains.rl.curl``); the final
evaluation (:func:`final_evaluation`) gives the run's metric. :func:`make_env` makes the pixel environment
a config asks for, the training one and the evaluation ones alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from domains.rl.config import CurlConfig
from domains.rl.env import PixelEnv
from domains.rl.gym_envs import make_pixel_env

if TYPE_CHECKING:  # annotations only: domains.rl.curl imports this module
    from domains.rl.curl import CurlSac, Trained


def make_env(task: str, seed: int, cfg: CurlConfig) -> PixelEnv:
    return make_pixel_env(task, seed, action_repeat=cfg.action_repeat, image_size=cfg.image_size,
                          frame_stack=cfg.frame_stack)


def evaluate_agent(agent: CurlSac, env: PixelEnv, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` episodes with the deterministic policy tanh(μ) on centre crops."""
    returns = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed if e == 0 else None)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(agent.act(obs, sample=False))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return returns


def eval_seed(seed: int, env_step: int) -> int:
    """The eval environment's seed at a given point: independent of the training history (so a
    resumed run evaluates on the same episodes) and distinct across seeds and points."""
    return int(np.random.SeedSequence([seed, env_step, 7]).generate_state(1)[0])


def final_evaluation(trained: Trained, cfg: CurlConfig) -> list[float]:
    """The returns of the final evaluation (``eval_episodes`` episodes) of a trained agent."""
    env = make_env(trained.task, trained.eval_env_seed, cfg)
    try:
        return evaluate_agent(trained.agent, env, cfg.eval_episodes, trained.eval_env_seed)
    finally:
        env.close()
