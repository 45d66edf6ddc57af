"""``harness sweep --dry-run`` refuses, as the sweep itself does, a tracker or an executor whose library cannot be
imported here: it printed a plan that the same command without ``--dry-run`` then refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_domain import harness, harness_env

SWEEP = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0"]


@pytest.mark.parametrize("module, options, line", [
    ("wandb", ["--tracker", "wandb"], "error: this needs the Python package 'wandb' (planted: no wandb here); "
                                      "install it with: pip install 'contrastive-harness[wandb]'"),
    ("mlflow", ["--tracker", "mlflow"], "error: this needs the Python package 'mlflow' (planted: no mlflow here); "
                                        "install it with: pip install 'contrastive-harness[mlflow]'"),
    ("ray", ["--executor", "ray"], "error: --executor ray needs the 'ray' package: "
                                   "pip install 'contrastive-harness[ray]'"),
    ("submitit", ["--executor", "slurm"], "error: this needs the Python package 'submitit' (planted: no submitit "
                                          "here); install it with: pip install 'contrastive-harness[sweep]'"),
], ids=["wandb", "mlflow", "ray", "slurm"])
def test_a_dry_run_refuses_a_missing_library_as_the_sweep_does(tmp_path: Path, module: str, options: list[str],
                                                                 line: str) -> None:
    plant = tmp_path / "plant" / module  # a package that cannot be imported, ahead of any installed one
    plant.mkdir(parents=True)
    (plant / "__init__.py").write_text(f"raise ImportError('planted: no {module} here')\n")
    env = {"PYTHONPATH": f"{plant.parent}:{harness_env()['PYTHONPATH']}"}
    results = tmp_path / "results"
    dry = harness(*SWEEP, *options, "--results", str(results), "--dry-run", env=env)
    real = harness(*SWEEP, *options, "--results", str(results), env=env)
    for out in (dry, real):
        assert out.returncode == 2, out.stdout + out.stderr
        assert [x for x in out.stderr.splitlines() if x.startswith("error:") or "Traceback" in x] == [line]
    assert "harness run --domain tiny" not in dry.stdout  # no plan of jobs the sweep would not run
    assert not list(results.glob("*.json"))
