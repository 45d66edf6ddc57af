"""The arguments of CURL with SAC (Srinivas, Laskin & Abbeel 2020), the six DeepMind Control tasks of its
benchmark, and the presets.

Units: every budget is counted in ENVIRONMENT steps (agent steps × action repeat), as the papers do:
"100k" is 100,000 environment steps, i.e. 12,500 agent steps on cartpole (action repeat 8). The one
exception is ``seed_agent_steps``, counted in agent steps as CURL's ``--init_steps``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from pydantic import ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from domains.base import ADDED, RUNTIME, Preset


@dataclass(frozen=True)
class TaskSpec:
    """A DeepMind Control task and the per-task settings of the CURL paper."""

    domain: str  # dm_control.suite domain, e.g. "cartpole"
    task: str  # e.g. "swingup"
    action_repeat: int
    lr: float = 1e-3  # learning rate of actor, critic and encoder (CURL: 2e-4 for cheetah)
    camera_id: int = 0  # CURL renders camera 0 (camera 2 for quadruped)


TASKS: dict[str, TaskSpec] = {
    "cartpole-swingup": TaskSpec("cartpole", "swingup", action_repeat=8),
    "finger-spin": TaskSpec("finger", "spin", action_repeat=2),
    "reacher-easy": TaskSpec("reacher", "easy", action_repeat=4),
    "cheetah-run": TaskSpec("cheetah", "run", action_repeat=4, lr=2e-4),
    "walker-walk": TaskSpec("walker", "walk", action_repeat=2),
    "ball_in_cup-catch": TaskSpec("ball_in_cup", "catch", action_repeat=4),
}

# A dataset named GYM_PREFIX + <Gymnasium id> is that environment from pixels (domains.rl.gym_envs).
GYM_PREFIX = "gym:"

# Every task above runs 1000 control steps per episode (dm_control's default time limit), so an
# episode is 1000 environment steps whatever the action repeat, and its return lies in [0, 1000].
EPISODE_ENV_STEPS = 1000


Rate = Annotated[float, Field(ge=0.0, le=1.0)]
AdamBeta = Annotated[float, Field(ge=0.0, lt=1.0)]  # Adam's beta1: torch takes [0, 1)


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class CurlConfig:
    """CURL + SAC arguments. Defaults are the quick CPU setting; the presets give the paper's. Every range is a
    constraint on its field, checked when the config is built."""

    # Budget and evaluation (environment steps).
    num_env_steps: PositiveInt = 2000
    eval_freq: PositiveInt = 1000  # evaluate every this many environment steps (at the next episode end)
    eval_episodes: PositiveInt = 2
    # checkpoint (networks, optimisers, replay buffer) every N env steps; 0: never. Runtime: a resumed run
    # continues exactly, so it is recorded, not hashed. 2,500: the cpu and regression presets (10k steps, minutes
    # on a CPU) checkpoint three times before their end, so a Ctrl-C or a kill loses minutes, not the whole run.
    checkpoint_freq: NonNegativeInt = field(default=2_500, metadata={RUNTIME: True})
    # uniformly random actions before learning (agent steps, CURL: 1000); at least 1: the first update samples the
    # replay buffer, which holds nothing before a step
    seed_agent_steps: PositiveInt = 200
    # Observations.
    action_repeat: PositiveInt | None = None  # None: the task's (8 cartpole, 2 finger/walker, 4 otherwise)
    frame_stack: PositiveInt = 3
    image_size: PositiveInt = 100  # rendered size
    crop_size: PositiveInt = 84  # random crop for training, centre crop for acting and evaluation
    # Replay and optimisation.
    buffer_capacity: PositiveInt = 100_000  # transitions (agent steps)
    # quick; the presets set theirs; 2: a negative. The paper presets' 512 on every task is the CURL authors' word
    # for their final runs (MishaLaskin/curl issue 15), not their paper's table or scripts (--batch_size 128).
    batch_size: Annotated[int, Field(ge=2)] = 64
    # On CUDA, replay each kind of update (with and without the actor/EMA parts) from a CUDA graph, replay
    # sampling included (domains.graphed); no effect on the CPU. The same updates with the launches batched:
    # a runtime field (float differences at most, of the order another cuDNN algorithm gives).
    cuda_graph: bool = field(default=True, metadata={RUNTIME: True})
    lr: PositiveFloat | None = None  # actor, critic and encoder learning rate; None: the task's (1e-3, cheetah 2e-4)
    beta: AdamBeta = 0.9  # Adam beta1 of actor, critic (CURL's actor_beta, critic_beta)
    # SAC.
    hidden_dim: PositiveInt = 1024
    discount: Rate = 0.99
    init_temperature: PositiveFloat = 0.1  # SAC's initial alpha; learnt as log(alpha)
    alpha_lr: PositiveFloat = 1e-4
    alpha_beta: AdamBeta = 0.5
    actor_log_std_min: float = -10.0
    actor_log_std_max: float = 2.0
    actor_update_freq: PositiveInt = 2
    critic_tau: Rate = 0.01
    critic_target_update_freq: PositiveInt = 2
    # Encoder and the contrastive part.
    feature_dim: PositiveInt = 50
    num_filters: PositiveInt = 32
    num_conv_layers: PositiveInt = 4
    encoder_tau: Rate = 0.05  # EMA rate of the key encoder (the critic target's encoder)
    # bf16 autocast for the encoder's convolutions (all encoders: online, target, acting), features back in
    # float32 for the heads, SAC and the contrastive loss. Not the paper's (it ran float32): on a GPU it halves
    # the memory traffic of the conv passes, most of an update's device time at batch 512; it changes the
    # arithmetic (bf16's 8-bit mantissa in the convolutions), so it is part of the run's identity. Off by default.
    encoder_bf16: bool = field(default=False, metadata={ADDED: True})
    curl_update_freq: PositiveInt = 1
    # M: key crops per query (the DCL paper's M); 2 adds a second random crop (B x 2B logits)
    num_positives: Annotated[int, Field(ge=1, le=2)] = 1

    @model_validator(mode="after")
    def _check_combinations(self) -> CurlConfig:
        """The rules a single field's constraint cannot say."""
        if self.crop_size > self.image_size:
            raise ValueError(f"crop_size ({self.crop_size}) must not exceed image_size ({self.image_size})")
        least = 4 * self.num_conv_layers - 1  # (make_convs) a 3x3 stride-2 layer, then 3x3 ones: one pixel left
        if self.crop_size < least:
            raise ValueError(f"crop_size must be >= {least} for {self.num_conv_layers} conv layers (each 3x3 layer "
                             f"shrinks the image, the first halves it; 4*num_conv_layers-1), got {self.crop_size}")
        if self.actor_log_std_min > self.actor_log_std_max:
            raise ValueError(f"actor_log_std_min ({self.actor_log_std_min}) must not exceed actor_log_std_max "
                             f"({self.actor_log_std_max}): the policy's log std is squashed into [min, max]")
        return self


_PAPER = dict(eval_freq=10_000, eval_episodes=10, seed_agent_steps=1000, batch_size=512, checkpoint_freq=10_000)

PRESETS: dict[str, Preset] = {
    "quick": Preset("smoke scale, not a result: 2k env steps (cartpole: 200 random agent steps, then 50 updates "
                    "at batch 64), 2 eval episodes; about 70 s a seed on one CPU core, under 4 minutes for the 3 "
                    "seeds", {}),
    "cpu": Preset("reduced-step CPU protocol, not the paper's: 10k env steps, batch 32, 100 seed agent steps, "
                  "eval every 2.5k env steps with 5 episodes (cartpole: 1150 updates, about 14 CPU-minutes)",
                  dict(num_env_steps=10_000, eval_freq=2500, eval_episodes=5, seed_agent_steps=100, batch_size=32)),
    "regression": Preset("the regression suite's setting (harness/suites/regression.txt), not the paper's: a "
                         "scaled-down CURL (64x64 frames cropped to 56, 16 filters, hidden 1024 -> 256) for 10k env "
                         "steps at batch 32 after 100 seed agent steps (cartpole: 1150 updates), 5 final eval "
                         "episodes, 3 seeds; about 2 CPU-minutes a seed on one core and 2.3 GB of memory (the "
                         "100k-transition replay buffer). A smoke test, not a measurement: infonce returned 205, 192 "
                         "and 180, and an untrained agent 116, 17 and 20 (3 initialisations, 5 episodes each): "
                         "the gate catches a crash or a missing record here, not a drop of a few points",
                         dict(num_env_steps=10_000, eval_freq=10_000, eval_episodes=5, seed_agent_steps=100,
                              batch_size=32, image_size=64, crop_size=56, num_filters=16, hidden_dim=256),
                         seeds=(0, 1, 2)),
    "paper": Preset("CURL/DCL protocol at 100k environment steps: batch 512 (the CURL authors' word for their "
                    "final runs, MishaLaskin/curl issue 15; their scripts pass 128), eval every 10k env steps with "
                    "10 episodes, 1000 seed agent steps", dict(num_env_steps=100_000, **_PAPER)),
    "100k": Preset("same as paper: 100k environment steps", dict(num_env_steps=100_000, **_PAPER)),
    "500k": Preset("CURL's second benchmark: 500k environment steps, batch 512",
                   dict(num_env_steps=500_000, **{**_PAPER, "checkpoint_freq": 20_000})),
}
