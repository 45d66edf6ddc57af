"""The local executor of ``harness sweep`` (``harness.sweep.local.run_local``) around a worker that dies: the pool it
breaks fails the jobs under way, and a fresh pool runs the queued ones (they were all reported "not started": one
out-of-memory kill ended a long sweep). A stop still starts no queued job, and a pool whose workers cannot start
ends the sweep instead of looping. With a stand-in for the process pool, so that no worker is spawned; and, as a
user meets it, a sweep whose workers die at import: it stops at once with the cause and runs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool

import pytest
import tiny_domain

from harness.run import stopping
from harness.run.runner import RunRequest
from harness.sweep import local


class FakePool:
    """A ProcessPoolExecutor whose jobs end as they are submitted: ``tag=kill`` kills its worker (the pool breaks:
    that job and later submissions fail with BrokenProcessPool), ``tag=stop`` asks the sweep to stop."""

    pools: list[FakePool] = []
    broken_from_start = False

    def __init__(self, max_workers, mp_context=None, initializer=None, initargs=()):
        self.broken = FakePool.broken_from_start
        self.ran: list[str] = []
        FakePool.pools.append(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, fn, request, *args):
        if self.broken:
            raise BrokenProcessPool("a child process terminated abruptly")
        tag = request.sets["tag"]
        self.ran.append(tag)
        future: Future = Future()
        if tag == "kill":
            self.broken = True
            future.set_exception(BrokenProcessPool("a child process terminated abruptly"))
        else:
            if tag == "stop":
                stopping.request_stop("SIGTERM")
            future.set_result([{"run_id": f"job {tag}", "status": "completed", "error": None, "metrics": {}}])
        return future


@pytest.fixture
def pool(monkeypatch):
    FakePool.pools, FakePool.broken_from_start = [], False
    monkeypatch.setattr(local, "ProcessPoolExecutor", FakePool)
    yield FakePool
    stopping.reset()


def _requests(*tags: str) -> list[RunRequest]:
    return [RunRequest(domain="tiny", loss="infonce", seeds=[0], sets={"tag": tag}) for tag in tags]


def _statuses(results) -> list[tuple[str, str]]:
    return [(r["run_id"], r["status"]) for r in results]


def test_a_dead_worker_fails_its_job_and_a_fresh_pool_runs_the_queued_ones(pool, tmp_path):
    results = local.run_local(_requests("a", "kill", "b", "c"), 1, tmp_path / "stop", ["tag"])
    assert [p.ran for p in pool.pools] == [["a", "kill"], ["b", "c"]]
    assert _statuses(results) == [("job a", "completed"), ("tiny/None/infonce seed 0", "failed"),
                                  ("job b", "completed"), ("job c", "completed")]
    assert results[1]["error"] == local.WORKER_DIED


def test_a_stop_hands_out_no_other_job_and_starts_no_fresh_pool(pool, tmp_path):
    results = local.run_local(_requests("stop", "kill", "b"), 1, tmp_path / "stop", ["tag"])
    assert [p.ran for p in pool.pools] == [["stop"]]  # asked to stop: nothing else is handed out
    assert [r["status"] for r in results] == ["completed", "not started", "not started"]
    assert (tmp_path / "stop").exists()  # the jobs under way were told


def test_a_pool_whose_workers_cannot_start_ends_the_sweep(pool, tmp_path):
    pool.broken_from_start = True
    results = local.run_local(_requests("a", "b"), 2, tmp_path / "stop", ["tag"])
    assert len(pool.pools) == 1 and [r["status"] for r in results] == ["not started", "not started"]


def test_workers_that_cannot_start_stop_the_sweep_at_once_with_the_cause_and_leave_the_jobs_to_run(tmp_path):
    # Every worker the pool spawns dies at import (the sweep's own process has imported everything already).
    plant = tmp_path / "plant"
    plant.mkdir()
    (plant / "sitecustomize.py").write_text('import sys\nif "--multiprocessing-fork" in sys.argv:\n'
                                            '    sys.modules["harness.sweep.local"] = None\n')
    env = tiny_domain.harness_env()
    env["PYTHONPATH"] = f"{plant}{os.pathsep}{env['PYTHONPATH']}"
    argv = ["sweep", "--domains", "tiny", "--losses", "infonce,dcl,hcl", "--seeds", "0", "--workers", "2",
            "--results", str(tmp_path / "results")]
    out = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=tiny_domain.REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "error: the sweep's worker processes cannot start: ModuleNotFoundError: import of harness.sweep.local "
        "halted; None in sys.modules (exit code 1); 3 jobs not run (none marked failed): fix that, then rerun "
        "the sweep with --resume")
    assert "[failed]" not in out.stdout + out.stderr and not list((tmp_path / "results").glob("*.json"))
    rerun = tiny_domain.harness(*argv, "--resume")
    assert rerun.returncode == 0 and "sweep done: 3 completed" in rerun.stdout, rerun.stdout + rerun.stderr
