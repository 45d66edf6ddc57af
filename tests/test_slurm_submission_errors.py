"""``harness sweep --executor slurm`` where Slurm's sbatch is missing, refuses the array or answers garbage: one
``error:`` line that says what happened and whether anything was submitted, exit 2, no traceback (was: submitit's
traceback and exit 1). Simulated with fake ``srun``/``sbatch`` scripts: submitit takes a machine with ``srun`` on
the PATH for a Slurm cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)

from harness.cli import main

pytest.importorskip("submitit")

SWEEP = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--executor", "slurm",
         "--tracker", "none"]
SBATCH = {
    "missing": None,
    "refuses": 'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2; exit 1',
    "garbage": 'echo "hello there"',
}
SAYS = {
    "missing": "sbatch could not be started (No such file or directory: sbatch); nothing was submitted",
    "refuses": "sbatch refused the job array (sbatch: error: Batch job submission failed: Invalid partition name "
               "specified); nothing was submitted; its script is in",
    "garbage": "sbatch answered without a job id (Could not make sense of sbatch output \"hello there\"",
}


def _script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("case", list(SBATCH))
def test_a_failed_submission_is_one_error_line(case, tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "srun", "exit 0")
    if SBATCH[case] is not None:
        _script(bin_dir / "sbatch", SBATCH[case])
    monkeypatch.setenv("PATH", str(bin_dir))  # nothing else: no real sbatch either
    results = tmp_path / "results"
    assert main([*SWEEP, "--results", str(results)]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if x.startswith("error:")]
    assert SAYS[case] in line and "Traceback" not in err
    if case == "refuses":  # submitit printed sbatch's stderr before it raised: now only the error line gives it
        assert err.count("Invalid partition name") == 1, err
    assert not list(results.glob("*.json")) and not list((results / ".work").glob("*.stop"))
    assert os.environ["PATH"] == str(bin_dir)


@pytest.mark.timeout(60)  # the old code submitted and then waited on the fake job for ever
@pytest.mark.parametrize(("option", "value", "says"), [
    ("--timeout-min", "0", "--timeout-min must be at least 1 (got 0)"),
    ("--timeout-min", "-5", "--timeout-min must be at least 1 (got -5)"),
    ("--slurm-lost-after", "0", "--slurm-lost-after must be more than 0 seconds (got 0)"),
    ("--slurm-lost-after", "-1.5", "--slurm-lost-after must be more than 0 seconds (got -1.5)"),
    ("--slurm-lost-after", "nan", "--slurm-lost-after must be more than 0 seconds (got nan)")])
def test_a_limit_out_of_range_is_refused_before_anything_is_submitted(option, value, says, tmp_path, monkeypatch,
                                                                      capsys):
    """``--timeout-min 0`` became ``#SBATCH --time=0``, which Slurm reads as no time limit at all; a lost job would
    be failed at once under ``--slurm-lost-after 0``, and never under nan."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "srun", "exit 0")
    _script(bin_dir / "sbatch", f'touch "{tmp_path}/submitted"; echo "Submitted batch job 7"')
    monkeypatch.setenv("PATH", str(bin_dir))
    assert main([*SWEEP, option, value, "--results", str(tmp_path / "results")]) == 2
    assert f"error: {says}" in capsys.readouterr().err
    assert not (tmp_path / "submitted").exists()


@pytest.mark.timeout(60)  # the old code submitted and then waited on the fake job for ever
def test_a_job_folder_that_is_a_link_is_refused_before_anything_is_submitted(tmp_path, monkeypatch, capsys):
    """submitit unpickles each job's result from ``<results>/.submitit``: a link there could hand the sweep a
    pickle from a folder that someone else writes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "srun", "exit 0")
    _script(bin_dir / "sbatch", f"touch {tmp_path / 'submitted'}; echo 'Submitted batch job 7'")
    monkeypatch.setenv("PATH", str(bin_dir))
    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    results.mkdir()
    elsewhere.mkdir()
    (results / ".submitit").symlink_to(elsewhere)
    assert main([*SWEEP, "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert f"error: {results / '.submitit'} is a symbolic link" in err and "Traceback" not in err
    assert not (tmp_path / "submitted").exists() and not list(elsewhere.iterdir())
