"""``harness sweep --dry-run`` refuses, as the sweep itself does, a tracker or an executor whose library cannot be
imported here: it printed a plan that the same command without ``--dry-run`` then refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_domain import harness, harness_env

SWEEP = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0"]


@pytest.mark.parametrize("module, options, extra", [
    ("wandb", ["--tracker", "wandb"], "wandb"),
    ("mlflow", ["--tracker", "mlflow"], "mlflow"),
    ("ray", ["--executor", "ray"], "ray"),
    ("submitit", ["--executor", "slurm"], "sweep"),
], ids=["wandb", "mlflow", "ray", "slurm"])
def test_a_dry_run_refuses_a_missing_library_as_the_sweep_does(tmp_path: Path, module: str, options: list[str],
                                                                 extra: str) -> None:
    """Each library's line is the one rule of every missing package (``domains.base.require``): the package, the
    import's own error (here the planted one), and the extra that installs it."""
    line = (f"error: this needs the Python package '{module}' (planted: no {module} here); install it with: "
            f"pip install 'contrastive-harness[{extra}]'")
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
