"""Graceful ends (harness.run.stopping): SIGTERM, SIGUSR1, --time-limit and, in a sweep, SIGINT stop at a checkpoint,
exit 75 with the command that resumes, and that command finishes the work; a stopped sweep leaves no process and
starts no queued job. Through the CLI in subprocesses, on the tiny domain and on the graph domain (whose resume is
exact, so the resumed record's metrics equal an uninterrupted run's)."""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import datetime
from pathlib import Path

import psutil
import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from test_faults import (
    _start,
    _wait_for_epoch,
    assert_resumed_as_uninterrupted,
    graph_exact_env,
    signal_at_first_checkpoint,
)
from tiny_domain import harness, resume_args

from domains.context import RunContext
from domains.errors import UserError
from harness.run import resume_command
from harness.run.stopping import EXIT_STOPPED, parse_duration, stop_margin

TINY = ["run", "--domain", "tiny", "--loss", "infonce", "--quiet"]


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def _checkpoint_epoch(results: Path) -> int:
    """The epoch the run's checkpoint holds; 0 without one."""
    [work] = [p for p in (results / ".work").iterdir() if p.is_dir()]
    saved = RunContext(seed=0, device=torch.device("cpu"), data_root=Path(), work_dir=work,
                       resume=True, run_key=work.name).saved_extras()
    return saved["epoch"] if saved else 0


def _resume(stderr: str) -> list[str]:
    """The arguments of the resume command the last line of ``stderr`` (or stdout) prints."""
    return resume_args(stderr.strip().splitlines()[-1])


def test_a_signal_stops_a_run_at_a_checkpoint_and_the_printed_command_finishes_it(tmp_path):
    """SIGUSR1, Slurm's notice before a job's time limit (SIGTERM: the graph test below)."""
    sig = signal.SIGUSR1
    proc = _start([*TINY, "--seeds", "0,1", "--set", "epochs=12", "--set", "sleep_s=0.3", "--results", str(tmp_path)])
    _wait_for_epoch(tmp_path, 2)
    [log] = tmp_path.glob("*.log")
    logged = max(int(n) for n in re.findall(r"epoch (\d+):", log.read_text()))
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    assert stderr.strip().splitlines()[-1].startswith(f"stopped ({sig.name}) at a checkpoint; continue with: ")
    assert f"stopped ({sig.name}) at a step boundary; its checkpoint is" in log.read_text()
    assert not _records(tmp_path)  # seed 0 did not finish and seed 1 never started
    # The next boundary, not the end of the run: at most the epoch under way when the log was read, and one that
    # ended between the read and the signal. Counted in epochs, not seconds, which a loaded machine stretches.
    epoch = _checkpoint_epoch(tmp_path)
    assert logged <= epoch <= logged + 2 < 12
    out = harness(*_resume(stderr))
    assert out.returncode == 0, out.stderr
    first, second = _records(tmp_path)
    assert (first["seed"], first["info"]["start_epoch"], first["resumed"]) == (0, epoch, True)
    assert (second["seed"], second["info"]["start_epoch"]) == (1, 0)
    assert [c["epoch"] for c in first["curve"]] == list(range(1, 13))


def _last_attempt(log: Path) -> list[tuple[float, str]]:
    """The last attempt's log lines, each with its seconds since the attempt's first line (its command)."""
    lines = [line for line in log.read_text().splitlines() if line[:2] == "20"]
    lines = lines[max(i for i, line in enumerate(lines) if ": harness run " in line):]
    times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in lines]
    return [((t - times[0]).total_seconds(), line[24:]) for t, line in zip(times, lines)]


def test_time_limit_stops_before_the_limit_and_each_rerun_goes_on_until_the_run_completes(tmp_path):
    """Like a job with a time limit that the scheduler requeues: each slice stops at a checkpoint before its
    limit, and the printed command (the limit included) goes on from there."""
    # 10 s of sleep alone: longer than the limit on any machine
    args = [*TINY, "--seeds", "0", "--set", "epochs=40", "--set", "sleep_s=0.25", "--time-limit", "8s",
            "--results", str(tmp_path)]
    epochs = []
    for _ in range(12):
        out = harness(*args, timeout=60)
        if out.returncode == 0:
            break
        assert out.returncode == EXIT_STOPPED, out.stderr
        assert "stopped (time limit) at a checkpoint" in out.stderr
        [log] = tmp_path.glob("*.log")
        # The limit is counted from before the run's first log line, and a step under way finishes: at most one
        # epoch ends after the limit (a slow machine's first epoch may take longer than the limit itself).
        lines = _last_attempt(log)
        assert "stopped (time limit)" in lines[-1][1]
        assert sum(at > 8 for at, line in lines if ": epoch " in line) <= 1, lines
        epochs.append(_checkpoint_epoch(tmp_path))
        args = _resume(out.stderr)
        assert "--time-limit" in args
    assert out.returncode == 0, out.stderr
    assert epochs and epochs == sorted(epochs) and epochs[-1] < 40
    [record] = _records(tmp_path)
    assert [c["epoch"] for c in record["curve"]] == list(range(1, 41))


def test_durations():
    assert [parse_duration(t) for t in ("90m", "2h", "3600s", "1h30m", "45", "1.5h")] == \
        [5400, 7200, 3600, 5400, 45, 5400]
    assert stop_margin(3600) == 180 and stop_margin(10 * 3600) == 300
    for bad in ("soon", "", "10x", "0s", "-5m"):
        with pytest.raises(UserError, match="--time-limit"):
            parse_duration(bad)


def test_a_bad_time_limit_is_a_user_error_before_any_work(tmp_path):
    out = harness(*TINY, "--seeds", "0", "--time-limit", "soon", "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr.startswith("error: --time-limit 'soon' is not a duration")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def _stopped_after_a_checkpoint(args: list[str], results: Path) -> str:
    """The standard error of ``harness *args`` (writing into ``results``) stopped by SIGTERM once it has saved its
    first checkpoint; skips where the run finished before the signal arrived."""
    proc = signal_at_first_checkpoint(args, results, signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the run finished before the signal arrived (a machine this fast needs more epochs)")
    assert proc.returncode == EXIT_STOPPED, stderr
    return stderr


def test_sigterm_on_graph_resumes_to_the_record_of_an_uninterrupted_run(tmp_path, monkeypatch):
    pytest.importorskip("torch_geometric")
    graph_exact_env(monkeypatch)
    args = ["run", "--domain", "graph", "--loss", "dcl", "--seeds", "0", "--quiet", "--set", "epochs=4",
            "--set", "svm_folds=3", "--set", "svm_inner_folds=2"]
    assert harness(*args, "--results", str(tmp_path / "whole")).returncode == 0
    cut = tmp_path / "cut"
    stderr = _stopped_after_a_checkpoint([*args, "--results", str(cut)], cut)
    assert stderr.strip().splitlines()[-1].startswith("stopped (SIGTERM) at a checkpoint; continue with: ")
    assert not _records(cut)
    out = harness(*_resume(stderr))
    assert out.returncode == 0, out.stderr
    [whole], [resumed] = _records(tmp_path / "whole"), _records(cut)
    assert 1 <= resumed["info"]["resumed_at_epoch"] < 4 and resumed["run_id"] == whole["run_id"]
    assert_resumed_as_uninterrupted(resumed, whole)


def test_a_resumed_graph_runs_bar_counts_the_epochs_it_had_done_out_of_all_its_epochs(tmp_path):
    """Resumed after 3 of 8 epochs, the bar read 0/5 (the epochs left) where the log says "resuming at epoch 4":
    it now reads 3/8, as the rl domain's bar over environment steps always did."""
    pytest.importorskip("torch_geometric")
    args = ["run", "--domain", "graph", "--loss", "dcl", "--seeds", "0", "--set", "epochs=8", "--set", "svm_folds=3",
            "--set", "svm_inner_folds=2", "--tracker", "none", "--results", str(tmp_path)]
    stderr = _stopped_after_a_checkpoint(args, tmp_path)
    done = _checkpoint_epoch(tmp_path)
    assert 1 <= done < 8
    out = harness(*_resume(stderr), env={"TQDM_MININTERVAL": "0"})  # every frame, though standard error is a pipe
    assert out.returncode == 0, out.stderr
    frames = [(int(n), int(total)) for n, total in re.findall(r"epochs:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)", out.stderr)]
    assert frames and frames[0] == (done, 8) and {total for _, total in frames} == {8}, out.stderr
    assert max(n for n, _ in frames) == 8


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_stopped_sweep_checkpoints_its_jobs_starts_no_queued_one_and_leaves_no_process(tmp_path, sig):
    """The signal goes to the sweep's main process only (``kill PID``), as it would from a scheduler."""
    sweep = ["sweep", "--domains", "tiny", "--losses", "infonce,dcl,hcl", "--seeds", "0", "--set", "epochs=16",
             "--set", "sleep_s=0.25", "--workers", "2", "--results", str(tmp_path)]
    proc = _start(sweep)
    deadline = time.time() + 90
    while time.time() < deadline and sum("epoch 2:" in p.read_text() for p in tmp_path.glob("*.log")) < 2:
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert len(children) >= 3  # two workers and multiprocessing's resource tracker
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    assert f"sweep stopped ({sig.name}): 2 stopped, 1 not started; continue with: " in stdout
    assert len(list(tmp_path.glob("*.log"))) == 2  # no queued job started
    assert not list((tmp_path / ".work").glob("*.stop"))
    if sig == signal.SIGINT:
        return  # the resume goes on as after SIGTERM
    out = harness(*_resume(stdout), timeout=300)
    assert out.returncode == 0, out.stderr
    records = _records(tmp_path)
    assert len(records) == 3 and all(r["status"] == "completed" for r in records)
    assert sorted(r["info"]["start_epoch"] > 0 for r in records) == [False, True, True]


def test_a_sweep_says_at_once_that_it_is_stopping_not_only_once_its_jobs_have_stopped(tmp_path):
    """A job stops once the step under way ends (here a 5 s epoch; a real one can take minutes): the sweep says it
    heard the Ctrl-C while the job is still finishing its epoch, not first when everything has stopped."""
    proc = _start(["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--set", "epochs=4",
                   "--set", "sleep_s=5", "--results", str(tmp_path)])
    _wait_for_epoch(tmp_path, 1)
    proc.send_signal(signal.SIGINT)
    said = proc.stdout.readline()
    while said and not said.startswith("sweep stopping"):
        said = proc.stdout.readline()
    [log] = tmp_path.glob("*.log")
    job_stopped = "at a step boundary; its checkpoint is" in log.read_text()
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    assert said.startswith("sweep stopping (SIGINT): each running job stops at its next checkpoint"), stdout
    assert not job_stopped  # said while the job was still in its epoch
    assert "at a step boundary; its checkpoint is" in log.read_text()  # the job did stop, at its epoch's end
    assert "[stopped] tiny/blobs/infonce seed 0: the sweep was stopped; its checkpoint is kept" in stdout


@pytest.mark.usefixtures("rendering")
def test_rl_stops_at_the_end_of_the_episode_under_way_and_resumes_exactly(tmp_path):
    """CURL resumes only at an episode's end (the environment's state is not saved): a stop asked mid-episode
    saves a checkpoint there, outside the checkpoint_freq schedule, and the resumed run equals a straight one."""
    from test_rl_train import context, run, spec

    from domains.errors import RunStopped

    long = spec(checkpoint_freq=0, num_env_steps=4000)  # 40 agent steps: 4 episodes of 10, no scheduled checkpoint
    straight = run(long, context(tmp_path / "a"))
    asked = iter(range(10 ** 6))  # from its 13th question on (step 12 or so: mid-episode), the run is told to stop
    stopped = context(tmp_path / "b")
    stopped.stop_reason = lambda: "SIGTERM" if next(asked) >= 13 else None
    with pytest.raises(RunStopped, match="SIGTERM"):
        run(long, stopped)
    state = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)
    assert state["extra"]["step"] == 20  # the end of the second episode, the one under way
    resumed = run(long, context(tmp_path / "b", resume=True))
    assert resumed[1].metrics == straight[1].metrics and resumed[0].curve == straight[0].curve


def test_the_resume_command_starts_the_harness_the_way_it_was_started(tmp_path, monkeypatch):
    """In-process (not run as ``python -m harness``) the hint names the installed script; the subprocess tests
    above check the ``python -m harness`` form. ``--resume`` is added once; ``--force`` stays (``--force --resume``
    goes on with the forced rerun). Like every printed command it starts with the data root where that is not the
    built-in one (``--data-root``, else ``$HARNESS_DATA_ROOT``): pasted in a new shell, it reads the same data."""
    monkeypatch.delenv("HARNESS_DATA_ROOT", raising=False)
    assert resume_command(["run", "--force", "--seeds", "0"]) == "harness run --force --seeds 0 --resume"
    assert resume_command(["bench", "all", "--resume"]) == "harness bench all --resume"
    monkeypatch.setenv("HARNESS_DATA_ROOT", str(tmp_path / "env"))
    assert resume_command(["run", "--seeds", "0"]) == \
        f"HARNESS_DATA_ROOT={tmp_path / 'env'} harness run --seeds 0 --resume"
    assert resume_command(["run", "--data-root", "mine"], "mine") == \
        f"HARNESS_DATA_ROOT={Path('mine').resolve()} harness run --data-root mine --resume"


def test_a_loop_with_nothing_left_shows_no_bar(tmp_path, capsys):
    """A resumed run whose training had ended showed an empty '0it' bar; a loop with steps still shows its bar."""
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=Path(), work_dir=tmp_path)
    assert list(ctx.progress(range(5, 5), desc="epochs", total=0)) == []
    assert list(ctx.progress(range(5, 5), desc="epochs", total=5, initial=5)) == []  # counted from the steps done
    assert capsys.readouterr().err == ""
    assert list(ctx.progress(range(2), desc="epochs", total=2)) == [0, 1]
    assert "epochs" in capsys.readouterr().err
