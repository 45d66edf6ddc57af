"""The DeepMind Control pixel environment (a ``gymnasium.Env``): spaces, observation shape and frame
stacking, action repeat against a raw dm_control environment stepped by hand, environment-step counting,
episode ends, seeding, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from domains.errors import UserError


def make(seed: int = 0, **kw):
    from domains.rl.env import DMCEnv

    return DMCEnv("cartpole-swingup", seed, **kw)


def test_observation_shape_and_frame_stack(rendering):
    import gymnasium as gym

    env = make()
    obs, info = env.reset()
    assert obs.shape == (9, 100, 100) and obs.dtype == np.uint8 and info == {}
    assert env.observation_shape == (9, 100, 100)
    assert isinstance(env, gym.Env) and env.observation_space == gym.spaces.Box(0, 255, (9, 100, 100), np.uint8)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32) and env.render_mode == "rgb_array"
    # After a reset the stack holds the first frame three times.
    assert np.array_equal(obs[0:3], obs[3:6]) and np.array_equal(obs[3:6], obs[6:9])
    rng = np.random.default_rng(0)
    for _ in range(3):
        new, reward, terminated, truncated, _ = env.step(env.sample_action(rng))
        # The stack shifts by one frame: the two newest old frames become the two oldest new ones.
        assert np.array_equal(new[0:6], obs[3:9])
        assert isinstance(reward, float) and not terminated and not truncated
        obs = new
    assert not np.array_equal(obs[0:3], obs[6:9])  # the cart moved
    env.close()


def test_action_repeat_matches_raw_dm_control(rendering):
    from dm_control import suite

    env = make(seed=3)
    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    obs, _ = env.reset()
    raw.reset()
    assert env.action_repeat == 8
    actions = [np.array([0.7]), np.array([-1.0]), np.array([0.2])]
    for i, action in enumerate(actions, start=1):
        obs, reward, *_ , info = env.step(action)
        expected = sum(raw.step(action).reward for _ in range(8))
        assert reward == pytest.approx(expected, abs=1e-12)
        assert info["env_steps"] == 8 and env.env_steps == 8 * i
        frame = raw.physics.render(100, 100, camera_id=0).transpose(2, 0, 1)
        assert np.array_equal(obs[6:9], frame)  # rendered once, after the last repeat
    env.close()
    raw.physics.free()


def test_episode_is_1000_environment_steps(rendering):
    env = make(action_repeat=50)  # 20 agent steps per episode keeps the test fast
    env.reset()
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(np.zeros(1))
        done = terminated or truncated
        steps += 1
    # Suite episodes end by the time limit: truncated, never terminated (the target still bootstraps).
    assert (steps, env.env_steps, terminated, truncated) == (20, 1000, False, True)
    env.close()


def test_default_action_repeat_per_task():
    from domains.rl.config import TASKS

    assert {name: t.action_repeat for name, t in TASKS.items()} == {
        "cartpole-swingup": 8, "finger-spin": 2, "walker-walk": 2, "cheetah-run": 4, "reacher-easy": 4,
        "ball_in_cup-catch": 4}


def test_seeding(rendering):
    def initial_qpos(env, seed=None):
        env.reset(seed=seed)
        return env.unwrapped._env.physics.data.qpos.copy()

    a, b, c = make(seed=1), make(seed=1), make(seed=2)
    assert np.array_equal(initial_qpos(a), initial_qpos(b))
    assert not np.array_equal(initial_qpos(make(seed=1)), initial_qpos(c))
    # reset(seed=...) reseeds whatever the construction seed.
    assert np.array_equal(initial_qpos(a, seed=9), initial_qpos(c, seed=9))
    for env in (a, b, c):
        env.close()


def test_bad_input(rendering):
    from domains.rl.env import DMCEnv

    with pytest.raises(UserError, match="unknown DeepMind Control task"):
        DMCEnv("cartpole-balance-sparse", 0)
    env = make()
    env.reset()
    with pytest.raises(ValueError, match="outside"):
        env.step(np.array([1.5]))
    env.close()


def test_backend_falls_back_to_osmesa_then_names_the_packages(monkeypatch):
    import sys

    from domains.rl import env as env_module

    monkeypatch.setattr(env_module, "_backend", None)
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delitem(sys.modules, "dm_control.mujoco", raising=False)
    tried = []
    monkeypatch.setattr(env_module, "_renders", lambda backend: tried.append(backend) or backend == "osmesa")
    assert env_module.rendering_backend() == "osmesa" and tried == ["egl", "osmesa"]
    assert env_module.os.environ["MUJOCO_GL"] == "osmesa"

    monkeypatch.setattr(env_module, "_backend", None)
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setattr(env_module, "_renders", lambda backend: False)
    with pytest.raises(UserError, match="libegl1 libgl1 libosmesa6"):
        env_module.rendering_backend()


def test_leaderboard_label_names_the_env_step_budget():
    import domains

    rl = domains.get("rl")
    config = {"batch_size": 512, "num_conv_layers": 4}
    assert rl.setting_note({**config, "num_env_steps": 5000}, "curl", "cartpole-swingup").startswith("5k env steps")
    assert rl.setting_note({**config, "num_env_steps": 100_000}, "curl", "cartpole-swingup") == \
        "100k env steps, batch 512, 4-layer conv encoder"
