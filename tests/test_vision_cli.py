"""End to end through the CLI: one quick run per vision method on the embedded digits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

QUICK = ["--set", "epochs=1", "--set", "batch_size=256", "--set", "linear_epochs=2", "--set", "knn_every=1",
         "--set", "proj_dim=32"]
RUNS = {
    "simclr": ["--method", "simclr", "--loss", "dcl", "--set", "loss.tau_plus=0.1"],
    "cmc": ["--method", "cmc", "--loss", "unbiased", "--set", "num_negatives=512"],
    "moco": ["--method", "moco", "--loss", "pucl", "--set", "num_negatives=512"],
    "biased": ["--method", "biased", "--dataset", "biased-digits", "--loss", "eps_supinfonce",
               "--set", "loss.epsilon=0.5", "--set", "fairkl_lambda=0.75", "--set", "alpha=0.03"],
}


def _harness(args: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "vision", "--seeds", "0", "--device", "cpu",
           "--quiet", *args]
    # One thread per process: several share the cores, and oversubscribed threads crawl.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=Path(__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, dict]:
    """Run the four methods at once (each process is single-threaded) and read their records."""
    out = {}
    procs = {m: (_harness([*a, *QUICK, "--results", str(tmp_path_factory.mktemp(m))]),) for m, a in RUNS.items()}
    for method, (proc,) in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"{method}: {stdout}\n{stderr}"
        results = Path(proc.args[proc.args.index("--results") + 1])
        (path,) = results.glob("*.json")
        out[method] = json.loads(path.read_text())
    return out


@pytest.mark.parametrize("method", list(RUNS))
def test_quick_run_records_metrics(records, method):
    rec = records[method]
    assert rec["status"] == "completed" and rec["method"] == method and rec["domain"] == "vision"
    assert 0.0 <= rec["metrics"]["top1"] <= 100.0 and rec["metrics"]["top5"] >= rec["metrics"]["top1"]
    assert rec["curve"][0]["epoch"] == 1 and "knn_top1" in rec["curve"][0]
    assert rec["throughput"]["images_per_s"] > 0
    assert rec["config"]["epochs"] == 1


def test_biased_run_reports_group_accuracies(records):
    rec = records["biased"]
    assert {"aligned_top1", "conflicting_top1"} <= set(rec["metrics"])
    assert rec["loss_params"] == {"epsilon": 0.5}
    assert rec["details"]["test_bias_aligned_fraction"] == pytest.approx(0.1, abs=0.03)


def test_method_loss_mismatch_is_a_one_line_error(run_main):
    # a refusal: in this process (the quick runs above show the command's exit)
    proc = run_main(main, "run", "--domain", "vision", "--seeds", "0", "--device", "cpu", "--quiet", "--method",
                    "simclr", "--loss", "supcon", "--results", "/nonexistent-results")
    assert proc.returncode != 0
    assert "use --method biased" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
