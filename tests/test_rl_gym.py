"""The rl domain on the Gymnasium API: the observations are the frames the hand-written wrapper produced
before the port (a naive reference on dm_control itself), ``check_env`` on every registered DeepMind Control id, and any
Gymnasium id as a dataset (``gym:Pendulum-v1``), with a clear error for a discrete action space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import domains


def _reference_observations(task: str, seed: int, rng: np.random.Generator) -> list[np.ndarray]:
    """What the pre-Gymnasium ``DMCEnv`` (commit 9a2f4cc) returned, written out naively on dm_control
    itself: reset (constructor seed, then ``task.random.seed(11)``), four random agent steps of
    ``action_repeat`` physics steps each, a frame rendered after the last repeat, the last three frames
    stacked channel-first (the first frame repeated at a reset). Rendered in the same process as the
    environment under test, so it holds on any OpenGL renderer."""
    from dm_control import suite

    from domains.rl.config import TASKS

    spec = TASKS[task]
    env = suite.load(spec.domain, spec.task, task_kwargs={"random": seed})
    low, high = env.action_spec().minimum, env.action_spec().maximum

    def frame() -> np.ndarray:
        return env.physics.render(100, 100, camera_id=spec.camera_id).transpose(2, 0, 1)

    observations = []
    for reset_seed in (None, 11):
        if reset_seed is not None:
            env.task.random.seed(reset_seed)
        env.reset()
        frames = [frame()] * 3
        observations.append(np.concatenate(frames))
        for _ in range(4):
            action = rng.uniform(low * np.ones(env.action_spec().shape), high * np.ones(env.action_spec().shape))
            for _ in range(spec.action_repeat):
                if env.step(action.astype(np.float32)).last():
                    break
            frames = [*frames[1:], frame()]
            observations.append(np.concatenate(frames))
    env.physics.free()
    return observations


@pytest.mark.parametrize("task,seed", [("cartpole-swingup", 0), ("reacher-easy", 3)])
def test_observations_match_the_pre_gymnasium_wrapper(rendering, task, seed):
    from domains.rl.env import DMCEnv

    env = DMCEnv(task, seed)
    rng = np.random.default_rng(seed)
    got = []
    for reset_seed in (None, 11):
        obs, _ = env.reset(seed=reset_seed)
        got.append(obs)
        for _ in range(4):
            obs, *_ = env.step(env.sample_action(rng))
            got.append(obs)
    env.close()
    expected = _reference_observations(task, seed, np.random.default_rng(seed))
    assert len(got) == len(expected) == 10
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.dtype == np.uint8 and a.shape == b.shape == (9, 100, 100), i
        assert np.array_equal(a, b), f"observation {i} differs"
    assert len({a.tobytes() for a in got}) > 5  # the frames move: the comparison is not of blank images


def _check_env_warnings(env) -> list[str]:
    """``check_env``'s warnings, less the one it always gives for a wrapper (the pixel pipeline is one) and
    the deprecations that libraries below ours raise while it runs (dm_control under NumPy 2.5 sets an array's
    shape), which say nothing of the environment."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    ours = str(Path(domains.__file__).parent)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env)
    return [str(w.message) for w in caught if "different from the unwrapped version" not in str(w.message)
            and not (issubclass(w.category, DeprecationWarning) and not w.filename.startswith(ours))]


@pytest.mark.parametrize("task", ["cartpole-swingup", "finger-spin", "reacher-easy", "cheetah-run", "walker-walk",
                                  "ball_in_cup-catch"])
def test_registered_curl_ids_pass_check_env(rendering, task):
    import gymnasium as gym

    import domains.rl.gym_envs  # noqa: F401  (registers the ids)
    from domains.rl.config import TASKS

    env = gym.make(f"dmc/{task}-v0", image_size=64)
    assert env.observation_space == gym.spaces.Box(0, 255, (9, 64, 64), np.uint8)
    assert isinstance(env.action_space, gym.spaces.Box) and env.render_mode == "rgb_array"
    assert env.unwrapped.action_space.shape == env.action_space.shape
    assert env.get_wrapper_attr("action_repeat") == TASKS[task].action_repeat
    assert _check_env_warnings(env) == []
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs) and env.render().shape == (64, 64, 3)
    env.close()


def test_generic_suite_id(rendering):
    import gymnasium as gym

    from domains.rl.gym_envs import register_suite

    ids = register_suite()
    assert {"dmc/hopper-hop-v0", "dmc/cartpole-balance-v0", "dmc/cartpole-swingup-v0"} <= set(ids)
    env = gym.make("dmc/cartpole-balance-v0", image_size=32, frame_stack=2, action_repeat=4)
    assert env.observation_space.shape == (6, 32, 32)
    env.reset(seed=1)
    *_, info = env.step(env.action_space.sample())
    assert info["env_steps"] == 4 and env.get_wrapper_attr("env_steps") == 4
    env.close()


def test_gym_dataset_pendulum_pixels_and_action_repeat():
    import gymnasium as gym
    from PIL import Image

    from domains.rl.gym_envs import make_pixel_env

    env = make_pixel_env("gym:Pendulum-v1", 5, action_repeat=3, image_size=48, frame_stack=2)
    assert env.observation_shape == (6, 48, 48) and env.episode_env_steps == 200
    # Pendulum's own action space [-2, 2] draws check_env's advice to normalise it; nothing else.
    assert all("symmetric and normalized" in w for w in _check_env_warnings(env))
    # Reference: Pendulum stepped by hand, rendered after the last repeat and resized independently.
    raw = gym.make("Pendulum-v1", render_mode="rgb_array")
    obs, _ = env.reset(seed=5)
    raw.reset(seed=5)
    start = env.env_steps  # check_env stepped it too
    for action in (np.array([1.5], np.float32), np.array([-2.0], np.float32)):
        obs, reward, *_, info = env.step(action)
        expected = sum(raw.step(action)[1] for _ in range(3))
        assert reward == pytest.approx(expected, rel=1e-6) and info["env_steps"] == 3
        frame = np.asarray(Image.fromarray(raw.render()).resize((48, 48), Image.BILINEAR)).transpose(2, 0, 1)
        assert np.array_equal(obs[3:6], frame)
    assert env.env_steps - start == 6
    # An episode is Pendulum's 200-step time limit: 67 agent steps at repeat 3, truncated.
    steps, done = 2, False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.zeros(1, np.float32))
        done, steps = terminated or truncated, steps + 1
    assert (steps, env.env_steps - start, terminated, truncated) == (67, 200, False, True)
    env.close()
    raw.close()


def test_gym_dataset_errors():
    from domains.errors import UserError
    from domains.rl.gym_envs import make_pixel_env

    with pytest.raises(UserError, match=r"continuous \(Box\) action space; CartPole-v1 has Discrete\(2\)"):
        make_pixel_env("gym:CartPole-v1", 0)
    with pytest.raises(UserError, match="did you mean 'gym:Pendulum-v1'"):
        make_pixel_env("gym:Pendulm-v1", 0)



def test_a_closed_pygame_env_leaves_dm_control_rendering(rendering):
    # Regression: pygame's SDL, on closing Pendulum, terminated the EGL display dm_control renders with.
    from domains.rl.env import DMCEnv
    from domains.rl.gym_envs import make_pixel_env

    before = DMCEnv("cartpole-swingup", 0)
    pendulum = make_pixel_env("gym:Pendulum-v1", 0)
    _check_env_warnings(pendulum)  # it makes, renders and closes another Pendulum
    pendulum.close()
    after = DMCEnv("cartpole-swingup", 0)
    for env in (before, after):
        obs, _ = env.reset()
        assert obs.std() > 0  # a real frame, not a blank one
        env.close()

def test_cli_run_on_a_gym_id(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from importlib.metadata import version
    from pathlib import Path

    cmd = [sys.executable, "-m", "harness", "run", "--domain", "rl", "--dataset", "gym:Pendulum-v1", "--seeds", "0",
           "--loss", "infonce", "--results", str(tmp_path), "--quiet", "--set", "num_env_steps=200",
           "--set", "action_repeat=4", "--set", "seed_agent_steps=40", "--set", "batch_size=16",
           "--set", "eval_episodes=1", "--set", "eval_freq=1000", "--set", "image_size=64", "--set", "crop_size=56"]
    repo = Path(__file__).resolve().parent.parent
    out = subprocess.run(cmd, cwd=repo, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (record,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert (record["status"], record["dataset"]) == ("completed", "gym:Pendulum-v1")
    assert record["data_fingerprint"]["env_id"] == "Pendulum-v1"
    assert record["data_fingerprint"]["gymnasium"] == version("gymnasium")
    # 200 env steps = 50 agent steps at repeat 4 (one Pendulum episode); updates start after 40.
    d = record["details"]
    assert (d["env_steps"], d["agent_steps"], d["action_repeat"], d["updates"]) == (200, 50, 4, 10)
    # Pendulum's reward is in [-16.3, 0] per step: an episode's return is below 0.
    assert -16.3 * 200 <= record["metrics"]["return"] <= 0.0

    discrete = subprocess.run([*cmd[:7], "gym:CartPole-v1", *cmd[8:]], cwd=repo, capture_output=True, text=True,
                              timeout=300)
    assert discrete.returncode == 2 and "continuous (Box) action space" in discrete.stderr


def test_fingerprint_names_the_env_id_and_gymnasium_version(rendering):
    from importlib.metadata import version

    import domains
    from domains.base import RunSpec
    from domains.rl.config import CurlConfig

    rl = domains.get("rl")
    spec = RunSpec(domain="rl", method="curl", dataset="cartpole-swingup", loss="infonce", loss_params={},
                   preset="quick", seed=0, config=CurlConfig())
    fp = rl.data_fingerprint(spec, None)
    assert (fp["env_id"], fp["gymnasium"], fp["action_repeat"]) == ("dmc/cartpole-swingup-v0", version("gymnasium"), 8)
