"""Pixel environments for CURL on the Gymnasium API.

``DMControlEnv`` is a dm_control suite task as a ``gymnasium.Env``. ``PixelEnv`` turns any continuous-action
Gymnasium environment that renders ``rgb_array`` frames into what CURL sees: it repeats each action
``action_repeat`` times (summing the rewards, rendering only after the last repeat), renders
``3 x image_size x image_size`` frames and stacks the last ``frame_stack`` on the channel axis: with the
defaults an observation is ``uint8 [9, 100, 100]``, as in CURL. ``DMCEnv`` is a ``PixelEnv`` over a task of
the CURL benchmark. ``env_steps`` counts ENVIRONMENT steps (agent steps × action repeat), the unit of every
budget in this domain. Pixels and frame stacking are Gymnasium's wrappers; ours is only what Gymnasium lacks
(``ActionRepeat``). The registered ids (``dmc/cartpole-swingup-v0`` ...) are in ``domains.rl.gym_envs``.

Rendering needs an OpenGL backend. ``MUJOCO_GL=egl`` is tried first, ``osmesa`` second, each in a
subprocess (a failed backend cannot be undone inside a process); the first that renders is set before
dm_control is imported. A ``MUJOCO_GL`` set by the user is checked and kept.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import AddRenderObservation, FrameStackObservation, TransformObservation

from domains.base import require
from domains.errors import UserError
from domains.rl.config import EPISODE_ENV_STEPS, TASKS, TaskSpec

BACKENDS = ("egl", "osmesa")
_PROBE = (
    "import os\n"
    "from dm_control import mujoco\n"
    "p = mujoco.Physics.from_xml_string('<mujoco><worldbody><geom size=\"1\"/></worldbody></mujoco>')\n"
    "assert p.render(8, 8).shape == (8, 8, 3)\n"
    "print('ok', flush=True)\n"
    "os._exit(0)\n"  # skip dm_control's exit hooks, which complain about freeing the context late
)
_backend: str | None = None


def _renders(backend: str) -> bool:
    env = {**os.environ, "MUJOCO_GL": backend}
    env.pop("PYOPENGL_PLATFORM", None)  # dm_control derives it from MUJOCO_GL
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0 and out.stdout.strip() == "ok"


def _load_triton_first() -> None:
    """Load Triton (if installed) before any GL context exists. Mesa's software renderer (llvmpipe, used
    by both egl and osmesa without a GPU) and Triton each bring their own LLVM; when Triton comes second,
    as when torch first builds an optimiser after rendering started, the process segfaults."""
    if importlib.util.find_spec("triton") is not None:
        try:
            importlib.import_module("triton")
        except Exception:  # a broken Triton only matters to torch.compile, not to us
            pass


def rendering_backend() -> str:
    """The OpenGL backend dm_control renders with, chosen once per process (see the module docstring)."""
    global _backend
    if _backend is not None:
        return _backend
    require("dm_control", "rl")  # a missing package is a clearer error than a failed probe
    _load_triton_first()
    if "dm_control.mujoco" in sys.modules:  # already imported: its backend is fixed
        _backend = os.environ.get("MUJOCO_GL", "unknown")
        return _backend
    requested = os.environ.get("MUJOCO_GL")
    for backend in (requested,) if requested else BACKENDS:
        if _renders(backend):
            os.environ["MUJOCO_GL"] = backend
            _backend = backend
            return backend
    tried = f"MUJOCO_GL={requested}" if requested else "MUJOCO_GL=egl and MUJOCO_GL=osmesa"
    raise UserError(f"dm_control cannot render ({tried} failed). Install the OpenGL libraries, e.g. on "
                    "Debian/Ubuntu: apt-get install libegl1 libgl1 libosmesa6 (or unset MUJOCO_GL to let the "
                    "harness pick a backend)")


def task_spec(name: str) -> TaskSpec:
    """The settings of a task of the CURL benchmark; the one check of an unknown rl task name."""
    if name not in TASKS:
        raise UserError(f"unknown DeepMind Control task '{name}'; available: {', '.join(TASKS)}, "
                        "or gym:<Gymnasium id>")
    return TASKS[name]


class DMControlEnv(gym.Env):
    """One dm_control suite task as a ``gymnasium.Env``: one control step per ``step``, the flattened
    state as the observation, ``render()`` the frame (``uint8 [H, W, 3]``) of one persistent camera
    (``physics.render()`` would build a new scene on every call). Suite episodes end by their time
    limit (discount 1): truncated; a discount of 0 is a true terminal. ``reset(seed=...)`` reseeds the
    task's random state (initial positions, targets), as ``suite.load(..., task_kwargs={"random": seed})``."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, domain: str, task: str, seed: int | None = None, *, render_mode: str | None = "rgb_array",
                 image_size: int = 100, camera_id: int = 0):
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be 'rgb_array', got {render_mode!r}")
        rendering_backend()
        suite = require("dm_control.suite", "rl")
        self.render_mode = render_mode
        self._env = suite.load(domain, task, task_kwargs={"random": seed})
        self.metadata = {**self.metadata, "render_fps": round(1.0 / self._env.control_timestep())}
        spec = self._env.action_spec()
        shape = tuple(spec.shape)
        self.action_space = spaces.Box(np.broadcast_to(spec.minimum, shape).astype(np.float32),
                                       np.broadcast_to(spec.maximum, shape).astype(np.float32), dtype=np.float32)
        size = sum(int(np.prod(s.shape)) for s in self._env.observation_spec().values())
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float64)
        frame = self._env.physics.model.vis.global_
        if image_size > min(frame.offwidth, frame.offheight):  # dm_control's error tells how to edit the task's XML
            raise UserError(f"image_size {image_size} does not fit {domain}-{task}'s offscreen framebuffer "
                            f"({frame.offwidth}x{frame.offheight}): at most {min(frame.offwidth, frame.offheight)}")
        self._camera = require("dm_control.mujoco", "rl").Camera(self._env.physics, image_size, image_size,
                                                                 camera_id)

    @staticmethod
    def _state(time_step) -> np.ndarray:
        return np.concatenate([np.asarray(v, np.float64).reshape(-1) for v in time_step.observation.values()])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._env.task.random.seed(seed)
        return self._state(self._env.reset()), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = np.asarray(action, dtype=np.float64).reshape(self.action_space.shape)
        low, high = self.action_space.low, self.action_space.high
        if not np.all((action >= low - 1e-6) & (action <= high + 1e-6)):
            raise ValueError(f"action {action} is outside [{low}, {high}]")
        time_step = self._env.step(action)
        terminated = bool(time_step.last() and time_step.discount == 0.0)
        truncated = bool(time_step.last() and not terminated)
        return self._state(time_step), float(time_step.reward or 0.0), terminated, truncated, {}

    def render(self) -> np.ndarray:
        return self._camera.render()

    def rng_state(self) -> dict:
        return self._env.task.random.get_state(legacy=False)

    def set_rng_state(self, state: dict) -> None:
        self._env.task.random.set_state(state)

    def close(self) -> None:
        """Free the rendering context now rather than at interpreter exit (osmesa complains then)."""
        if self._camera is not None:
            self._camera = None
            self._env.physics.free()


class ActionRepeat(gym.Wrapper):
    """Repeat each action ``repeat`` times (fewer if the episode ends first), summing the rewards, and count
    ENVIRONMENT steps in ``env_steps``. Gymnasium has no such wrapper; placed below ``AddRenderObservation``
    it lets the pixel pipeline render once per agent step, after the last repeat."""

    def __init__(self, env: gym.Env, repeat: int):
        if repeat < 1:
            raise ValueError(f"action repeat must be >= 1, got {repeat}")
        super().__init__(env)
        self.repeat = repeat
        self.env_steps = 0  # environment steps taken since construction

    def step(self, action):
        reward, steps = 0.0, 0
        for _ in range(self.repeat):
            obs, r, terminated, truncated, info = self.env.step(action)
            reward += float(r)
            steps += 1
            if terminated or truncated:
                break
        self.env_steps += steps
        return obs, reward, terminated, truncated, {**info, "env_steps": steps}


def _resize(frame: np.ndarray, size: int) -> np.ndarray:
    from PIL import Image  # a dependency of matplotlib; Gymnasium's ResizeObservation needs OpenCV

    return np.asarray(Image.fromarray(frame).resize((size, size), Image.BILINEAR))


class PixelEnv(gym.Wrapper):
    """A continuous-action Gymnasium environment with ``render_mode="rgb_array"`` seen from pixels, as CURL
    sees it: observations ``uint8 [3·frame_stack, image_size, image_size]``, the last ``frame_stack`` frames
    on the channel axis, oldest first, the stack padded with the first frame after a reset.

    Gymnasium's wrappers do the work: ``AddRenderObservation`` (pixels), ``TransformObservation`` (resize,
    HWC -> CHW, stack -> channels) and ``FrameStackObservation``. Ours is only what Gymnasium lacks:
    ``ActionRepeat`` under the renderer (one render per agent step) and its ``env_steps`` count, plus the
    helpers CURL uses (``sample_action``, ``rng_state``). ``seed`` seeds the first ``reset()``."""

    def __init__(self, env: gym.Env, seed: int | None, *, action_repeat: int = 1, image_size: int = 100,
                 frame_stack: int = 3):
        check_pixel_source(env)
        self._repeat = ActionRepeat(env, action_repeat)
        pixels = AddRenderObservation(self._repeat)  # its constructor resets once, to measure a frame
        h, w, c = pixels.observation_space.shape
        if (h, w) != (image_size, image_size):
            pixels = TransformObservation(pixels, lambda f: _resize(f, image_size),
                                          spaces.Box(0, 255, (image_size, image_size, c), np.uint8))
        chw = TransformObservation(pixels, lambda f: np.ascontiguousarray(f.transpose(2, 0, 1)),
                                   spaces.Box(0, 255, (c, image_size, image_size), np.uint8))
        stacked = FrameStackObservation(chw, frame_stack, padding_type="reset")
        shape = (c * frame_stack, image_size, image_size)
        super().__init__(TransformObservation(stacked, lambda s: s.reshape(shape),
                                              spaces.Box(0, 255, shape, np.uint8)))
        self.action_repeat, self.image_size, self.frame_stack = action_repeat, image_size, frame_stack
        self.observation_shape = shape
        self.action_shape: tuple[int, ...] = env.action_space.shape
        self._pending_seed = seed  # the constructor's seed, for the first reset without one

    @property
    def env_steps(self) -> int:
        return self._repeat.env_steps

    @env_steps.setter
    def env_steps(self, value: int) -> None:  # restored from a checkpoint
        self._repeat.env_steps = value

    @property
    def spec(self) -> gym.envs.registration.EnvSpec | None:
        """The wrapped environment's spec: the pipeline is this class's, not a chain of wrappers to record
        (their lambdas would not compare equal), and a registered id's entry point builds all of it."""
        return self._repeat.env.spec

    @property
    def episode_env_steps(self) -> int:
        """The time limit of an episode in environment steps (the registered one, else dm_control's 1000)."""
        spec = self.spec
        return spec.max_episode_steps if spec is not None and spec.max_episode_steps else EPISODE_ENV_STEPS

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        if seed is None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)

    def sample_action(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random action (CURL's seed steps)."""
        return rng.uniform(self.action_space.low, self.action_space.high).astype(np.float32)

    def rng_state(self) -> dict:
        base = self.unwrapped
        return base.rng_state() if isinstance(base, DMControlEnv) else base.np_random.bit_generator.state

    def set_rng_state(self, state: dict) -> None:
        self._pending_seed = None  # a restored state replaces the constructor's seed
        base = self.unwrapped
        if isinstance(base, DMControlEnv):
            base.set_rng_state(state)
        else:
            base.np_random.bit_generator.state = state


def _name(env: gym.Env) -> str:
    return env.spec.id if env.spec is not None else type(env.unwrapped).__name__


def check_pixel_source(env: gym.Env) -> None:
    """What ``PixelEnv`` needs of the environment it wraps (a continuous action space, ``rgb_array``
    frames), checked without resetting or rendering it, so a run can be validated before it starts."""
    if not isinstance(env.action_space, spaces.Box):
        raise UserError(f"CURL needs a continuous (Box) action space; {_name(env)} has {env.action_space}")
    if env.render_mode != "rgb_array":
        raise UserError(f"{_name(env)} must render with render_mode='rgb_array', not {env.render_mode!r}")


class DMCEnv(PixelEnv):
    """A task of the CURL benchmark (``TASKS``) from pixels, rendered at ``image_size`` by the task's camera."""

    def __init__(self, task: str, seed: int | None, *, action_repeat: int | None = None, image_size: int = 100,
                 frame_stack: int = 3, camera_id: int | None = None):
        spec = task_spec(task)
        camera = spec.camera_id if camera_id is None else camera_id
        base = DMControlEnv(spec.domain, spec.task, seed, image_size=image_size, camera_id=camera)
        super().__init__(base, seed, action_repeat=action_repeat or spec.action_repeat, image_size=image_size,
                         frame_stack=frame_stack)
        self.task_name = task
