"""``tau_plus=auto`` / ``alpha=auto``: the registry's rules, the bound loss's schedule and its checkpoint, the
command line's spelling, and one run per domain whose record carries the estimates (through the CLI)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import losses
from harness.cli import main
from losses.registry import AUTO

ROOT = Path(__file__).resolve().parents[1]


def clustered(n_per: int, classes: int, dim: int = 32, seed: int = 0, spread: float = 0.05) -> torch.Tensor:
    """Unit vectors in ``classes`` tight clusters of ``n_per`` each (balanced: the true prior is 1/classes)."""
    gen = torch.Generator().manual_seed(seed)
    centres = F.normalize(torch.randn(classes, dim, generator=gen), dim=1)
    points = centres.repeat_interleave(n_per, 0) + spread * torch.randn(classes * n_per, dim, generator=gen)
    return F.normalize(points, dim=1)


def test_auto_fills_the_prior_settings_only_beside_auto():
    fixed = losses.get("dcl", tau_plus=0.2)
    assert fixed.hparams == {"tau_plus": 0.2} and fixed.prior is None
    auto = losses.get("dcl", tau_plus=AUTO)
    assert auto.hparams["tau_plus"] == AUTO
    assert {"prior_estimator", "prior_every", "prior_momentum"} <= set(auto.hparams)
    assert losses.get("pucl", alpha=AUTO).prior is not None
    assert losses.get("hcl", tau_plus=AUTO, beta=0.5).prior is not None
    with pytest.raises(ValueError, match="only apply to an estimated prior: add tau_plus=auto"):
        losses.get("dcl", tau_plus=0.1, prior_every=2)
    with pytest.raises(ValueError, match="prior_estimator must be one of"):
        losses.get("dcl", tau_plus=AUTO, prior_estimator="oracle")
    with pytest.raises(ValueError, match="prior_every must be an integer"):
        losses.get("dcl", tau_plus=AUTO, prior_every=1.5)
    with pytest.raises(ValueError, match="tau_plus must be a number"):  # a prior that is not estimated here
        losses.get("debiased_pos", tau_plus=AUTO)


def test_a_direct_call_cannot_take_auto():
    z = F.normalize(torch.randn(8, 4), dim=1)
    with pytest.raises(ValueError, match=r"tau_plus=auto needs a prior estimated during training"):
        losses.dcl(losses.pair_scores(z, z.flip(0), 0.5), tau_plus=AUTO)


def test_before_the_first_estimate_auto_is_the_paper_default_then_the_smoothed_estimate():
    gen = torch.Generator().manual_seed(1)
    z1, z2 = (F.normalize(torch.randn(64, 16, generator=gen), dim=1) for _ in range(2))
    scores = losses.pair_scores(z1, z2, 0.5)
    auto = losses.get("dcl", tau_plus=AUTO, prior_momentum=0.0)
    assert torch.allclose(auto(scores), losses.dcl(scores, tau_plus=0.1))


def test_refresh_estimates_from_observed_embeddings_and_binds_the_value():
    auto = losses.get("dcl", tau_plus=AUTO, prior_momentum=0.0)
    points = clustered(100, 4)
    for chunk in points[torch.randperm(len(points), generator=torch.Generator().manual_seed(0))].split(50):
        auto.observe(chunk)
    entry = auto.refresh_prior(1)
    assert {"prior", "prior_raw", "prior_seconds", "prior_clusters", "prior_silhouette"} == set(entry)
    assert entry["prior"] == pytest.approx(0.25, rel=0.25)
    assert entry["prior_clusters"] == 4 and entry["prior_silhouette"] > 0.25  # four clear clusters
    z1, z2 = points[:32], points[32:64]
    scores = losses.pair_scores(z1, z2, 0.5)
    assert torch.allclose(auto(scores), losses.dcl(scores, tau_plus=auto.prior.value))
    summary = auto.prior_summary()
    assert summary["param"] == "tau_plus" and summary["estimates"] == 1 and summary["final"] == auto.prior.value


def test_the_schedule_and_the_checkpoint_round_trip():
    auto = losses.get("pucl", alpha=AUTO, prior_every=2, prior_momentum=0.5)
    points = clustered(60, 5)
    auto.observe(points)
    assert auto.refresh_prior(1) == {}  # not due: every 2 epochs
    assert auto.prior.value == 0.1
    auto.observe(points)
    entry = auto.refresh_prior(2)
    assert entry["prior"] == entry["prior_raw"]  # the first estimate replaces the default
    auto.observe(points)
    assert auto.refresh_prior(3) == {}
    auto.observe(points)
    later = auto.refresh_prior(4)
    assert later["prior"] == pytest.approx(0.5 * entry["prior"] + 0.5 * later["prior_raw"])
    again = losses.get("pucl", alpha=AUTO, prior_every=2, prior_momentum=0.5)
    again.load_state_dict(auto.state_dict())
    assert again.prior.value == auto.prior.value and len(again.prior.history) == 2
    assert losses.get("pucl").state_dict() == {}


def test_a_refresh_without_observed_embeddings_names_the_missing_call():
    auto = losses.get("dcl", tau_plus=AUTO)
    with pytest.raises(RuntimeError, match=r"loss.observe"):
        auto.refresh_prior(1)


def _harness(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def test_the_command_line_refuses_a_bad_prior_setting(tmp_path, run_main):
    proc = run_main(main, "run", "--domain", "graph", "--loss", "dcl", "--set", "loss.prior_every=2", "--seeds", "0",
                    "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and "add tau_plus=auto" in proc.stderr
    proc = run_main(main, "run", "--domain", "graph", "--loss", "dcl", "--set", "loss.tau_plus=often", "--seeds", "0",
                    "--results", str(tmp_path / "r"))
    assert proc.returncode == 2 and "tau_plus must be a number in [0, 1) or auto, got 'often'" in proc.stderr
    assert not (tmp_path / "r").exists()  # refused before any run


RUNS = {  # (the least evaluation: the estimates come from training)
    "graph": ["--loss", "dcl", "--set", "loss.tau_plus=auto", "--set", "epochs=2", "--set", "svm_folds=2",
              "--set", "svm_inner_folds=2"],
    "vision": ["--loss", "pucl", "--set", "loss.alpha=auto", "--set", "epochs=2", "--set", "linear_epochs=2"],
    "text": ["--loss", "hcl", "--set", "loss.tau_plus=auto", "--set", "epochs=2", "--set", "max_sentences=1000",
             "--set", "kfold=2"],
}


@pytest.mark.parametrize("domain", sorted(RUNS))
def test_an_auto_run_records_its_estimates(tmp_path, domain):
    results = tmp_path / "results"
    proc = _harness("run", "--domain", domain, *RUNS[domain], "--seeds", "0", "--results", str(results),
                    "--quiet", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (path,) = results.glob("*.json")
    record = json.loads(path.read_text())
    points = [p for p in record["curve"] if "prior" in p]
    assert len(points) == 2  # one estimate per epoch (prior_every=1)
    assert all(0 < p["prior"] < 1 and math.isfinite(p["prior_raw"]) and p["prior_seconds"] >= 0 for p in points)
    assert record["info"]["prior"]["final"] == points[-1]["prior"]
    assert record["loss_params"][record["info"]["prior"]["param"]] == AUTO
