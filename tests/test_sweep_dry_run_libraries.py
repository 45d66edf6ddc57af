"""``harness sweep --dry-run`` refuses, as the sweep itself does, a tracker or an executor whose library cannot be
imported here: it printed a plan that the same command without ``--dry-run`` then refused."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain for the in-process calls)
from tiny_domain import harness, harness_env

from harness.cli import main as harness_main

SWEEP = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0"]


def planted(tmp_path: Path, module: str) -> Path:
    """A folder holding a package ``module`` that cannot be imported, to put ahead of any installed one."""
    plant = tmp_path / "plant" / module
    plant.mkdir(parents=True)
    (plant / "__init__.py").write_text(f"raise ImportError('planted: no {module} here')\n")
    return plant.parent


def refused(out, module: str, extra: str) -> None:
    """Each library's line is the one rule of every missing package (``domains.base.require``): the package, the
    import's own error (here the planted one), and the extra that installs it."""
    line = (f"error: this needs the Python package '{module}' (planted: no {module} here); install it with: "
            f"pip install 'contrastive-harness[{extra}]'")
    assert out.returncode == 2, out.stdout + out.stderr
    assert [x for x in out.stderr.splitlines() if x.startswith("error:") or "Traceback" in x] == [line]


@pytest.mark.parametrize("module, options, extra", [
    ("wandb", ["--tracker", "wandb"], "wandb"),
    ("mlflow", ["--tracker", "mlflow"], "mlflow"),
    ("ray", ["--executor", "ray"], "ray"),
    ("submitit", ["--executor", "slurm"], "sweep"),
], ids=["wandb", "mlflow", "ray", "slurm"])
def test_a_dry_run_refuses_a_missing_library_as_the_sweep_does(tmp_path: Path, run_main, monkeypatch, module: str,
                                                                 options: list[str], extra: str) -> None:
    """In this process, both commands: the planted package is imported fresh (any earlier import forgotten)."""
    monkeypatch.syspath_prepend(str(planted(tmp_path, module)))
    results = tmp_path / "results"
    for dry_run in (["--dry-run"], []):
        monkeypatch.delitem(sys.modules, module, raising=False)
        out = run_main(harness_main, *SWEEP, *options, "--results", str(results), *dry_run)
        refused(out, module, extra)
        assert "harness run --domain tiny" not in out.stdout  # no plan of jobs the sweep would not run
    assert not list(results.glob("*.json"))


def test_a_dry_runs_refusal_of_a_missing_library_is_its_exit_status_and_one_line(tmp_path: Path) -> None:
    """The same refusal through the command a user types: the process's exit status and its stderr."""
    env = {"PYTHONPATH": f"{planted(tmp_path, 'wandb')}:{harness_env()['PYTHONPATH']}"}
    results = tmp_path / "results"
    out = harness(*SWEEP, "--tracker", "wandb", "--results", str(results), "--dry-run", env=env)
    refused(out, "wandb", "wandb")
    assert "harness run --domain tiny" not in out.stdout and not list(results.glob("*.json"))
