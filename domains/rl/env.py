"""DeepMind Control from pixels behind a Gymnasium-style interface (our own thin wrapper, no gym needed).

``DMCEnv`` renders ``3 x image_size x image_size`` frames from the task's camera, repeats each action
``action_repeat`` times (summing the rewards, rendering only after the last repeat), and stacks the
last ``frame_stack`` frames on the channel axis: with the defaults an observation is ``uint8 [9, 100, 100]``,
as in CURL. ``reset(seed)`` returns ``(obs, info)``; ``step(action)`` returns
``(obs, reward, terminated, truncated, info)``. ``env_steps`` counts ENVIRONMENT steps (control steps of
the simulator, i.e. agent steps × action repeat), the unit of every budget in this domain.

Rendering needs an OpenGL backend. ``MUJOCO_GL=egl`` is tried first, ``osmesa`` second, each in a
subprocess (a failed backend cannot be undone inside a process); the first that renders is set before
dm_control is imported. A ``MUJOCO_GL`` set by the user is checked and kept.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import deque

import numpy as np

from domains.base import UserError, require
from domains.rl.config import TASKS, TaskSpec

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
    if name not in TASKS:
        raise UserError(f"unknown DeepMind Control task '{name}'; available: {', '.join(TASKS)}")
    return TASKS[name]


class DMCEnv:
    """A dm_control suite task from pixels, with action repeat and frame stacking (see module docstring)."""

    def __init__(self, task: str, seed: int, *, action_repeat: int | None = None, image_size: int = 100,
                 frame_stack: int = 3, camera_id: int | None = None):
        spec = task_spec(task)
        rendering_backend()
        suite = require("dm_control.suite", "rl")
        self.task_name = task
        self.action_repeat = action_repeat or spec.action_repeat
        self.image_size = image_size
        self.frame_stack = frame_stack
        self.camera_id = spec.camera_id if camera_id is None else camera_id
        self._env = suite.load(spec.domain, spec.task, task_kwargs={"random": seed})
        action_spec = self._env.action_spec()
        self.action_shape: tuple[int, ...] = tuple(action_spec.shape)
        self.action_low = np.asarray(action_spec.minimum, dtype=np.float32) * np.ones(self.action_shape, np.float32)
        self.action_high = np.asarray(action_spec.maximum, dtype=np.float32) * np.ones(self.action_shape, np.float32)
        self.observation_shape = (3 * frame_stack, image_size, image_size)
        self.env_steps = 0  # environment steps taken since construction
        self._frames: deque[np.ndarray] = deque(maxlen=frame_stack)
        # One camera for the whole run: physics.render() would build a new scene on every call.
        self._camera = require("dm_control.mujoco", "rl").Camera(self._env.physics, image_size, image_size,
                                                                 self.camera_id)

    def _render(self) -> np.ndarray:
        frame = self._camera.render()
        return np.ascontiguousarray(frame.transpose(2, 0, 1))  # HWC -> CHW, uint8

    def _obs(self) -> np.ndarray:
        return np.concatenate(list(self._frames), axis=0)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode; ``seed`` reseeds the task's random state (initial positions, targets)."""
        if seed is not None:
            self._env.task.random.seed(seed)
        self._env.reset()
        frame = self._render()
        for _ in range(self.frame_stack):
            self._frames.append(frame)
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Apply ``action`` for ``action_repeat`` environment steps (fewer if the episode ends first)."""
        action = np.asarray(action, dtype=np.float64).reshape(self.action_shape)
        if not np.all((action >= self.action_low - 1e-6) & (action <= self.action_high + 1e-6)):
            raise ValueError(f"action {action} is outside [{self.action_low}, {self.action_high}]")
        reward, steps, time_step = 0.0, 0, None
        for _ in range(self.action_repeat):
            time_step = self._env.step(action)
            reward += time_step.reward or 0.0
            steps += 1
            if time_step.last():
                break
        self.env_steps += steps
        self._frames.append(self._render())
        # Suite episodes end by their time limit (discount 1: truncated); discount 0 would be a true terminal.
        ended = time_step.last()
        terminated = bool(ended and time_step.discount == 0.0)
        return self._obs(), reward, terminated, bool(ended and not terminated), {"env_steps": steps}

    def sample_action(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random action (CURL's seed steps)."""
        return rng.uniform(self.action_low, self.action_high).astype(np.float32)

    def rng_state(self) -> dict:
        return self._env.task.random.get_state(legacy=False)

    def set_rng_state(self, state: dict) -> None:
        self._env.task.random.set_state(state)

    def close(self) -> None:
        """Free the rendering context now rather than at interpreter exit (osmesa complains then)."""
        self._camera = None
        self._env.physics.free()
