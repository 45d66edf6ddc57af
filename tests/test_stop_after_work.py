"""A stop signal that comes once a command's work is saved (harness.ending.own_process): a run whose seeds all
have their records is done and exits 0, whenever SIGTERM comes after the last record is written (the record's
write, the summary after the stop handling has ended, Python's teardown); it exits 75 only where a seed is left
to run. Signalled by the ``late_sigterm`` test plugin at a fixed point of the process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny_domain import harness, resume_args

from harness.cli import main
from harness.run.stopping import EXIT_STOPPED

TINY = ["run", "--domain", "tiny", "--loss", "infonce", "--quiet", "--tracker", "none"]


def _seeds(results: Path) -> list[int]:
    return sorted(json.loads(p.read_text())["seed"] for p in results.glob("*.json"))


def _late(moment: str, *args: str):
    return harness(*TINY, *args, env={"HARNESS_PLUGINS": "tiny_domain,late_sigterm", "LATE_SIGTERM": moment})


@pytest.mark.parametrize(("moment", "seeds"), [("record", "0"), ("summary", "0,1"), ("exit", "0,1")])
def test_a_sigterm_after_the_last_record_leaves_a_run_that_is_done_exit_0(tmp_path, moment, seeds):
    out = _late(moment, "--seeds", seeds, "--results", str(tmp_path))
    assert out.returncode == 0, (out.returncode, out.stderr)
    assert _seeds(tmp_path) == [int(s) for s in seeds.split(",")]
    assert "stopped" not in out.stderr and not list((tmp_path / ".work").glob("*/checkpoint.pt"))
    if moment != "record":  # the summary line was printed, and reached the pipe before the process ended
        assert "accuracy: " in out.stdout.splitlines()[-1]


def test_a_sigterm_after_a_record_with_a_seed_left_stops_exit_75_and_the_resume_runs_that_seed(tmp_path, run_main):
    out = _late("record", "--seeds", "0,1", "--results", str(tmp_path))
    assert out.returncode == EXIT_STOPPED, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("stopped (SIGTERM) at a checkpoint; continue with: ")
    assert _seeds(tmp_path) == [0]
    # without the plugin, in this process: the resume is a plan of what is left, its subprocess is tested elsewhere
    resumed = run_main(main, *resume_args(out.stderr.strip().splitlines()[-1]))
    assert resumed.returncode == 0, resumed.stderr
    assert _seeds(tmp_path) == [0, 1] and "[skipped]" in resumed.stdout
