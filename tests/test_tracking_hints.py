"""How to view the live logs: ``harness sweep`` prints, once, the command for each tracker it uses (its jobs run
quietly, in other processes), the same one ``harness run`` prints (``tracking.view_hint``)."""

from __future__ import annotations

import glob
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from tiny_domain import harness

from harness.run import tracking


def _missing(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (the [{module}] extra)")


def _sweep(results: Path, tracker: str) -> subprocess.CompletedProcess:
    out = harness("sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--set", "epochs=1",
                  "--workers", "1", "--results", str(results), "--tracker", tracker, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def _tracking_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("tracking: ")]


def _records(results: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(results.glob("*.json"))]


@_missing("wandb")
def test_a_wandb_sweep_says_once_how_to_upload_its_offline_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = _sweep(tmp_path, "wandb")
    hint = f"wandb sync {tmp_path / 'wandb'}/offline-run-*"
    assert _tracking_lines(out) == [f"tracking: {hint}"]
    # the pattern (the shell expands it) names every job's offline run
    folders = {str(tmp_path / r["info"]["tracking"]["wandb"]) for r in _records(tmp_path)}
    assert len(folders) == 2 and set(glob.glob(hint.split()[-1])) == folders


@_missing("mlflow")
def test_an_mlflow_sweep_says_once_how_to_view_its_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    out = _sweep(tmp_path, "mlflow")
    uri = f"file:{tmp_path / 'mlruns'}"
    assert _tracking_lines(out) == [f"tracking: mlflow ui --backend-store-uri {uri}"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)  # the store the line names holds every job's run
    runs = client.search_runs([client.get_experiment_by_name("contrastive-harness").experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(r["run_id"] for r in _records(tmp_path))


@_missing("wandb")
def test_a_disabled_wandb_prints_no_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")  # W&B keeps nothing: there is nothing to view
    out = harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                  "--results", str(tmp_path), "--tracker", "wandb")
    assert out.returncode == 0, out.stderr
    assert _tracking_lines(out) == []  # was "tracking: None"


def test_the_hint_of_each_tracker_and_wandb_mode(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    results = tmp_path / "my results"  # quoted: the command pastes as one argument
    assert tracking.view_hint("tensorboard", results) == f"tensorboard --logdir '{results}/tb'"
    assert tracking.view_hint("mlflow", results) == f"mlflow ui --backend-store-uri 'file:{results}/mlruns'"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://localhost:5000")
    assert tracking.view_hint("mlflow", results) == "mlflow ui --backend-store-uri http://localhost:5000"
    for mode, hint in ((None, f"wandb sync '{results}/wandb'/offline-run-*"),
                       ("dryrun", f"wandb sync '{results}/wandb'/offline-run-*"),
                       ("disabled", None),
                       ("online", "W&B project contrastive-harness (online): each run's page is named by its run id")):
        if mode is None:
            monkeypatch.delenv("WANDB_MODE", raising=False)
        else:
            monkeypatch.setenv("WANDB_MODE", mode)
        assert tracking.view_hint("wandb", results) == hint, mode
