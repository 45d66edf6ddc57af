"""``harness sweep --executor ray`` on a real one-node Ray cluster (``ray start --head`` on this machine): the
records equal those of the same runs made here, and a worker killed mid-sweep loses only its own run, which a rerun
completes.

Ray turns a loopback address into this machine's own IP (``resolve_ip_for_localhost``), so the cluster listens
there; it is started in its own process group and that group alone is ended after the tests."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
import pytest
from support import local_records, record_metrics
from tiny_domain import harness, harness_env

from harness.run.stopping import EXIT_STOPPED

pytestmark = pytest.mark.ray
# Not imported here: ray's import sets up logging on this process's streams, which pytest closes after a test.
if importlib.util.find_spec("ray") is None:
    pytest.skip("the ray extra is not installed (pip install 'contrastive-harness[ray]')", allow_module_level=True)

LOSSES, SEEDS = ["infonce", "dcl"], "0,1"
GRID = ["sweep", "--domains", "tiny", "--losses", ",".join(LOSSES), "--seeds", SEEDS, "--workers", "2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead(NamedTuple):
    address: str
    pid: int  # `ray start`: its descendants are this head's gcs, raylet and workers, none of another session's


@contextlib.contextmanager
def _head(env: dict[str, str], log: Path) -> Iterator[RayHead]:
    """A Ray head with 2 CPUs started by ``ray start`` in ``env``, its process group ended on leaving."""
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    with open(log, "w") as out:
        head = subprocess.Popen([str(ray_cli), "start", "--head", "--node-ip-address=127.0.0.1",
                                 f"--port={_free_port()}", "--num-cpus=2", "--include-dashboard=false",
                                 "--disable-usage-stats", "--block"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline, address = time.time() + 120, None
        while address is None and time.time() < deadline and head.poll() is None:
            time.sleep(0.5)
            found = re.search(r"ray start --address='([^']+)'", log.read_text())
            address = found.group(1) if found else None
        if address is None:
            pytest.fail(f"ray start did not come up:\n{log.read_text()[-2000:]}")
        yield RayHead(address, head.pid)
    finally:
        for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):  # (the cluster itself is not under test)
            try:
                os.killpg(head.pid, sig)  # the head's group: gcs and raylet (Ray's workers, in groups of
                # their own, end with their raylet)
            except ProcessLookupError:
                break
            deadline = time.time() + wait_s
            while time.time() < deadline and _group(head.pid):
                time.sleep(0.2)
        head.wait(timeout=10)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory) -> Iterator[RayHead]:
    """A Ray head, its environment the harness's with the tiny domain plugged in."""
    # Ray 2.60's `ray start` turns token authentication on where ~/.ray/auth_token exists (a local ray.init writes
    # one), and a driver given an address sends it only with RAY_AUTH_MODE=token: the sweeps below run without.
    env = dict(harness_env(), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    with _head(env, tmp_path_factory.mktemp("ray") / "head.log") as head:
        yield head


def _group(pgid: int) -> list[psutil.Process]:
    procs = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                procs.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return procs


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline() or [proc.name()]
    except psutil.Error:  # ended meanwhile
        return []


def test_a_ray_sweep_writes_the_records_of_local_runs(tmp_path, ray_head):
    remote = harness(*GRID, "--set", "epochs=3", "--executor", "ray", "--ray-address", ray_head.address,
                     "--results", str(tmp_path / "ray"), timeout=300)
    assert remote.returncode == 0, remote.stderr
    assert "sweep done: 4 completed" in remote.stdout
    expected = local_records(tmp_path / "local", LOSSES, "--seeds", SEEDS, "--set", "epochs=3")
    assert len(expected) == 4 and record_metrics(tmp_path / "ray") == expected


def test_a_killed_ray_worker_loses_only_its_run_and_a_rerun_completes_it(tmp_path, ray_head):
    # one seed: two jobs at once on the two CPUs, one of them killed
    args = ["sweep", "--domains", "tiny", "--losses", "infonce,dcl", "--seeds", "0", "--workers", "2", "--set",
            "epochs=8", "--set", "sleep_s=0.5", "--executor", "ray", "--ray-address", ray_head.address,
            "--results", str(tmp_path)]
    sweep = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=Path(__file__).parent.parent,
                             env=harness_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim, deadline = None, time.time() + 120
    while victim is None and time.time() < deadline:  # a task past its second epoch, on this test's head only
        if sum("epoch 2:" in p.read_text() for p in tmp_path.glob("*.log")):
            victim = next((p for p in psutil.Process(ray_head.pid).children(recursive=True)
                           if "ray::_ray_job" in " ".join(_cmdline(p))), None)
        time.sleep(0.1)
    assert victim is not None, "no Ray task running _ray_job was found"
    victim.kill()
    stdout, stderr = sweep.communicate(timeout=300)
    assert sweep.returncode == 1, stderr  # one job failed
    assert "1 failed" in stdout and "its Ray worker was lost" in stdout and "1 completed" in stdout
    assert sum(r[0] == "completed" for r in record_metrics(tmp_path).values()) == 1
    rerun = harness(*args, "--resume", timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert "2 runs, 1 with a completed record (skipped), 1 to run" in rerun.stdout
    assert sum(r[0] == "completed" for r in record_metrics(tmp_path).values()) == 2


def test_a_ray_address_where_nothing_answers_is_one_error_line_not_an_endless_wait(tmp_path):
    address = f"127.0.0.1:{_free_port()}"  # a port nobody listens on: a mistyped address, a cluster gone
    # (the old code retried it without end: the subprocess's timeout fails the test)
    out = harness("sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--executor", "ray",
                  "--ray-address", address, "--results", str(tmp_path), timeout=90)
    assert out.returncode == 2, out.stderr
    [line] = [x for x in out.stderr.splitlines() if x.startswith("error:")]
    # the reason is the system's (its wording is the C library's); the hint after it is ours
    assert line.startswith(f"error: --ray-address {address}: no Ray cluster answers there "
                           f"({os.strerror(errno.ECONNREFUSED)}); start one with ray start --head")
    assert "Traceback" not in out.stderr and not list(tmp_path.glob("*.json"))


def test_a_ray_sweep_without_an_address_starts_its_own_cluster_not_the_dead_one_ray_start_left(tmp_path):
    # A head killed rather than stopped (as the fixture above ends its own) leaves its address in
    # <ray temp>/ray/ray_current_cluster; Ray's default joins that address and retries it for minutes on end.
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths under it have a length limit
    try:
        (Path(ray_tmp) / "ray").mkdir()
        (Path(ray_tmp) / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{_free_port()}")
        env = {k: v for k, v in harness_env().items() if k != "RAY_ADDRESS"}
        # no auth: a new local cluster would write ~/.ray/auth_token, which turns auth on for the fixture's head
        env.update(RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
        sweep = subprocess.run([sys.executable, "-m", "harness", "sweep", "--domains", "tiny", "--losses", "infonce",
                                "--seeds", "0", "--set", "epochs=2", "--executor", "ray", "--results", str(tmp_path)],
                               cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True,
                               timeout=240)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert sweep.returncode == 0, sweep.stderr
    assert "sweep done: 1 completed" in sweep.stdout
    assert [r[0] for r in record_metrics(tmp_path).values()] == ["completed"]


@pytest.mark.slow  # about 45 s: a head of its own, and Ray's 20 s of attempts before it gives up
def test_a_cluster_that_wants_a_token_is_one_error_line_that_names_ray_auth_mode(tmp_path):
    """``ray start --head`` where ``~/.ray/auth_token`` exists (here a HOME of the test's own) turns Ray's token
    authentication on, and a driver given the address sends no token without ``RAY_AUTH_MODE=token``: the sweep
    ended in Ray's traceback (exit 1) after 20 lines of warnings. It is one error line, exit 2, naming the fix,
    which then works."""
    ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths under it have a length limit
    env = {k: v for k, v in harness_env().items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(HOME=str(tmp_path / "home"), RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0")
    # the token a first local Ray instance leaves in ~/.ray (Ray's own command writes it)
    subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"], env=env,
                   capture_output=True, check=True, timeout=120)
    sweep = [sys.executable, "-m", "harness", "sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0",
             "--set", "epochs=2", "--executor", "ray", "--cpus-per-job", "1", "--results", str(tmp_path / "out")]
    try:
        with _head(env, tmp_path / "head.log") as head:
            assert "Token authentication is enabled" in (tmp_path / "head.log").read_text()
            run = [*sweep, "--ray-address", head.address]
            refused = subprocess.run(run, cwd=Path(__file__).parent.parent, env=env, capture_output=True, text=True,
                                     timeout=240)
            assert refused.returncode == 2, refused.stderr
            assert [x for x in refused.stderr.splitlines() if x.startswith("error:") or "Traceback" in x] == [
                f"error: --ray-address {head.address}: the Ray cluster there requires token authentication and this "
                "sweep sent no token (RAY_AUTH_MODE is not set); run it with RAY_AUTH_MODE=token and the cluster's "
                "token in ~/.ray/auth_token (or RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH)"]
            assert not list((tmp_path / "out").glob("*.json"))
            done = subprocess.run(run, cwd=Path(__file__).parent.parent, env=dict(env, RAY_AUTH_MODE="token"),
                                  capture_output=True, text=True, timeout=240)
            assert done.returncode == 0, done.stderr
            assert "sweep done: 1 completed" in done.stdout
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _sweep_output(argv: list[str], log: Path) -> subprocess.Popen:
    """A ``harness sweep`` started in the background, its stdout (job lines, warnings, summary) in ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "harness", "sweep", *argv], cwd=Path(__file__).parent.parent,
                                env=harness_env(), stdout=out, stderr=subprocess.DEVNULL)


def _stop(sweep: subprocess.Popen, sig: signal.Signals, wait_s: float) -> None:
    """``sig`` to ``sweep``, then ``wait_s`` for it to end; killed after that, so that its exit status says so."""
    try:
        sweep.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            sweep.wait(timeout=wait_s)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait(timeout=30)


def test_a_sigterm_stops_a_ray_sweep_with_its_running_task_at_a_checkpoint(tmp_path, ray_head):
    """SIGTERM stops a Ray sweep as it stops a local one: the running task at its next checkpoint, the waiting one
    not started, exit 75. ray.init had put in a SIGTERM handler of its own, which ended the sweep at once (exit 1),
    and its job's running task with it, short of a checkpoint. The stop cancels every task not done (Ray cannot tell
    which have started): the running one must still stop at its checkpoint, not in the KeyboardInterrupt that Ray
    raises in a running task it cancels."""
    log = tmp_path / "sweep.out"
    # each task takes both of the head's CPUs: seed 0 runs, seed 1 waits for them
    sweep = _sweep_output(["--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--workers", "2",
                           "--cpus-per-job", "2", "--set", "epochs=40", "--set", "sleep_s=0.5", "--executor", "ray",
                           "--ray-address", ray_head.address, "--results", str(tmp_path)], log)
    deadline = time.time() + 120
    while "epoch 2:" not in "".join(p.read_text() for p in tmp_path.glob("*.log")) and time.time() < deadline:
        time.sleep(0.1)
    _stop(sweep, signal.SIGTERM, wait_s=120)
    lines = log.read_text().splitlines()
    assert sweep.returncode == EXIT_STOPPED, lines
    assert sorted(x for x in lines if x.startswith("[")) == [  # the cancelled one may come back first
        "[not started] tiny/blobs/infonce seed 1: ",
        "[stopped] tiny/blobs/infonce seed 0: the sweep was stopped; its checkpoint is kept"]
    assert lines[-1].startswith("sweep stopped (SIGTERM): 1 stopped, 1 not started; continue with: ")
    [run_log] = tmp_path.glob("*.log")
    assert "stopped (the sweep was stopped) at a step boundary; its checkpoint is" in run_log.read_text()


def test_a_task_no_node_can_take_is_a_warning_and_a_stop_cancels_it(tmp_path, ray_head):
    """The fixture's head has 2 CPUs: a task asking for 3 never starts. Ray waits for a node that has them without a
    word (the sweep sat at 0 jobs done); an autoscaling cluster may add one, so the sweep says so and waits on. A stop
    (Ctrl-C) cancels that task, reported not started as a queued job is: the sweep waited on it for ever, as a task
    reads the stop file only once it starts."""
    log = tmp_path / "sweep.out"
    sweep = _sweep_output(["--domains", "tiny", "--losses", "infonce", "--seeds", "0,1", "--workers", "1",
                           "--executor", "ray", "--ray-address", ray_head.address, "--cpus-per-job", "3",
                           "--results", str(tmp_path / "out")], log)
    try:
        deadline = time.time() + 120
        while "warning:" not in log.read_text() and time.time() < deadline and sweep.poll() is None:
            time.sleep(0.5)
        assert sweep.poll() is None, "the sweep ended: it should wait for a node that can take its task"
    finally:
        _stop(sweep, signal.SIGINT, wait_s=60)
    lines = log.read_text().splitlines()
    assert [x for x in lines if x.startswith("warning:")] == [
        "warning: each Ray task asks for 3 CPUs, but no node of the Ray cluster has them (its largest of 1 alive "
        "node has 2 CPUs and 0 GPUs): the sweep waits until such a node joins; to run on the nodes there, lower "
        "--cpus-per-job"]
    assert sweep.returncode == EXIT_STOPPED, lines
    # seed 0's task was submitted: its line, as a task that starts after a stop prints it; seed 1 was queued
    assert [x for x in lines if x.startswith("[")] == ["[not started] tiny/blobs/infonce seed 0: "]
    assert lines[-1].startswith("sweep stopped (SIGINT): 2 not started; continue with: ")
