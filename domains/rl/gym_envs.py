"""DeepMind Control as registered Gymnasium ids, and any Gymnasium id as an rl dataset.

Importing this module registers ``dmc/<task>-v0`` for the six tasks of the CURL benchmark (``dmc/cartpole-
swingup-v0`` ..., with CURL's action repeat and camera); ``register_suite()`` adds ``dmc/<domain>-<task>-v0``
for every other dm_control suite task (it imports dm_control, which fixes the OpenGL backend, so it is not
done on import). Each id makes a ``PixelEnv``: ``gymnasium.make("dmc/walker-walk-v0", frame_stack=3,
image_size=84)``.

A dataset ``gym:<id>`` is ``gymnasium.make(<id>, render_mode="rgb_array")`` put through the same pixel pipeline.
"""

from __future__ import annotations

import importlib
import os
import re

import gymnasium as gym

from domains.base import did_you_mean
from domains.errors import UserError
from domains.rl.config import GYM_PREFIX, TASKS, TaskSpec
from domains.rl.env import DMCEnv, DMControlEnv, PixelEnv, rendering_backend, task_spec


def dmc_id(domain: str, task: str) -> str:
    return f"dmc/{domain}-{task}-v0"


def make_dmc(domain: str, task: str, *, seed: int | None = None, render_mode: str = "rgb_array",
             action_repeat: int = 1, image_size: int = 100, frame_stack: int = 3, camera_id: int = 0) -> PixelEnv:
    """The entry point of every ``dmc/<domain>-<task>-v0`` id: a suite task from pixels."""
    base = DMControlEnv(domain, task, seed, render_mode=render_mode, image_size=image_size, camera_id=camera_id)
    return PixelEnv(base, seed, action_repeat=action_repeat, image_size=image_size, frame_stack=frame_stack)


def make_curl_task(task: str, *, seed: int | None = None, render_mode: str = "rgb_array", **kwargs) -> DMCEnv:
    """The entry point of the CURL benchmark's ids: ``DMCEnv`` with the task's action repeat and camera."""
    if render_mode != "rgb_array":
        raise ValueError(f"render_mode must be 'rgb_array', got {render_mode!r}")
    return DMCEnv(task, seed, **kwargs)


def _register(env_id: str, entry_point, **kwargs) -> None:
    if env_id not in gym.registry:
        # The time limit is the suite's own (the task ends the episode), so make() adds no TimeLimit.
        gym.register(env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=True)


for _name, _spec in TASKS.items():
    _register(dmc_id(_spec.domain, _spec.task), make_curl_task, task=_name)


def register_suite() -> list[str]:
    """Register ``dmc/<domain>-<task>-v0`` for every dm_control suite task; returns all ``dmc/`` ids."""
    rendering_backend()  # before dm_control is imported
    from dm_control import suite

    for domain, task in suite.ALL_TASKS:
        _register(dmc_id(domain, task), make_dmc, domain=domain, task=task)
    return sorted(env_id for env_id in gym.registry if env_id.startswith("dmc/"))


def is_gym_dataset(dataset: str) -> bool:
    return dataset.startswith(GYM_PREFIX)


def task_of(dataset: str) -> TaskSpec:
    """The CURL settings of a dataset: a benchmark task's, or defaults (action repeat 1) for ``gym:<id>``."""
    if is_gym_dataset(dataset):
        return TaskSpec("gym", dataset[len(GYM_PREFIX):], action_repeat=1)
    return task_spec(dataset)


# [<module>:][<namespace>/]<name>[-v<N>], as Gymnasium spells ids; the module (a dotted Python name) is one Gymnasium
# imports to register the id. Nothing else: the id is no path, and names no file.
GYM_ID = re.compile(r"(?:(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):)?(?:[\w-]+/)?\w[\w.-]*")


def env_module(dataset: str) -> tuple[str, ...]:
    """The module that ``gym:<module>:<id>`` names, imported (Gymnasium imports it to register the id: it is the
    environment's code, which the run's identity covers as a plugin's); () for any other dataset."""
    match = GYM_ID.fullmatch(dataset[len(GYM_PREFIX):]) if is_gym_dataset(dataset) else None
    if match is None or match["module"] is None:
        return ()
    try:
        importlib.import_module(match["module"])
    except Exception as exc:  # noqa: BLE001 - the user's module may raise anything on import: one line
        raise UserError(f"'{dataset}': module '{match['module']}' cannot be imported ({type(exc).__name__}: "
                        f"{exc})") from None
    return (match["module"],)


def make_gym(env_id: str) -> gym.Env:
    """``gymnasium.make(env_id, render_mode="rgb_array")``, with a user error naming what is wrong."""
    if not GYM_ID.fullmatch(env_id):
        raise UserError(f"'{GYM_PREFIX}{env_id}' is not a Gymnasium id ([module:][namespace/]name[-vN]: letters, "
                        "digits, '_', '-' and '.')")
    if env_id.startswith("dmc/"):
        register_suite()
    # Off-screen frames need no video driver. SDL's own (pygame renders classic control) would open an EGL
    # display and terminate it on close(), which is the display dm_control renders with in this process.
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        return gym.make(env_id, render_mode="rgb_array")
    except (gym.error.Error, ImportError) as exc:  # unknown id or module, a missing extra, a bad version ...
        hint = did_you_mean(env_id, list(gym.registry), prefix=GYM_PREFIX)
        raise UserError(f"cannot make Gymnasium environment '{env_id}'{hint} {exc}") from exc


def make_pixel_env(dataset: str, seed: int | None, *, action_repeat: int | None = None, image_size: int = 100,
                   frame_stack: int = 3) -> PixelEnv:
    """The environment of an rl dataset: a CURL benchmark task (``DMCEnv``) or ``gym:<id>`` from pixels."""
    if not is_gym_dataset(dataset):
        return DMCEnv(dataset, seed, action_repeat=action_repeat, image_size=image_size, frame_stack=frame_stack)
    env = make_gym(dataset[len(GYM_PREFIX):])
    try:
        return PixelEnv(env, seed, action_repeat=action_repeat or 1, image_size=image_size, frame_stack=frame_stack)
    except UserError:
        env.close()
        raise

