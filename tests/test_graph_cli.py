"""End to end through the CLI: every unsupervised loss on MUTAG from the data root (one ``harness sweep`` in a
subprocess: its jobs share one worker process, so the imports are paid once), two ``harness run`` on the
embedded default (in this process: what they check is the records' content, not the process), and the
missing-dataset error (a subprocess). One epoch and a reduced SVM (3 outer, 2 inner folds) keep each run to
seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

pytest.importorskip("torch_geometric")

LOSSES = ("jsd", "infonce", "dcl", "hcl", "pucl", "debiased_pos")
FAST = ["--set", "epochs=1", "--set", "svm_folds=3", "--set", "svm_inner_folds=2"]


def _harness(*args: str, tmp_path: Path, data_root: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    if data_root is not None:
        env["HARNESS_DATA_ROOT"] = str(data_root)
    proc = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    if proc.returncode == 2 and "invalid choice" in proc.stderr:
        pytest.skip("this harness has no such command yet")
    return proc


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def test_every_loss_on_mutag(tmp_path, data_root, data_set):
    data_set("TU", "MUTAG", "raw")
    results = tmp_path / "results"
    proc = _harness("sweep", "--domains", "graph", "--datasets", "MUTAG", "--losses", ",".join(LOSSES),
                    "--seeds", "0", "--workers", "1", "--results", str(results), *FAST,
                    tmp_path=tmp_path, data_root=data_root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = _records(results)
    assert sorted(r["loss"] for r in records) == sorted(LOSSES)
    for r in records:
        assert r["status"] == "completed", r
        assert r["domain"] == "graph" and r["method"] == "infograph" and r["dataset"] == "MUTAG"
        assert r["primary_metric"] == "accuracy" and 0.0 <= r["metrics"]["accuracy"] <= 100.0
        assert len(r["details"]["fold_accuracy"]) == 3 and len(r["details"]["chosen_C"]) == 3
        assert r["details"]["node_features"] == "one-hot node labels (7)"
        assert r["info"]["normalize"] is (r["loss"] != "jsd")
        assert r["info"]["temperature"] == (None if r["loss"] == "jsd" else 0.5)
        assert r["curve"][0]["epoch"] == 1 and r["curve"][0]["loss"] == r["curve"][0]["loss"]  # not NaN
        assert r["throughput"]["graphs_per_s"] > 0
        assert r["data_fingerprint"]["sha256"]
    assert next(r for r in records if r["loss"] == "pucl")["loss_params"] == {"alpha": 0.1, "c": 0.01}


@pytest.mark.parametrize("loss,anchor", [("jsd", "node"), ("pucl", "graph")])
def test_run_on_the_embedded_default(tmp_path, run_main, monkeypatch, loss, anchor):
    results = tmp_path / "results"
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    proc = run_main(main, "run", "--domain", "graph", "--loss", loss, "--seeds", "0", "--results", str(results),
                    "--set", f"anchor={anchor}", "--quiet", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (record,) = _records(results)
    assert record["status"] == "completed" and record["dataset"] == "synthetic-motifs"
    assert record["info"]["anchor"] == anchor and record["config"]["anchor"] == anchor
    assert record["data_fingerprint"]["source"] == "generated"
    assert record["details"]["node_features"].startswith("constant 1")
    assert 0.0 <= record["metrics"]["accuracy"] <= 100.0


def test_missing_dataset_through_the_cli(tmp_path):
    empty = tmp_path / "data"
    empty.mkdir()
    proc = _harness("run", "--domain", "graph", "--loss", "jsd", "--dataset", "NCI1", "--seeds", "0",
                    "--data-root", str(empty), "--results", str(tmp_path / "results"), "--set", "download=false",
                    "--quiet", tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert str(empty / "TU" / "NCI1" / "raw") in out, out
    assert "Traceback" not in out
