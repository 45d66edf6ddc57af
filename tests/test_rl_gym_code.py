"""A custom environment (``gym:<module>:<id>``) is code of the user's, as a loss plugin is: its module and the
user's modules it imports are part of the run's identity (an edited environment is another run, never the old
record reused or overwritten under the same id), and the record names the module with its digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tiny_domain import REPO, harness_env

ENV = ("import gymnasium as gym\nfrom gymnasium.envs.classic_control.pendulum import PendulumEnv\n"
       "from my_physics import G\n\n\nclass MyPend(PendulumEnv):\n"
       "    def __init__(self, render_mode=None):\n        super().__init__(render_mode=render_mode, g=G)\n\n\n"
       "gym.register('MyPend-v0', entry_point='myenv:MyPend', max_episode_steps=200)\n")
# What the harness computes of a run on the custom environment, and of one on a built-in Gymnasium id.
PROBE = """
import json
from domains.base import RunSpec
from domains.rl.config import CurlConfig
from harness.records import run_hash
from harness.version import package_digest, software_info

def spec(dataset):
    return RunSpec(domain="rl", method="curl", dataset=dataset, loss="infonce", loss_params={}, preset="quick",
                   seed=0, config=CurlConfig())

print(json.dumps({"software": software_info("rl", "infonce", "gym:myenv:MyPend-v0"),
                  "run_hash": run_hash(spec("gym:myenv:MyPend-v0"), {}),
                  "builtin": software_info("rl", "infonce", "gym:Pendulum-v1")["source_digest"],
                  "packages": package_digest()}))
"""


def _probe(envs: Path) -> dict:
    env = harness_env()
    env["PYTHONPATH"] = os.pathsep.join([str(envs), env["PYTHONPATH"]])
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_edited_custom_environment_or_its_helper_is_another_run(tmp_path):
    (tmp_path / "myenv.py").write_text(ENV)
    (tmp_path / "my_physics.py").write_text("G = 10.0\n")
    first = _probe(tmp_path)
    assert set(first["software"]["plugins"]) == {"myenv"}
    assert first["software"]["source_digest"] != first["packages"] == first["builtin"]

    (tmp_path / "my_physics.py").write_text("G = 2.0\n")  # the helper the environment imports: other physics
    second = _probe(tmp_path)
    assert second["software"]["plugins"]["myenv"] != first["software"]["plugins"]["myenv"]
    assert second["run_hash"] != first["run_hash"] and second["builtin"] == first["builtin"]
