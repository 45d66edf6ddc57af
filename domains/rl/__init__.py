"""Reinforcement learning: CURL with SAC on DeepMind Control from pixels, with any unsupervised loss of
the core as its contrastive objective (``infonce`` is CURL itself; the DCL paper used ``dcl``).

The environments are Gymnasium environments (``domains.rl.gym_envs`` registers ``dmc/<domain>-<task>-v0``);
besides the six tasks of the CURL benchmark, a dataset ``gym:<id>`` is any continuous-action Gymnasium
environment that renders ``rgb_array`` frames, seen from pixels the same way.

The metric is the mean return of the deterministic policy over ``eval_episodes`` episodes at the end
of training; budgets are ENVIRONMENT steps (agent steps × action repeat), as in the papers.
"""

from __future__ import annotations

import math
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

import losses
from domains import register
from domains.base import (
    BenchPart,
    DatasetSpec,
    Domain,
    EvalResult,
    KeptModel,
    OpenDatasets,
    Prepared,
    PretrainResult,
    RunSpec,
    Supplies,
)
from domains.context import RunContext
from domains.errors import UserError
from domains.rl.config import GYM_PREFIX, PRESETS, TASKS, CurlConfig, TaskSpec


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _is_gym_id(name: str) -> bool:
    return name.startswith(GYM_PREFIX)


def _gym_dataset(name: str) -> DatasetSpec:
    return DatasetSpec(name, f"Gymnasium environment {name[len(GYM_PREFIX):]} from pixels", needs_download=False)


def _task_line(name: str) -> str:
    t = TASKS[name]
    return (f"DeepMind Control {t.domain} {t.task} from pixels (Gymnasium id dmc/{name}-v0), action repeat "
            f"{t.action_repeat} (ships with dm_control; needs OpenGL rendering)")



def _check_updates(spec: RunSpec) -> None:
    """UserError when the random-action steps take the whole run: no update would run, and the record would be that
    of an untrained agent under the loss's name."""
    from domains.rl.gym_envs import task_of

    cfg = spec.config
    repeat = cfg.action_repeat or task_of(spec.dataset).action_repeat
    agent_steps = math.ceil(cfg.num_env_steps / repeat)
    if cfg.seed_agent_steps >= agent_steps:
        raise UserError(f"seed_agent_steps={cfg.seed_agent_steps} random-action steps take the whole run "
                        f"(num_env_steps={cfg.num_env_steps} at action_repeat {repeat} is {agent_steps} agent steps): "
                        "no update would run; raise num_env_steps or lower seed_agent_steps")

@register
class RLDomain(Domain):
    name = "rl"
    description = "CURL + SAC on DeepMind Control from pixels; metric: mean episode return (env-step budgets)"
    config_class = CurlConfig
    methods = {"curl": "CURL (Srinivas et al. 2020): SAC with a contrastive auxiliary loss on random crops"}
    default_method = "curl"
    # The CURL benchmark's tasks, and any ``gym:<id>`` on demand: ``name in datasets`` holds for every name with
    # the prefix (checked when the run is validated); iteration lists the named ones.
    datasets = OpenDatasets({
        **{name: DatasetSpec(name, _task_line(name), needs_download=False) for name in TASKS},
        "gym:Pendulum-v1": DatasetSpec("gym:Pendulum-v1", "Gymnasium's Pendulum from pixels, action repeat 1; any "
                                       "gym:<id> of a continuous-action environment with rgb_array rendering works "
                                       "the same way (--set action_repeat=N)", needs_download=False)},
        accepts=_is_gym_id, describe=_gym_dataset)
    default_dataset = "cartpole-swingup"
    # CURL's bilinear scores of a crop against the other crop of its frame: raw logits, read as probabilities
    # (CURL's own cross-entropy is infonce) or pair by pair; no labels.
    supplies = Supplies(scorings={losses.PROBABILITIES, losses.LOGITS})
    presets = PRESETS
    primary_metric = "return"
    higher_is_better = True
    baseline_loss = "infonce"
    # Its published rows and notes: page text, kept out of the run's code (Domain.published_module).
    published_module = "domains.rl.published"
    leaderboard_metrics = ("return_std",)

    def setting_note(self, config: dict[str, Any], method: str, dataset: str) -> str:
        # Budgets are environment steps (agent steps x action repeat), as the papers count them.
        return (f"{config['num_env_steps'] / 1000:g}k env steps, batch {config['batch_size']}, "
                f"{config['num_conv_layers']}-layer conv encoder")

    def resolve_config(self, config: CurlConfig, method: str, dataset: str) -> CurlConfig:
        from domains.rl.gym_envs import task_of

        task = task_of(dataset)  # None: the task's action repeat and learning rate
        return replace(config, action_repeat=config.action_repeat or task.action_repeat, lr=config.lr or task.lr)

    def dataset_code(self, dataset: str) -> tuple[str, ...]:
        from domains.rl.gym_envs import env_module

        return env_module(dataset)

    def validate(self, spec: RunSpec) -> None:
        if spec.method not in self.methods:
            raise UserError(f"unknown method '{spec.method}' for domain rl; available: {', '.join(self.methods)}")
        if spec.dataset.startswith(GYM_PREFIX):
            from domains.rl.env import check_pixel_source
            from domains.rl.gym_envs import make_gym

            env = make_gym(spec.dataset[len(GYM_PREFIX):])  # an unknown id, a missing extra: fail before the run
            try:
                check_pixel_source(env)  # discrete actions, no rgb_array frames: likewise
            finally:
                env.close()
        else:
            from domains.rl.env import task_spec

            task_spec(spec.dataset)  # an unknown task: likewise
        _check_updates(spec)

    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        """Nothing to load: the task (each seed makes its own environments from it), and what identifies the
        environment a run saw (its id and settings, the simulator's versions, the rendering backend)."""
        from domains.rl.gym_envs import dmc_id, task_of

        task = task_of(spec.dataset)
        cfg = spec.config
        common = {"dataset": spec.dataset, "action_repeat": cfg.action_repeat or task.action_repeat,
                  "image_size": cfg.image_size, "gymnasium": _version("gymnasium")}
        if spec.dataset.startswith(GYM_PREFIX):
            return Prepared(task, {**common, "env_id": task.task})
        from domains.rl.env import rendering_backend

        return Prepared(task, {**common, "env_id": dmc_id(task.domain, task.task),
                               "suite": f"{task.domain}-{task.task}", "camera_id": task.camera_id,
                               "dm_control": _version("dm_control"), "mujoco": _version("mujoco"),
                               "rendering": rendering_backend()})

    def pretrain(self, spec: RunSpec, ctx: RunContext, task: TaskSpec) -> PretrainResult:
        from domains.rl.curl import train

        trained, out = train(spec.config, task, spec.dataset, spec.make_loss(), ctx)
        return PretrainResult(model=trained, curve=out["curve"], throughput=out["throughput"], info=out["info"])

    def trained_modules(self, spec: RunSpec, pretrained: PretrainResult) -> KeptModel:
        """What CURL's own code saves (its ``save``: actor, critic): the actor, the critic and, on its own, the
        critic's encoder, which the contrastive loss trains and the actor shares the convolutions of."""
        agent = pretrained.model.agent
        action_dim = agent.actor.trunk[-1].out_features // 2  # the trunk gives the mean and log-std of each action
        return KeptModel({"encoder": agent.critic.encoder, "actor": agent.actor, "critic": agent.critic},
                         {"action_dim": action_dim})

    def build_modules(self, spec: RunSpec, build: dict[str, Any]) -> dict[str, torch.nn.Module]:
        """Built by CURL's agent itself, so that the actor shares the critic's convolutions as in training."""
        from domains.rl.curl import CurlSac

        cfg: CurlConfig = spec.config
        agent = CurlSac(cfg, build["action_dim"], cfg.lr, spec.make_loss(), torch.device("cpu"))
        return {"encoder": agent.critic.encoder, "actor": agent.actor, "critic": agent.critic}

    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext, task: TaskSpec) -> EvalResult:
        import numpy as np

        from domains.rl.evaluate import final_evaluation

        trained = pretrained.model
        returns = final_evaluation(trained, spec.config)
        final = {"env_steps": trained.env_steps, "agent_steps": trained.agent_steps, "updates": trained.updates,
                 "eval_return": float(np.mean(returns)), "eval_return_std": float(np.std(returns)),
                 "eval_episode_returns": [float(r) for r in returns]}
        metrics = {"return": float(np.mean(returns)), "return_std": float(np.std(returns)),
                   "env_steps": float(trained.env_steps)}
        details = {"task": trained.task, "env_steps": trained.env_steps, "agent_steps": trained.agent_steps,
                   "action_repeat": trained.action_repeat, "step_unit": "environment steps (agent steps x action "
                   "repeat)", "updates": trained.updates, "episode_returns": final["eval_episode_returns"],
                   "learning_curve": [*pretrained.curve, final]}
        return EvalResult(metrics=metrics, details=details)

    def benchmark(self, device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
        from domains.rl.bench import benchmark

        return benchmark(device, quick)
