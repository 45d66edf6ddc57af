"""``harness sweep`` where not every job simply completes: a job that crashes outside its run, a worker killed
outright, a job busy in another process during a ``--force`` sweep and the command its hint gives; and the
selections that name nothing. On the tiny domain and its faulty variant (tests/faulty_domain.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import faulty_domain  # noqa: F401  (registers the faulty domain, and the tiny one, in this process)
import pytest
from filelock import FileLock
from tiny_domain import REPO, harness, harness_env, resume_args

from harness.cli import main
from harness.run.stopping import EXIT_STOPPED


def _sweep(*args: str) -> subprocess.CompletedProcess:
    """``harness sweep`` in a subprocess whose workers know the faulty domain."""
    env = {**harness_env(), "HARNESS_PLUGINS": "tiny_domain,faulty_domain"}
    return subprocess.run([sys.executable, "-m", "harness", "sweep", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def _last(out: subprocess.CompletedProcess) -> str:
    return out.stdout.strip().splitlines()[-1]


def test_a_job_that_crashes_outside_its_run_fails_alone_in_one_line(tmp_path):
    # damaged crashes in the worker only; unhashable in the sweep's process too. One sweep of both: each fails
    # alone, in its own line, and the job after them runs.
    out = _sweep("--domains", "faulty", "--datasets", "damaged,unhashable,blobs", "--losses", "infonce",
                 "--seeds", "0", "--set", "epochs=1", "--results", str(tmp_path))
    assert out.returncode == 1, out.stderr
    for dataset in ("damaged", "unhashable"):
        [line] = [x for x in out.stdout.splitlines() if x.startswith(f"[failed] faulty/{dataset}/")]
        assert line.startswith(f"[failed] faulty/{dataset}/infonce seed 0: JSONDecodeError: ")
        assert line.endswith("(sweep -v shows its traceback)"), line
    assert "Traceback" not in out.stderr
    # where the sweep's own look for the record crashed, it says so before the job runs (not only the job's line)
    [said] = [x for x in out.stderr.splitlines() if x.startswith("warning: ")]
    assert said.startswith("warning: harness run --domain faulty --dataset unhashable ") and said.endswith("); it runs")
    assert ": its record could not be looked for (JSONDecodeError: " in said
    assert _last(out).startswith("sweep done: 1 completed, 2 failed; continue with: ")
    assert resume_args(_last(out))[:2] == ["sweep", "--domains"]
    [record] = _records(tmp_path)  # the job after the crash ran
    assert record["dataset"] == "blobs" and record["status"] == "completed"


def test_a_killed_worker_fails_its_job_and_a_fresh_pool_runs_the_queued_ones(tmp_path):
    """A worker killed outright (out of memory) breaks its process pool; the queued jobs run in a fresh one (they
    were reported not started, and a long sweep ended at its first killed job)."""
    out = _sweep("--domains", "faulty", "--losses", "infonce", "--grid", "tag=kill,a,b", "--seeds", "0",
                 "--set", "epochs=1", "--workers", "1", "--results", str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert "[failed] faulty/blobs/infonce seed 0 (tag=kill): its worker process died (killed, out of memory?)" \
        in out.stdout
    assert "Traceback" not in out.stderr
    assert _last(out).startswith("sweep done: 2 completed, 1 failed; continue with: ")
    records = _records(tmp_path)
    assert sorted(r["config"]["tag"] for r in records) == ["a", "b"]
    assert all(r["status"] == "completed" for r in records)


def test_a_busy_job_is_not_done_exit_75_and_the_hint_goes_on_with_the_forced_sweep(tmp_path):
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0,1", "--set", "epochs=1",
                 "--results", str(tmp_path), "--quiet"]) == 0
    before = {r["seed"]: r for r in _records(tmp_path)}
    sweep = ["--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--set", "epochs=1", "--force",
             "--results", str(tmp_path)]
    with FileLock(str(tmp_path / ".work" / f"{before[0]['run_id']}.lock")):
        out = _sweep(*sweep)
    assert out.returncode == EXIT_STOPPED, out.stderr
    assert f"[busy] {before[0]['run_id']}: another process is running it" in out.stdout
    last = _last(out)
    assert last.startswith("sweep done: 1 completed, 1 busy (another process is running it); continue with: ")
    forced = {r["seed"]: r for r in _records(tmp_path)}
    assert forced[0] == before[0] and forced[1]["timings"] != before[1]["timings"]
    assert "--force" in resume_args(last)
    again = harness(*resume_args(last), timeout=300)
    assert again.returncode == 0, again.stderr
    assert "sweep: 2 runs, 1 with a completed record (skipped), 1 to run" in again.stdout  # seed 1 was redone
    after = {r["seed"]: r for r in _records(tmp_path)}
    assert after[1] == forced[1] and after[0]["timings"] != before[0]["timings"]


@pytest.mark.parametrize("option, value", [("--domains", ""), ("--domains", " , "), ("--losses", ""),
                                           ("--losses", ","), ("--datasets", ","), ("--methods", ","),
                                           ("--seeds", "")])
def test_a_given_but_empty_selection_is_a_user_error(tmp_path, capsys, option, value):
    args = {"--domains": "tiny", option: value, "--results": str(tmp_path / "results")}
    assert main(["sweep", *(part for pair in args.items() for part in pair)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {option} ") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "results").exists()


def test_a_sweep_without_jobs_is_a_user_error_and_one_whose_jobs_are_done_says_so(tmp_path, capsys):
    # tiny has supcon but no dataset 'damaged'; faulty has 'damaged' but not supcon
    assert main(["sweep", "--domains", "tiny,faulty", "--datasets", "damaged", "--losses", "supcon",
                 "--results", str(tmp_path)]) == 2
    assert "error: the sweep has no job: no domain of --domains has a dataset, a method and a loss" in \
        capsys.readouterr().err
    args = ["--loss", "infonce", "--seeds", "0", "--set", "epochs=1", "--results", str(tmp_path)]
    assert main(["run", "--domain", "tiny", *args, "--quiet"]) == 0
    capsys.readouterr()
    assert main(["sweep", "--domains", "tiny", *args]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "sweep done: nothing to run, every job has its completed record"
