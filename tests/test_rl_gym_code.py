"""A custom environment (``gym:<module>:<id>``) is code of the user's, as a loss plugin is: its module and the user's
modules it imports are part of the run's identity (an edited environment is another run, never the old record reused
or overwritten under the same id), and the record names the module with its digest (``software.dataset_code``: not a
plugin, which HARNESS_PLUGINS loads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tiny_domain import REPO, harness_env, synthetic_record

from domains.files import hash_jsonable
from harness.groups import group_records
from harness.records import RunRecord

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

from harness.records import RunRecord
from harness.run import reproduce_line
from tiny_domain import synthetic_record

software = software_info("rl", "infonce", "gym:myenv:MyPend-v0")
record = RunRecord.model_validate(synthetic_record("infonce", 0, 1.0, domain="rl", dataset="gym:myenv:MyPend-v0",
                                                   software=software))
print(json.dumps({"software": software, "reproduce": reproduce_line(record),
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
    software = first["software"]
    # The environment's module is the dataset's code, no plugin (the dataset spec imports it): its own field, and
    # the line that reproduces the run loads no plugin (it named HARNESS_PLUGINS=myenv).
    assert "plugins" not in software and set(software["dataset_code"]) == {"myenv"}
    assert "HARNESS_PLUGINS" not in first["reproduce"] and "rl --loss infonce" in first["reproduce"]
    # ... and part of the code's identity exactly as when it was recorded among the plugins
    assert software["package_digest"] == first["packages"] == first["builtin"] != software["source_digest"]
    assert software["source_digest"] == hash_jsonable({"packages": first["packages"],
                                                       "plugins": software["dataset_code"]})

    (tmp_path / "my_physics.py").write_text("G = 2.0\n")  # the helper the environment imports: other physics
    second = _probe(tmp_path)
    assert second["software"]["dataset_code"]["myenv"] != first["software"]["dataset_code"]["myenv"]
    assert second["run_hash"] != first["run_hash"] and second["builtin"] == first["builtin"]

    # Seeds of the two environments are two codes, never one mean: a group keeps its newest code's seeds.
    runs = [{**synthetic_record("infonce", seed, 50.0, domain="rl", dataset="gym:myenv:MyPend-v0",
                                software=probe["software"]), "finished_at": f"2026-01-0{seed + 1}T00:00:00+00:00"}
            for seed, probe in enumerate([first, first, second])]
    [group] = group_records(RunRecord.model_validate(r) for r in runs)
    assert sorted(group.values) == [2]
