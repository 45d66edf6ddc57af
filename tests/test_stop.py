"""Graceful ends (harness.run.stopping): SIGTERM, SIGUSR1, --time-limit and, in a sweep, SIGINT stop at a checkpoint,
exit 75 with the command that resumes, and that command finishes the work; a stopped sweep leaves no process and
starts no queued job. Through the CLI in subprocesses, on the tiny domain and on the graph domain (whose resume is
exact, so the resumed record's metrics equal an uninterrupted run's; there also the ungraceful end, kill -9). Where
several tests read the same run, a module-scoped fixture runs it once."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from support import wait_for
from test_faults import _start, _wait_for_epoch
from tiny_domain import harness, resume_args

from domains.context import RunContext
from domains.errors import UserError
from harness.cli import main
from harness.run import resume_command
from harness.run.stopping import EXIT_STOPPED, parse_duration, stop_margin
from harness.suites.pool import thread_env

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


@pytest.fixture(scope="module")
def usr1_stop(tmp_path_factory) -> SimpleNamespace:
    """A run of seeds 0 and 1 sent SIGUSR1 (Slurm's notice before a job's time limit) at the end of seed 0's epoch 2,
    then the command it printed, read line by line: ``stopped`` (its exit status, standard error, log, records, the
    epoch last logged before the signal and the checkpoint's epoch) and ``resumed`` (its first line, whether it
    still ran and whether seed 1 had its record when that line came, its exit status, standard error and the
    records)."""
    results = tmp_path_factory.mktemp("usr1")
    # Seed 0 holds after epoch 2 till `release` exists, created once the signal is sent: the signal reaches the run
    # at that boundary however slowly this process or the run is scheduled.
    release = results.parent / f"{results.name}-release"
    proc = _start([*TINY, "--seeds", "0,1", "--set", "epochs=12", "--results", str(results)], hold=(2, release))
    _wait_for_epoch(results, 2)
    [log] = results.glob("*.log")
    logged = max(int(n) for n in re.findall(r"epoch (\d+):", log.read_text()))
    proc.send_signal(signal.SIGUSR1)
    release.touch()
    _, stderr = proc.communicate(timeout=60)
    stopped = SimpleNamespace(code=proc.returncode, stderr=stderr, log=log.read_text(), records=_records(results),
                              logged=logged, epoch=_checkpoint_epoch(results))
    if stopped.code != EXIT_STOPPED:
        return SimpleNamespace(stopped=stopped, resumed=None)
    # The resume's seed 1 holds after its epoch 2 till `seed_1_release` exists, created once the first line is read:
    # seed 1 provably still runs when seed 0's line comes, however slowly this process reads it.
    seed_1_release = results.parent / f"{results.name}-seed-1-release"
    resume = _start(_resume(stderr), hold=(2, seed_1_release))
    lines: list[str] = []
    threading.Thread(target=lambda: lines.append(resume.stdout.readline()), daemon=True).start()
    try:
        wait_for("the resumed run's first line", lambda: bool(lines))
        running, seed_1_done = resume.poll() is None, bool(list(results.glob("*-s1.json")))
    finally:
        seed_1_release.touch()
    first = lines[0]
    _, err = resume.communicate(timeout=120)
    resumed = SimpleNamespace(first=first, running=running, seed_1_done=seed_1_done, code=resume.returncode,
                              stderr=err, records=_records(results))
    return SimpleNamespace(stopped=stopped, resumed=resumed)


def test_a_signal_stops_a_run_at_a_checkpoint_and_the_printed_command_finishes_it(usr1_stop):
    """SIGUSR1 (SIGTERM: the graph tests below)."""
    stopped, resumed = usr1_stop.stopped, usr1_stop.resumed
    assert stopped.code == EXIT_STOPPED, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1].startswith("stopped (SIGUSR1) at a checkpoint; continue with: ")
    assert "stopped (SIGUSR1) at a step boundary; its checkpoint is" in stopped.log
    assert not stopped.records  # seed 0 did not finish and seed 1 never started
    # The next boundary, not the end of the run: the run was held at epoch 2's end when signalled, so it stops there.
    assert stopped.logged == stopped.epoch == 2
    assert resumed.code == 0, resumed.stderr
    first, second = resumed.records
    assert (first["seed"], first["info"]["start_epoch"], first["resumed"]) == (0, stopped.epoch, True)
    assert (second["seed"], second["info"]["start_epoch"]) == (1, 0)
    assert [c["epoch"] for c in first["curve"]] == list(range(1, 13))


def test_each_seed_is_printed_as_it_finishes(usr1_stop):
    """The resumed run's seed 0 line arrives while its seed 1 still trains (held after its epoch 2)."""
    resumed = usr1_stop.resumed
    assert resumed is not None, usr1_stop.stopped.stderr
    assert resumed.first.startswith("[completed]") and resumed.first.rstrip().endswith("-s0.json"), resumed.first
    assert resumed.running and not resumed.seed_1_done  # a process still tearing down is no proof alone
    assert resumed.code == 0, resumed.stderr


def _last_attempt(log: Path) -> list[tuple[float, str]]:
    """The last attempt's log lines, each with its seconds since the attempt's first line (its command)."""
    lines = [line for line in log.read_text().splitlines() if line[:2] == "20"]
    lines = lines[max(i for i, line in enumerate(lines) if ": harness run " in line):]
    times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in lines]
    return [((t - times[0]).total_seconds(), line[24:]) for t, line in zip(times, lines)]


def test_time_limit_stops_before_the_limit_and_each_rerun_goes_on_until_the_run_completes(tmp_path):
    """Like a job with a time limit that the scheduler requeues: each slice stops at a checkpoint before its
    limit, and the printed command (the limit included) goes on from there."""
    # 8 s of sleep alone: longer than the limit less its margin on any machine. Few long epochs, and no tracker
    # opened within the limit: on a loaded machine each epoch's checkpoint and a tracker's start take seconds of a
    # slice, which then gets too few epochs done for the run to end within the reruns allowed.
    args = [*TINY, "--seeds", "0", "--set", "epochs=10", "--set", "sleep_s=0.8", "--tracker", "none",
            "--time-limit", "8s", "--results", str(tmp_path)]
    epochs = []
    for _ in range(12):
        out = harness(*args, timeout=180)  # a slice's start alone can take a minute on a loaded machine
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
    assert epochs and epochs == sorted(epochs) and epochs[-1] < 10
    [record] = _records(tmp_path)
    assert [c["epoch"] for c in record["curve"]] == list(range(1, 11))


def test_durations():
    assert [parse_duration(t) for t in ("90m", "2h", "3600s", "1h30m", "45", "1.5h")] == \
        [5400, 7200, 3600, 5400, 45, 5400]
    assert stop_margin(3600) == 180 and stop_margin(10 * 3600) == 300
    for bad in ("soon", "", "10x", "0s", "-5m"):
        with pytest.raises(UserError, match="--time-limit"):
            parse_duration(bad)


def test_a_bad_time_limit_is_a_user_error_before_any_work(tmp_path, run_main):
    """In this process: a refusal (the run command's own subprocess tests are above)."""
    out = run_main(main, *TINY, "--seeds", "0", "--time-limit", "soon", "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr.startswith("error: --time-limit 'soon' is not a duration")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


# --- the graph domain, whose resume is exact: kill -9 and SIGTERM, each resumed to an uninterrupted run's record ---

# Every graph run here: the same command (one run id), a bar on standard error, no tracker's files; each given
# 300 s, which a loaded machine's graph run (imports, data, 4 epochs, the SVM's folds) can take over 120 s of.
GRAPH = ["run", "--domain", "graph", "--loss", "pucl", "--seeds", "0", "--set", "epochs=4", "--set", "svm_folds=3",
         "--set", "svm_inner_folds=2", "--tracker", "none"]


def graph_exact_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """One torch thread in the graph subprocesses: a resume is exact for the same thread count (a CPU's float
    reductions are summed per thread), and one thread keeps the count, and so the sums, the same in the
    uninterrupted run, the stopped one and its resume on any machine and under any load. The regression suite's
    runs set the same (``thread_env``)."""
    for name, value in thread_env(1).items():
        monkeypatch.setenv(name, value)


def assert_resumed_as_uninterrupted(resumed: dict, whole: dict) -> None:
    """The record of a resumed graph run is the uninterrupted run's: the same loss at every epoch, then the same
    metrics. The curve comes first: a resume that lost state (the RNG, the optimizer's moments, an epoch) shows
    there, while at these few epochs the SVM's accuracy swings by points between neighbouring weights."""
    where = f"resumed at epoch {resumed['info']['resumed_at_epoch']}"
    assert resumed["run_id"] == whole["run_id"], where
    curves = [c["loss"] for c in resumed["curve"]], [c["loss"] for c in whole["curve"]]
    assert curves[0] == curves[1], f"{where}: losses {curves[0]} against {curves[1]}"
    assert resumed["metrics"] == whole["metrics"], where
    assert resumed["details"]["fold_accuracy"] == whole["details"]["fold_accuracy"], where


def signal_at_first_checkpoint(args: list[str], results: Path, sig: signal.Signals) -> subprocess.Popen:
    """``harness *args`` (writing into ``results``) started, and sent ``sig`` once it has saved a checkpoint."""
    proc = _start(args)
    wait_for(f"a checkpoint in {results / '.work'}", lambda: bool(list((results / ".work").glob("*/checkpoint.pt"))))
    proc.send_signal(sig)
    return proc


@pytest.fixture(scope="module")
def graph_whole(tmp_path_factory) -> dict:
    """The record of the uninterrupted graph run, the reference of both resumes."""
    pytest.importorskip("torch_geometric")
    results = tmp_path_factory.mktemp("whole")
    with pytest.MonkeyPatch.context() as patch:
        graph_exact_env(patch)
        out = harness(*GRAPH, "--results", str(results), timeout=300)
    assert out.returncode == 0, out.stderr
    [record] = _records(results)
    return record


def test_kill_9_then_resume_gives_the_record_of_an_uninterrupted_run(tmp_path, monkeypatch, graph_whole):
    graph_exact_env(monkeypatch)
    args = [*GRAPH, "--results", str(tmp_path)]
    signal_at_first_checkpoint(args, tmp_path, signal.SIGKILL).wait()
    assert not _records(tmp_path)  # nothing half-written, only the checkpoint
    out = harness(*args, "--resume", timeout=300)
    assert out.returncode == 0, out.stderr
    [resumed] = _records(tmp_path)
    assert resumed["info"]["resumed_at_epoch"] >= 1
    assert_resumed_as_uninterrupted(resumed, graph_whole)


@pytest.fixture(scope="module")
def graph_sigterm(tmp_path_factory) -> SimpleNamespace:
    """The graph run sent SIGTERM once it has saved its first checkpoint (skips where it finished before the signal
    arrived: a machine this fast needs more epochs), then the command it printed, every bar frame on its standard
    error though that is a pipe: the stop's standard error, the checkpoint's epoch, the records after the stop, and
    the resume's outcome and records."""
    pytest.importorskip("torch_geometric")
    results = tmp_path_factory.mktemp("sigterm")
    with pytest.MonkeyPatch.context() as patch:
        graph_exact_env(patch)
        proc = signal_at_first_checkpoint([*GRAPH, "--results", str(results)], results, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        if proc.returncode == 0:
            pytest.skip("the run finished before the signal arrived (a machine this fast needs more epochs)")
        assert proc.returncode == EXIT_STOPPED, stderr
        stopped = SimpleNamespace(stderr=stderr, epoch=_checkpoint_epoch(results), records=_records(results))
        out = harness(*_resume(stderr), env={"TQDM_MININTERVAL": "0"}, timeout=300)
    return SimpleNamespace(stopped=stopped, resumed=out, records=_records(results))


def test_sigterm_on_graph_resumes_to_the_record_of_an_uninterrupted_run(graph_sigterm, graph_whole):
    stopped, resumed = graph_sigterm.stopped, graph_sigterm.resumed
    assert stopped.stderr.strip().splitlines()[-1].startswith("stopped (SIGTERM) at a checkpoint; continue with: ")
    assert not stopped.records
    assert resumed.returncode == 0, resumed.stderr
    [record] = graph_sigterm.records
    assert 1 <= record["info"]["resumed_at_epoch"] < 4
    assert_resumed_as_uninterrupted(record, graph_whole)


def test_a_resumed_graph_runs_bar_counts_the_epochs_it_had_done_out_of_all_its_epochs(graph_sigterm):
    """Resumed after 1 of 4 epochs, the bar read 0/3 (the epochs left) where the log says "resuming at epoch 2": it
    now reads 1/4, as the rl domain's bar over environment steps always did."""
    done, resumed = graph_sigterm.stopped.epoch, graph_sigterm.resumed
    assert 1 <= done < 4
    assert resumed.returncode == 0, resumed.stderr
    frames = [(int(n), int(total)) for n, total in re.findall(r"epochs:\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)",
                                                                resumed.stderr)]
    assert frames and frames[0] == (done, 4) and {total for _, total in frames} == {4}, resumed.stderr
    assert max(n for n, _ in frames) == 4


# --- sweeps ---------------------------------------------------------------------------------------------------

SWEEP = ["sweep", "--domains", "tiny", "--losses", "infonce,dcl,hcl", "--seeds", "0", "--workers", "2"]


def _wait_for_both_jobs(results: Path, epoch: int) -> None:
    """Until both running jobs' logs say ``epoch`` (a loaded machine can take over 90 s to start them)."""
    wait_for(f"two logs in {results} to reach epoch {epoch}",
             lambda: sum(f"epoch {epoch}:" in p.read_text() for p in results.glob("*.log")) >= 2)


def _assert_stopped_as_a_whole(sig: signal.Signals, code: int, stdout: str, stderr: str, results: Path,
                               children: list[psutil.Process]) -> None:
    """Two jobs stopped at a checkpoint, the queued one not started, no process and no stop file left."""
    assert code == EXIT_STOPPED, stderr
    assert len(children) >= 3  # two workers and multiprocessing's resource tracker
    gone, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
    assert f"sweep stopped ({sig.name}): 2 stopped, 1 not started; continue with: " in stdout
    assert len(list(results.glob("*.log"))) == 2  # no queued job started
    assert not list((results / ".work").glob("*.stop"))


def test_a_sigterm_stopped_sweep_checkpoints_its_jobs_starts_no_queued_one_leaves_no_process_and_resumes(tmp_path):
    """The signal goes to the sweep's main process only (``kill PID``), as it would from a scheduler (SIGINT: the
    sweep below)."""
    # Each job holds after epoch 2 till `release` exists, which the test creates once the sweep has told its jobs to
    # stop (its stop file): however late the second job starts, neither can end first. Released, a job looks for the
    # file at a step boundary at most FILE_POLL_S (0.5 s: 2 epochs of sleep_s) after it last did, long before epoch 16.
    release = tmp_path.parent / f"{tmp_path.name}-release"
    proc = _start([*SWEEP, "--set", "epochs=16", "--set", "sleep_s=0.25", "--results", str(tmp_path)],
                  hold=(2, release))
    _wait_for_both_jobs(tmp_path, 2)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    wait_for(f"the sweep's stop file in {tmp_path / '.work'}", lambda: bool(list((tmp_path / ".work").glob("*.stop"))))
    release.touch()
    stdout, stderr = proc.communicate(timeout=60)
    _assert_stopped_as_a_whole(signal.SIGTERM, proc.returncode, stdout, stderr, tmp_path, children)
    out = harness(*_resume(stdout), timeout=300)
    assert out.returncode == 0, out.stderr
    records = _records(tmp_path)
    assert len(records) == 3 and all(r["status"] == "completed" for r in records)
    assert sorted(r["info"]["start_epoch"] > 0 for r in records) == [False, True, True]


@pytest.fixture(scope="module")
def sigint_sweep(tmp_path_factory) -> SimpleNamespace:
    """A sweep of three jobs on two workers, each epoch 5 s long (a real one can take minutes), sent Ctrl-C's
    SIGINT (to its main process only) once both running jobs have logged their first epoch: what it said first on
    standard output after the signal, and how many job logs said the job had stopped at that moment; then its exit
    status, output, results folder and the processes it had."""
    results = tmp_path_factory.mktemp("sigint")
    proc = _start([*SWEEP, "--set", "epochs=4", "--set", "sleep_s=5", "--results", str(results)])
    _wait_for_both_jobs(results, 1)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGINT)
    said = proc.stdout.readline()
    while said and not said.startswith("sweep stopping"):
        said = proc.stdout.readline()
    jobs_stopped = sum("at a step boundary; its checkpoint is" in p.read_text() for p in results.glob("*.log"))
    stdout, stderr = proc.communicate(timeout=60)
    return SimpleNamespace(said=said, jobs_stopped=jobs_stopped, code=proc.returncode, stdout=stdout, stderr=stderr,
                           results=results, children=children)


def test_a_sigint_stopped_sweep_checkpoints_its_jobs_starts_no_queued_one_and_leaves_no_process(sigint_sweep):
    """The resume goes on as after SIGTERM (above)."""
    run = sigint_sweep
    _assert_stopped_as_a_whole(signal.SIGINT, run.code, run.stdout, run.stderr, run.results, run.children)


def test_a_sweep_says_at_once_that_it_is_stopping_not_only_once_its_jobs_have_stopped(sigint_sweep):
    """A job stops once the step under way ends: the sweep says it heard the Ctrl-C while its jobs are still
    finishing their epochs, not first when everything has stopped."""
    run = sigint_sweep
    assert run.code == EXIT_STOPPED, run.stderr
    assert run.said.startswith("sweep stopping (SIGINT): each running job stops at its next checkpoint"), run.stdout
    assert run.jobs_stopped < 2  # said while a job was still in its epoch
    logs = [p.read_text() for p in run.results.glob("*.log")]
    assert all("at a step boundary; its checkpoint is" in log for log in logs)  # the jobs did stop, at epoch ends
    assert "[stopped] tiny/blobs/infonce seed 0: the sweep was stopped; its checkpoint is kept" in run.stdout


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
