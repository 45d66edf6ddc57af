"""A few hundred environment steps of CURL on cartpole through the real CLI, in a subprocess: the run
writes a completed record with a final evaluation and the environment-step bookkeeping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


pytestmark = pytest.mark.usefixtures("rendering")


def test_cli_smoke_run_writes_record_with_evaluation(tmp_path):
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "rl", "--loss", "dcl", "--seeds", "0",
           "--results", str(tmp_path), "--quiet", "--set", "loss.tau_plus=0.05",
           "--set", "num_env_steps=400", "--set", "seed_agent_steps=40", "--set", "batch_size=16",
           "--set", "eval_episodes=1", "--set", "eval_freq=1000"]
    # One thread, as the rest of the suite: the machine's cores are shared.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(records) == 1
    r = records[0]
    assert (r["status"], r["domain"], r["method"], r["dataset"], r["loss"]) == (
        "completed", "rl", "curl", "cartpole-swingup", "dcl")
    assert r["loss_params"]["tau_plus"] == 0.05 and r["config"]["num_env_steps"] == 400
    assert 0.0 <= r["metrics"]["return"] <= 1000.0
    d = r["details"]
    # 400 env steps = 50 agent steps at action repeat 8; learning starts after 40 of them.
    assert (d["env_steps"], d["agent_steps"], d["action_repeat"], d["updates"]) == (400, 50, 8, 10)
    assert d["step_unit"].startswith("environment steps")
    assert d["learning_curve"][-1]["env_steps"] == 400 and len(d["episode_returns"]) == 1
    assert r["throughput"]["updates_per_s"] > 0 and r["throughput"]["env_steps_per_s"] > 0
