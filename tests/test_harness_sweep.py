"""``harness sweep`` with the local executor: the grid, hyper-parameters only where they apply, skipping; and
what the Slurm executor decides without a cluster (tests/test_slurm.py runs it on one)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import signal
import subprocess
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
from support import page_decimals
from test_faults import _start, _wait_for_epoch
from tiny_domain import harness

from harness.cli import main
from harness.run import plugins_prefix
from harness.run.stopping import EXIT_STOPPED
from harness.sweep.cluster import import_submitit, run_slurm


def test_sweep_grid_and_dry_run(tmp_path, capsys):
    assert main(["sweep", "--domains", "tiny", "--losses", "infonce,pucl,hcl", "--grid", "loss.alpha=0.1,0.5",
                 "--grid", "epochs=1,2", "--seeds", "0,1", "--results", str(tmp_path), "--dry-run"]) == 0
    # after the data root and the plugins where there are any (harness.run.data_root_prefix, plugins_prefix)
    lines = [x for x in capsys.readouterr().out.splitlines() if re.match(r"(\S+=\S+ )*harness run ", x)]
    # infonce: 2 epochs x 2 seeds; pucl: 2 alphas x 2 epochs x 2 seeds; hcl: 2 epochs x 2 seeds.
    assert len(lines) == 4 + 8 + 4
    assert all("loss.alpha" in x for x in lines if "--loss pucl" in x)
    assert not any("loss.alpha" in x for x in lines if "--loss pucl" not in x)
    assert main(["sweep", "--domains", "tiny", "--grid", "loss.nope=1", "--results", str(tmp_path)]) == 2
    assert "applies to no domain/loss" in capsys.readouterr().err


def test_the_dry_run_lines_start_with_the_data_root_then_the_plugins(tmp_path, capsys, monkeypatch):
    """Like every command the harness prints (reproduce:, continue with:), a job line pasted in a new shell reads
    the same data: it starts with the data root where that is not the built-in one (``--data-root``, else
    ``$HARNESS_DATA_ROOT``), then the plugins."""
    args = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--results", str(tmp_path),
            "--dry-run"]

    def line(*extra: str) -> str:
        assert main([*args, *extra]) == 0
        [job] = [x for x in capsys.readouterr().out.splitlines() if " harness run --domain tiny " in f" {x}"]
        return job

    start = f"{plugins_prefix()}harness run --domain tiny "
    monkeypatch.delenv("HARNESS_DATA_ROOT", raising=False)
    assert line().startswith(start)
    monkeypatch.setenv("HARNESS_DATA_ROOT", str(tmp_path / "env"))
    assert line().startswith(f"HARNESS_DATA_ROOT={tmp_path / 'env'} {start}")
    assert line("--data-root", "mine").startswith(f"HARNESS_DATA_ROOT={Path('mine').resolve()} {start}")


def test_a_dry_run_job_line_of_a_resumed_sweep_resumes_the_job(tmp_path, run_main):
    """``sweep --resume --dry-run`` printed its jobs without --resume: the line pasted to run one job by hand
    started it over, dropping the checkpoint the sweep would have gone on from."""
    config = ["--seeds", "0", "--set", "epochs=12", "--results", str(tmp_path)]
    # The run holds after epoch 2 till `release` exists: SIGTERM reaches it there however it is scheduled.
    release = tmp_path.parent / f"{tmp_path.name}-release"
    proc = _start(["run", "--domain", "tiny", "--loss", "infonce", "--quiet", *config], hold=(2, release))
    _wait_for_epoch(tmp_path, 2)
    proc.send_signal(signal.SIGTERM)
    release.touch()
    assert proc.communicate(timeout=60) and proc.returncode == EXIT_STOPPED
    plan = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce", *config, "--resume", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    [line] = [x for x in plan.stdout.splitlines() if " harness run " in x]
    words = shlex.split(line)
    out = harness(*words[words.index("harness") + 1:])
    assert out.returncode == 0, out.stderr
    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert record["resumed"] and record["info"]["start_epoch"] == 2


def test_without_losses_each_method_runs_the_losses_it_trains(tmp_path, capsys):
    """vision's losses include the biased track's supervised ones, which simclr refuses, and text's bow trains
    nothing: without --losses, neither is handed a loss it would refuse ([invalid], exit 1) or ignore (the same
    evaluation again under another run id)."""
    assert main(["sweep", "--domains", "vision,text", "--methods", "simclr,biased,bow", "--seeds", "0",
                 "--results", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[invalid]" not in out
    assert sorted(re.findall(r"--method (\S+) --loss (\S+)", out)) == sorted([
        *(("simclr", loss) for loss in ("infonce", "dcl", "debiased_pos", "hcl", "pucl", "unbiased")),
        *(("biased", loss) for loss in ("supcon", "ce", "eps_supcon", "eps_supinfonce")),
        ("bow", "infonce")])


def test_with_losses_an_evaluation_only_method_runs_its_baseline_loss_once(tmp_path, run_main):
    """bow trains nothing: with --losses it ran once per loss (the same evaluation under several run ids, each
    job now refused by harness run); it runs its baseline loss alone, and the plan says so."""
    proc = run_main(main, "sweep", "--domains", "text", "--methods", "bow,quickthought", "--losses", "hcl,dcl",
                    "--seeds", "0", "--results", str(tmp_path), "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[invalid]" not in proc.stdout
    assert sorted(re.findall(r"--method (\S+) --loss (\S+)", proc.stdout)) == [
        ("bow", "infonce"), ("quickthought", "dcl"), ("quickthought", "hcl")]
    assert "sweep: method 'bow' of domain 'text' trains nothing: it runs once, under its baseline loss infonce, " \
           "not under hcl, dcl" in proc.stdout
    proc = run_main(main, "sweep", "--domains", "text", "--methods", "bow", "--losses", "infonce", "--seeds", "0",
                    "--results", str(tmp_path), "--dry-run")
    assert re.findall(r"--method (\S+) --loss (\S+)", proc.stdout) == [("bow", "infonce")]
    assert "trains nothing" not in proc.stdout  # asked for its baseline alone: nothing to say


@pytest.mark.parametrize("option, typo, meant", [("--grid", "loss.alpah=0.1,0.2", "loss.alpha"),
                                                 ("--grid", "epoch=1,2", "epochs"),
                                                 ("--set", "loss.alpah=0.1", "loss.alpha")])
def test_a_misspelt_sweep_key_is_answered_with_the_closest_one(tmp_path, run_main, option, typo, meant):
    proc = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce,pucl", option, typo, "--seeds", "0",
                    "--results", str(tmp_path), "--dry-run")
    key = typo.partition("=")[0]
    assert proc.returncode == 2 and proc.stderr == \
        f"error: {option} {key} applies to no domain/loss of the sweep; did you mean '{meant}'?\n"


def test_a_set_key_given_twice_is_refused(tmp_path, run_main):
    """Was: the last value silently won, where a --grid key given twice was refused."""
    proc = run_main(main, "sweep", "--domains", "tiny", "--set", "epochs=1", "--set", "epochs=2",
                    "--results", str(tmp_path), "--dry-run")
    assert proc.returncode == 2
    assert proc.stderr == "error: --set epochs is given twice (epochs=1 and epochs=2); give it once\n"


def test_a_sweep_of_one_job_counts_one_run(tmp_path, run_main):
    proc = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0",
                    "--results", str(tmp_path), "--dry-run")
    assert proc.returncode == 0 and "sweep: 1 run, 0 with a completed record (skipped), 1 to run" in proc.stdout


def test_a_dry_run_prints_the_command_each_job_runs(tmp_path, capsys):
    assert main(["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--device", "cpu",
                 "--tracker", "none", "--results", str(tmp_path), "--dry-run"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if re.match(r"(\S+=\S+ )*harness run ", x)]
    assert line.endswith(f"--results {tmp_path} --device cpu --tracker none")


def test_a_set_applies_where_it_can_and_contradictions_are_refused(tmp_path, capsys):
    # loss.alpha is pucl's: the other losses run without it, as with --grid.
    assert main(["sweep", "--domains", "tiny", "--losses", "infonce,pucl", "--set", "loss.alpha=0.3", "--seeds", "0",
                 "--results", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[invalid]" not in out and "--loss pucl --preset quick --seeds 0 --set loss.alpha=0.3" in out
    for args, message in ((["--set", "epochs=3", "--grid", "epochs=1,2"], "epochs given both to --set and to --grid"),
                          (["--grid", "epochs=1", "--grid", "epochs=2"], "--grid epochs is given twice"),
                          (["--grid", "epochs"], "--grid expects key=value, got 'epochs'"),
                          (["--set", "loss.nope=1"], "--set loss.nope applies to no domain/loss")):
        assert main(["sweep", "--domains", "tiny", "--results", str(tmp_path), "--dry-run", *args]) == 2
        assert message in capsys.readouterr().err


_GRID_SWEEP = ["sweep", "--domains", "tiny", "--losses", "pucl", "--grid", "loss.alpha=0.1,0.5,abc", "--grid",
               "epochs=1", "--set", "lr=0.1", "--seeds", "0", "--tracker", "none"]


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """One sweep of pucl over three --grid values of loss.alpha, one of them invalid, read by several tests: its
    results folder and output. (The workers must know the tiny domain: a subprocess.)"""
    results = tmp_path_factory.mktemp("grid")
    return results, harness(*_GRID_SWEEP, "--results", str(results), timeout=300)


def test_an_invalid_grid_point_fails_the_sweep_after_the_others_ran(tmp_path, grid_sweep):
    assert main([*_GRID_SWEEP, "--results", str(tmp_path), "--dry-run"]) == 1
    results, out = grid_sweep
    assert out.returncode == 1, out.stderr
    assert "[invalid]" in out.stdout and "loss.alpha=abc" in out.stdout
    assert "sweep done: 2 completed, 1 invalid combination not run (listed above)" in out.stdout
    assert len(list(results.glob("*.json"))) == 2


def test_each_jobs_line_names_its_point_of_the_grid(grid_sweep):
    """Two jobs of one loss and seed that differ only in a --grid value: each line says which it ran (the keys
    that vary only, not a --set or a --grid of one value)."""
    results, out = grid_sweep
    lines = [line for line in out.stdout.splitlines() if line.startswith("[completed]")]
    assert sorted(line.split(" ")[2] for line in lines) == ["(loss.alpha=0.1):", "(loss.alpha=0.5):"], lines
    records = {r["run_id"]: r for r in (json.loads(p.read_text()) for p in results.glob("*.json"))}
    for line in lines:  # each metric to the pages' decimals, as harness run prints a seed's (n_test=60.00, not 60)
        metrics = records[line.split(" ")[1]]["metrics"]
        assert line.endswith(": " + ", ".join(f"{k}={page_decimals(v)}" for k, v in sorted(metrics.items()))), line


def test_sweep_skips_existing_records(tmp_path, run_main):
    # Two of the six runs exist already.
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0,1", "--set", "epochs=2",
                 "--results", str(tmp_path), "--quiet"]) == 0
    before = {p.name: p.read_text() for p in tmp_path.glob("*.json")}
    out = harness("sweep", "--domains", "tiny", "--losses", "infonce,pucl", "--grid", "loss.alpha=0.1,0.5",
                  "--set", "epochs=2", "--seeds", "0,1", "--executor", "local", "--workers", "2",
                  "--results", str(tmp_path), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "6 runs, 2 with a completed record (skipped), 4 to run" in out.stdout, out.stdout + out.stderr
    assert "sweep done: 4 completed" in out.stdout
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert len(records) == 6 and all(r["status"] == "completed" for r in records)
    assert sorted(r["loss_params"].get("alpha", 0) for r in records) == [0, 0, 0.1, 0.1, 0.5, 0.5]
    assert all(p.read_text() == text for p in tmp_path.glob("*.json") if (text := before.get(p.name)))
    again = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce,pucl", "--grid", "loss.alpha=0.1,0.5",
                     "--set", "epochs=2", "--seeds", "0,1", "--results", str(tmp_path))
    assert again.returncode == 0 and "6 with a completed record (skipped), 0 to run" in again.stdout


def test_slurm_falls_back_to_local_without_slurm(tmp_path, capsys, monkeypatch):
    # Through the harness: a plain `import submitit` reconfigures logging and closes every handler, absl's with
    # the stream it holds (pytest's capture file, after an in-process RL test): tests/test_sweep_submitit_logging.py.
    SlurmExecutor = import_submitit().slurm.slurm.SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "affinity", classmethod(lambda cls: -1))  # as where no srun is installed
    args = argparse.Namespace(results=str(tmp_path), timeout_min=10, device="cpu", slurm_partition=None)
    assert run_slurm([], 1, args, []) is None  # submitit's AutoExecutor finds no Slurm on this machine
    assert "no Slurm cluster found (submitit detected 'local'); running with the local executor" in \
        capsys.readouterr().out


class _Job:
    """What :class:`harness.sweep.cluster.LeftQueue` reads of a submitit job."""

    def __init__(self, job_id: str, state: str = "UNKNOWN") -> None:
        self.job_id, self.state, self.has_result = job_id, state, False

    def done(self, force_check: bool = False) -> bool:
        return self.has_result


def test_a_job_absent_from_the_queue_without_a_result_is_found_gone_only_after_the_grace(monkeypatch):
    """Where Slurm keeps no accounting (submitit's state UNKNOWN), a job killed before it wrote its result would be
    waited on for ever: one absent from squeue for ``--slurm-lost-after`` and still without a result is gone; none
    other is."""
    from harness.sweep import cluster

    clock, queue = [1000.0], {"5_0"}
    monkeypatch.setattr(cluster, "time", argparse.Namespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(cluster, "_squeue", lambda: None if queue is None else set(queue))
    listed, killed, finished, known = _Job("5_0"), _Job("5_1"), _Job("5_2"), _Job("5_3", state="FAILED")
    jobs = [listed, killed, finished, known]
    left = cluster.LeftQueue(60.0)
    assert left(jobs) == set()  # 5_1, 5_2 and 5_3 absent from here on
    clock[0] += left.check_s / 2
    assert left(jobs) == set()  # too soon to ask squeue again
    clock[0] += left.gone_s - left.check_s / 2 - 1
    assert left(jobs) == set()  # absent for gone_s - 1
    finished.has_result = True  # its result showed late
    queue = None  # squeue does not answer: no sign of anything
    clock[0] += left.check_s
    assert left(jobs) == set()
    queue = {"5_0"}
    clock[0] += left.check_s
    assert left(jobs) == {killed}  # not 5_0 (queued), 5_2 (its result came), 5_3 (sacct knows how it ended)
    queue = {"5_0", "5_1"}  # back in the queue (requeued): absent no longer
    clock[0] += left.check_s
    assert left(jobs) == set()


def test_a_grace_shorter_than_the_squeue_interval_is_kept(monkeypatch):
    """``--slurm-lost-after 3``: squeue is asked every 3 s, not every 10, so a lost job is failed after 3 s."""
    from harness.sweep import cluster

    clock = [1000.0]
    monkeypatch.setattr(cluster, "time", argparse.Namespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(cluster, "_squeue", lambda: set())
    killed = _Job("5_0")
    left = cluster.LeftQueue(3.0)
    assert left([killed]) == set()  # absent from here on
    clock[0] += 2.5
    assert left([killed]) == set()
    clock[0] += 0.5
    assert left([killed]) == {killed}
