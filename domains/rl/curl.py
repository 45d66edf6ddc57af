"""CURL: contrastive unsupervised representations with SAC, from pixels (Srinivas, Laskin & Abbeel 2020),
with any unsupervised loss of the core as the contrastive objective (Chuang et al. 2020 used DCL).

The algorithm, top to bottom, as in CURL's public code. Its parts live beside it: the replay buffer and the
crops in ``domains.rl.replay``, the encoder, actor and critic in ``domains.rl.models``, the evaluation of the
policy in ``domains.rl.evaluate``, the updates' CUDA graphs in ``domains.rl.graphed_updates``, and the update
statistics of the learning curve and the live trackers in ``domains.rl.update_stats``.

- Networks: actor and critic share the encoder's convolutions; each has its own linear + LayerNorm head.
  The actor never trains the convolutions (its gradient is cut after them); the critic and the contrastive
  loss do.
- SAC: entropy temperature learned from 0.1 with target entropy -|A|; the critic target (Q heads and
  encoder) follows the critic by EMA, τ=0.01 for the Q heads and τ=0.05 for the encoder, every 2 updates;
  the actor and α are updated every 2 updates. Every update reads random crops of a replay batch; acting
  reads the centre crop.
- Contrastive part: query q = f(crop₁(o)) from the online (critic) encoder, key k = f_EMA(crop₂(o)) from
  the critic target's encoder, detached; logits ``qᵢᵀ W kⱼ`` (B x B, a learned bilinear W) become a
  ``losses.Scores`` with the diagonal as positives and raw logits (no bound is known: min/max None).
  With ``num_positives=2`` a second key crop adds B columns: B x 2B logits, two positives per row.
  CURL's cross-entropy (after subtracting the row max, which no core loss depends on) is ``infonce``.
- Schedule: ``seed_agent_steps`` uniformly random actions, then one update per agent step (critic,
  actor and α every 2nd, target EMA every 2nd, contrastive every step), then the environment step.

Budgets and the learning curve are in ENVIRONMENT steps (agent steps × action repeat).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from typing_extensions import NotRequired

import losses
from domains.base import counted
from domains.checkpoint_extras import CheckpointExtras
from domains.context import RunContext
from domains.errors import NonFiniteLossError
from domains.rl.config import CurlConfig, TaskSpec
from domains.rl.evaluate import eval_seed, evaluate_agent, make_env
from domains.rl.graphed_updates import GraphedUpdates
from domains.rl.models import Actor, Critic, Encoder, ema_update, weight_init
from domains.rl.replay import Batch, ReplayBuffer, center_crop
from domains.rl.update_stats import curve_point, means_since, tracker_tags

# ------------------------------------------------------------------------------------------ the contrastive objective


def curl_scores(query: Tensor, keys: list[Tensor], W: Tensor) -> losses.Scores:
    """CURL's bilinear logits as ``Scores``: ``logits[i, m·B + j] = qᵢᵀ W k⁽ᵐ⁾ⱼ`` for the M key crops;
    the positives of row i are its own keys (columns m·B + i), every other column is a negative. The
    logits are raw (no temperature, no bound), so ``min_logit``/``max_logit`` stay None."""
    candidates = torch.cat(keys)  # [M·B, d]
    logits = query @ (W @ candidates.T)  # [B, M·B]
    pos = torch.eye(query.shape[0], dtype=torch.bool, device=logits.device).repeat(1, len(keys))
    return losses.Scores(logits, pos, ~pos)


# --------------------------------------------------------------------------------------------- the agent


@contextlib.contextmanager
def _cudnn_autotune() -> Iterator[None]:
    """cuDNN's benchmark mode for the duration: an update's convolutions have fixed shapes, so timing the
    algorithms once pays off (restored afterwards, as the flag is process-wide)."""
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class Schedule(NamedTuple):
    """Which parts an update runs besides the critic's step: the actor and α, the target EMA, the
    contrastive step (CURL runs them every N updates)."""

    actor: bool
    target: bool
    curl: bool

    @property
    def stats(self) -> tuple[str, ...]:
        """The names of the statistics such an update returns, in order."""
        return ("critic_loss", *(("actor_loss", "alpha") if self.actor else ()), *(("curl_loss",) if self.curl else ()))


class CurlSac:
    """The networks, optimisers and update rule of CURL + SAC (see the module docstring).

    On a GPU nothing in an update reads a device value on the host: losses come back as tensors, the schedule
    follows the step number, the core loss queues its checks on the device (tests/test_rl_graphs.py checks
    it op by op), so :class:`domains.rl.graphed_updates.GraphedUpdates` can capture it."""

    def __init__(self, cfg: CurlConfig, action_dim: int, lr: float, loss_fn, device: torch.device):
        self.cfg, self.device, self.loss_fn = cfg, torch.device(device), loss_fn
        obs_shape = (3 * cfg.frame_stack, cfg.crop_size, cfg.crop_size)
        encoder = Encoder(obs_shape, cfg.feature_dim, cfg.num_filters, cfg.num_conv_layers, bf16=cfg.encoder_bf16)
        self.critic = Critic(encoder, action_dim, cfg.hidden_dim).to(device)
        actor_encoder = Encoder(obs_shape, cfg.feature_dim, cfg.num_filters, cfg.num_conv_layers,
                                convs=encoder.convs, bf16=cfg.encoder_bf16)
        self.actor = Actor(actor_encoder, action_dim, cfg.hidden_dim, cfg.actor_log_std_min,
                           cfg.actor_log_std_max).to(device)
        self.critic.apply(weight_init)
        self.actor.trunk.apply(weight_init)
        self.actor.encoder.fc.apply(weight_init)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        if self.device.type == "cuda":
            # channels_last weights: each convolution then runs in NHWC (also on the crops' NCHW input), which
            # cuDNN runs faster for these thin layers: the four convolutions' forward and backward at batch 512
            # took 4.81 ms against 5.57 (float32) and 3.04 against 4.03 (encoder_bf16) on an H100, timed alone
            # (2026-11-26). The same numbers, laid out otherwise; the state dict's values are unchanged.
            for net in (self.critic, self.actor, self.critic_target):
                net.to(memory_format=torch.channels_last)
        self.W = nn.Parameter(torch.rand(cfg.feature_dim, cfg.feature_dim, device=device))
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=device, requires_grad=True)
        self.target_entropy = -float(action_dim)

        shared = {id(p) for p in encoder.convs.parameters()}
        actor_params = [p for p in self.actor.parameters() if id(p) not in shared]  # it never trains the convs
        encoder_params = list(self.critic.encoder.parameters())
        # On the GPU each optimiser steps all its tensors in one fused kernel; the CPU keeps torch's default.
        adam = functools.partial(torch.optim.Adam, fused=True) if self.device.type == "cuda" else torch.optim.Adam
        self.actor_opt = adam(actor_params, lr=lr, betas=(cfg.beta, 0.999))
        self.critic_opt = adam(self.critic.parameters(), lr=lr, betas=(cfg.beta, 0.999))
        self.alpha_opt = adam([self.log_alpha], lr=cfg.alpha_lr, betas=(cfg.alpha_beta, 0.999))
        # CURL's code steps the encoder on the contrastive loss with two Adam optimisers: its
        # encoder_optimizer, and its cpc_optimizer over the CURL module, whose parameters include that
        # encoder besides W. The published numbers come from that code, so we keep both.
        self.encoder_opt = adam(encoder_params, lr=lr)
        self.curl_opt = adam([self.W, *encoder_params], lr=lr)

    @property
    def alpha(self) -> Tensor:
        return self.log_alpha.exp()

    @torch.no_grad()
    def act(self, obs: np.ndarray, sample: bool) -> np.ndarray:
        """The action for one ``[C, H, W]`` observation, centre-cropped: a policy sample or tanh(μ)."""
        x = center_crop(torch.as_tensor(obs, device=self.device), self.cfg.crop_size)[None]
        mu, pi, _ = self.actor(x)
        return (pi if sample else mu)[0].cpu().numpy()

    def update_critic(self, obs: Tensor, action: Tensor, reward: Tensor, next_obs: Tensor,
                      not_done: Tensor) -> Tensor:
        with torch.no_grad():
            _, next_action, next_log_pi = self.actor(next_obs)
            tq1, tq2 = self.critic_target(next_obs, next_action)
            target_v = torch.min(tq1, tq2) - self.alpha * next_log_pi
            target_q = reward + not_done * self.cfg.discount * target_v
        q1, q2 = self.critic(obs, action)
        loss = F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.critic_opt.step()
        return loss.detach()

    def update_actor_and_alpha(self, h: Tensor) -> Tensor:
        """The actor and α step from the (detached) conv features ``h`` of the anchor crop: the actor's and
        the critic's encoders share their convolutions, which the actor loss never trains (CURL detaches
        them), so one pass serves both heads."""
        _, pi, log_pi = self.actor.policy(self.actor.encoder.head(h))
        q1, q2 = self.critic.q(self.critic.encoder.head(h), pi)
        actor_loss = (self.alpha.detach() * log_pi - torch.min(q1, q2)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = (self.alpha * (-log_pi - self.target_entropy).detach()).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        return actor_loss.detach()

    def contrastive_loss(self, query: Tensor, keys: list[Tensor]) -> Tensor:
        """The core loss on CURL's bilinear scores of queries against keys."""
        return self.loss_fn(curl_scores(query, keys, self.W))

    def update_curl(self, h: Tensor, key_obs: list[Tensor]) -> Tensor:
        """The contrastive step: queries from the conv features ``h`` of the anchor crop (with their
        gradient), keys from the key encoder on the other crops."""
        query = self.critic.encoder.head(h)
        with torch.no_grad():
            keys = [self.critic_target.encoder(k) for k in key_obs]
        loss = self.contrastive_loss(query, keys)
        self.encoder_opt.zero_grad(set_to_none=True)
        self.curl_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.encoder_opt.step()
        self.curl_opt.step()
        return loss.detach()

    def schedule(self, step: int) -> Schedule:
        """The parts of the update at agent step ``step`` (CURL's every-N schedule)."""
        cfg = self.cfg
        return Schedule(actor=step % cfg.actor_update_freq == 0, target=step % cfg.critic_target_update_freq == 0,
                        curl=step % cfg.curl_update_freq == 0)

    def update(self, batch: Batch, step: int) -> dict[str, Tensor]:
        """One CURL update on a replay batch; ``step`` is the agent step (it sets the every-2 schedule).
        Returns the losses (and α) as detached 0-d tensors, so that nothing waits for the device."""
        return self.update_parts(batch, self.schedule(step))

    def update_parts(self, batch: Batch, parts: Schedule) -> dict[str, Tensor]:
        """The update's ``parts`` on a replay batch; the statistics come back named and ordered as
        ``parts.stats``. Everything the update reads from the host is fixed by ``parts``, the config and the
        tensors' shapes: no value is read back from the device, so the update can be captured as a graph."""
        cfg = self.cfg
        with _cudnn_autotune() if self.device.type == "cuda" else contextlib.nullcontext():
            stats = {"critic_loss": self.update_critic(batch.obs, batch.action, batch.reward, batch.next_obs,
                                                       batch.not_done)}
            # From here to the contrastive step the convolutions stay as they are (the actor never trains
            # them, the EMA moves the target only), so CURL's two passes over the anchor crop (the actor's,
            # detached, and the query's) are one.
            h = self.critic.encoder.conv_features(batch.obs) if parts.curl else None
            if parts.actor:
                if h is None:
                    with torch.no_grad():
                        h_actor = self.critic.encoder.conv_features(batch.obs)
                else:
                    h_actor = h.detach()
                stats["actor_loss"] = self.update_actor_and_alpha(h_actor)
                stats["alpha"] = self.alpha.detach()
            if parts.target:
                ema_update(self.critic.q1, self.critic_target.q1, cfg.critic_tau)
                ema_update(self.critic.q2, self.critic_target.q2, cfg.critic_tau)
                ema_update(self.critic.encoder, self.critic_target.encoder, cfg.encoder_tau)
            if h is not None:
                stats["curl_loss"] = self.update_curl(h, batch.keys)
        return stats

    def optimisers(self) -> list[torch.optim.Optimizer]:
        return [getattr(self, name) for name in _OPTIMISERS]

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(), "W": self.W.detach().clone(),
                "log_alpha": self.log_alpha.detach().clone(),
                **{name: getattr(self, name).state_dict() for name in _OPTIMISERS}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.W.copy_(state["W"])
            self.log_alpha.copy_(state["log_alpha"])
        for name in _OPTIMISERS:
            getattr(self, name).load_state_dict(state[name])


_OPTIMISERS = ("actor_opt", "critic_opt", "alpha_opt", "encoder_opt", "curl_opt")


# --------------------------------------------------------------------------------------------- training


@dataclass
class Trained:
    """What training leaves for the final evaluation."""

    agent: CurlSac
    task: str
    action_repeat: int
    env_steps: int
    agent_steps: int
    updates: int
    eval_env_seed: int


class CurlExtras(CheckpointExtras):
    """What :func:`train` reads back from its checkpoint."""

    rng: dict[str, Any]  # the action sampler's bit generator state
    env_rng: dict[str, Any]  # the environment's generator state
    env_steps: int
    step: int
    updates: int
    replayed_updates: NotRequired[int]  # absent from checkpoints written before the graphs
    curve: list[dict[str, Any]]
    returns: list[float]
    update_time: float
    env_time: float
    recent: dict[str, Tensor]  # each update statistic since the last evaluation, stacked


def train(cfg: CurlConfig, task: TaskSpec, task_name: str, loss_fn, ctx: RunContext) -> tuple[Trained, dict]:
    """Run CURL for ``cfg.num_env_steps`` environment steps; checkpoint and resume through ``ctx``.

    Returns the trained agent and ``{"curve", "throughput", "info"}``; the curve has one point per
    evaluation (every ``eval_freq`` env steps, at the end of the episode that crosses it)."""
    env = make_env(task_name, ctx.seed, cfg)
    eval_env = make_env(task_name, ctx.seed + 1, cfg)
    repeat = env.action_repeat
    episode_length = math.ceil(env.episode_env_steps / repeat)
    total_agent_steps = math.ceil(cfg.num_env_steps / repeat)
    agent = CurlSac(cfg, env.action_shape[0], cfg.lr or task.lr, loss_fn, ctx.device)
    buffer = ReplayBuffer(cfg.buffer_capacity, (3, cfg.image_size, cfg.image_size), cfg.frame_stack,
                          env.action_shape[0], episode_length, device=ctx.device)
    rng = np.random.default_rng(ctx.seed)
    start, updates, replayed, curve, episode_returns = 0, 0, 0, [], []
    update_time = env_time = 0.0
    recent: dict[str, list[Tensor]] = {}  # the update statistics since the last evaluation, on the device
    tracked: dict[str, int] = {}  # how many of each the live trackers have had (a mean per episode)

    # The action sampler's and the environment's generators are their own: saved as extras.
    training = {"agent": agent, "buffer": buffer, "loss": loss_fn}
    state = ctx.restore_checkpoint(training, counters={"step": total_agent_steps}, extras=CurlExtras)
    if state is not None:
        rng.bit_generator.state = state["rng"]
        env.set_rng_state(state["env_rng"])
        env.env_steps = state["env_steps"]
        start, updates, curve, episode_returns = state["step"], state["updates"], state["curve"], state["returns"]
        replayed = state.get("replayed_updates", 0)  # absent from checkpoints written before the graphs
        update_time, env_time = state["update_time"], state["env_time"]
        recent = {key: list(values.to(ctx.device).unbind()) for key, values in state["recent"].items()}
        ctx.log(f"resumed from agent step {start} ({env.env_steps} environment steps)")
    # Made after the restore: it makes the restored optimisers capturable again.
    updater = GraphedUpdates(agent, buffer, enabled=cfg.cuda_graph, log=ctx.log)
    next_eval = (env.env_steps // cfg.eval_freq + 1) * cfg.eval_freq
    next_ckpt = (env.env_steps // cfg.checkpoint_freq + 1) * cfg.checkpoint_freq if cfg.checkpoint_freq else None
    # The agent step of the first contrastive update, whose loss is read on the host, once, with the critic loss
    # of the same update (one read): a non-finite contrastive loss there is the loss's own, no divergence (before
    # it the encoder had only the critic's steps of the same few updates, each moving a weight by about lr),
    # unless that critic loss is not finite already: then training diverged. Later updates read nothing: a
    # divergence shows in the next update's scores, which the loss core refuses.
    first_curl_step = math.ceil(cfg.seed_agent_steps / cfg.curl_update_freq) * cfg.curl_update_freq
    critic_steps = first_curl_step - cfg.seed_agent_steps + 1  # its own update's included

    obs, _ = env.reset()
    buffer.start_episode(obs)
    episode_return = 0.0
    for step in ctx.progress(range(start, total_agent_steps), desc=f"CURL {task_name}", total=total_agent_steps,
                             initial=start, steady_from=cfg.seed_agent_steps):
        if step < cfg.seed_agent_steps:
            action = env.sample_action(rng)
        else:
            action = agent.act(obs, sample=True)
            # On a GPU this times the host until the update's work is queued (one graph launch once
            # captured); the rest overlaps the environment step.
            t0 = time.perf_counter()
            stats = updater(step)
            for key, value in stats.items():
                recent.setdefault(key, []).append(value)
            update_time += time.perf_counter() - t0
            updates += 1
            if step == first_curl_step:  # after the timing: reading the losses waits for the device
                curl_loss, critic_loss = torch.stack([stats["curl_loss"], stats["critic_loss"]]).tolist()
                if not math.isfinite(critic_loss):
                    raise NonFiniteLossError(f"the critic loss is {critic_loss} at agent step {step} (the first "
                                             "contrastive update): training diverged; try a lower learning rate "
                                             "(--set lr=...)")
                ctx.check_loss(curl_loss, step, first=f"at the first contrastive update (agent step {step}), "
                                                      f"after {counted(critic_steps, 'critic step')} (its loss "
                                                      "finite)")
        t0 = time.perf_counter()
        obs, reward, terminated, truncated, _ = env.step(action)
        env_time += time.perf_counter() - t0
        # Time-limit ends bootstrap (CURL's "infinite bootstrap"); only a true terminal zeroes the target.
        buffer.add(action, reward, obs, 0.0 if terminated else 1.0)
        episode_return += reward
        if not (terminated or truncated):
            continue
        episode_returns.append(episode_return)
        if ctx.trackers:  # the episode's return and mean update statistics: one wait for the device an episode
            ctx.log_scalars(env.env_steps,
                            tracker_tags({"train_return": episode_return, **means_since(recent, tracked)}))
            tracked = {key: len(values) for key, values in recent.items()}
        episode_return = 0.0
        if env.env_steps >= next_eval and env.env_steps < cfg.num_env_steps:
            returns = evaluate_agent(agent, eval_env, cfg.eval_episodes, eval_seed(ctx.seed, env.env_steps))
            curve.append(curve_point(env.env_steps, step + 1, updates, returns, episode_returns, recent))
            # The evaluation's own scalars: this episode's return and update statistics are logged just above.
            evaluated = {k: v for k, v in curve[-1].items() if k not in recent and k != "train_return"}
            ctx.log_scalars(env.env_steps, {**evaluated, "env_steps_per_s": env.env_steps / max(env_time, 1e-9),
                                            "updates_per_s": updates / max(update_time, 1e-9)})
            recent, tracked = {}, {}
            ctx.log(f"{env.env_steps} env steps: eval return {np.mean(returns):.1f}")
            next_eval = (env.env_steps // cfg.eval_freq + 1) * cfg.eval_freq
        # A stop is saved here too (its run stops at the next step): an episode's end is where a run resumes.
        due = next_ckpt is not None and env.env_steps >= next_ckpt
        if (due or ctx.stop_requested) and step + 1 < total_agent_steps:
            ctx.save_checkpoint(
                training, rng=rng.bit_generator.state, env_rng=env.rng_state(), env_steps=env.env_steps,
                step=step + 1, updates=updates, replayed_updates=replayed + updater.replays, curve=curve,
                returns=episode_returns, update_time=update_time, env_time=env_time,
                recent={key: torch.stack(values) for key, values in recent.items()})
            if due:
                next_ckpt = (env.env_steps // cfg.checkpoint_freq + 1) * cfg.checkpoint_freq
        obs, _ = env.reset()
        buffer.start_episode(obs)
    env.close()
    eval_env.close()
    throughput = {"env_steps_per_s": env.env_steps / env_time if env_time else 0.0,
                  "updates_per_s": updates / update_time if update_time else 0.0}
    info = {"env_steps": env.env_steps, "agent_steps": total_agent_steps, "action_repeat": repeat,
            "step_unit": "environment steps", "updates": updates, "train_episode_returns": episode_returns,
            # What ran: how many updates were replayed from CUDA graphs (0 on the CPU, with cuda_graph off,
            # or where capture failed; the log then says why).
            "cuda_graph": {"replayed_updates": replayed + updater.replays, "eager_updates":
                           updates - replayed - updater.replays}}
    trained = Trained(agent, task_name, repeat, env.env_steps, total_agent_steps, updates,
                      eval_seed(ctx.seed, env.env_steps))
    return trained, {"curve": curve, "throughput": throughput, "info": info}
