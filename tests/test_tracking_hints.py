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


INSTALLED = [t for t in ("wandb", "mlflow") if importlib.util.find_spec(t) is not None]


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One sweep of two jobs with each installed tracker of W&B (offline) and MLflow (files in the results folder):
    its results folder and output; each tracker's test checks its own line and store."""
    results = tmp_path_factory.mktemp("swept")
    with pytest.MonkeyPatch.context() as env:
        env.delenv("WANDB_MODE", raising=False)
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        out = harness("sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--set", "epochs=1",
                      "--workers", "1", "--results", str(results),
                      *(part for tracker in INSTALLED for part in ("--tracker", tracker)), timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return results, out


def _hint_of(out: subprocess.CompletedProcess, start: str) -> list[str]:
    """The sweep's tracking lines, checked to be one per tracker, and those that begin with ``start``."""
    lines = _tracking_lines(out)
    assert len(lines) == len(INSTALLED), lines
    return [line for line in lines if line.startswith(start)]


def _tracking_lines(out: subprocess.CompletedProcess) -> list[str]:
    return [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("tracking: ")]


def _records(results: Path) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(results.glob("*.json"))]


@_missing("wandb")
def test_a_wandb_sweep_says_once_how_to_upload_its_offline_runs(swept):
    results, out = swept
    hint = f"wandb sync {results / 'wandb'}/offline-run-*"
    assert _hint_of(out, "tracking: wandb") == [f"tracking: {hint}"]
    # the pattern (the shell expands it) names every job's offline run
    folders = {str(results / r["info"]["tracking"]["wandb"]) for r in _records(results)}
    assert len(folders) == 2 and set(glob.glob(hint.split()[-1])) == folders


@_missing("mlflow")
def test_an_mlflow_sweep_says_once_how_to_view_its_runs(swept, monkeypatch):
    results, out = swept
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for the client below, as for the sweep
    uri = f"file:{results / 'mlruns'}"
    assert _hint_of(out, "tracking: mlflow") == [f"tracking: mlflow ui --backend-store-uri {uri}"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)  # the store the line names holds every job's run
    runs = client.search_runs([client.get_experiment_by_name("contrastive-harness").experiment_id])
    assert sorted(r.info.run_name for r in runs) == sorted(r["run_id"] for r in _records(results))


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
