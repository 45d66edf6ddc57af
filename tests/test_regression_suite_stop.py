"""The regression suite's baseline update and its stops: an update refuses a baseline folder holding files it does
not own, swaps the new baseline in only when every run completed (a failed or stopped one leaves the old baseline
as it was), and Ctrl-C or SIGTERM stops the suite at once (no queued run starts, the running ones end) with one
line and exit 130 or 75. On the tiny domain, each run a few seconds."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import WAIT_S, default_sigint
from test_regression_suite import SCRIPT, script
from tiny_domain import REPO, harness_env, synthetic_record, write_records

from harness.suites.__main__ import main as suite_main

SLEEPY = "tiny linear blobs infonce quick 0-3 1 epochs=200 sleep_s=0.5\n"  # four runs of 100 s: never finished


def tiny_suite(tmp_path: Path, line: str = "tiny linear blobs infonce quick 0 1\n") -> Path:
    suite = tmp_path / "tiny.txt"
    suite.write_text(line)
    return suite


def old_baseline(folder: Path, other_domain: bool = True) -> dict[str, bytes]:
    """A baseline of two tiny records (another code version than this one's, so other run ids) with their logs and
    the runs' scratch (hidden files, a tracking folder), and (``other_domain``) a text record of the committed
    baseline, which the tiny suite has no setting of: only an update of one domain (``--domain tiny``) runs beside
    it; returns every file's bytes."""
    write_records(folder, [synthetic_record("infonce", seed, 90.0, version="0.0.1") for seed in (0, 1)])
    for record in folder.glob("*.json"):
        record.with_suffix(".log").write_text("the old run's log\n")
    text = sorted((REPO / "leaderboards" / "regression").glob("text-*.json"))[0]
    for path in (text, text.with_suffix(".log")) if other_domain else ():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / ".gitignore").write_text(".work/\n")
    (folder / "tb").mkdir()
    return contents(folder)


def contents(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def new_folders(baseline: Path) -> list[Path]:
    """The update's folders for a new baseline, beside ``baseline``."""
    return sorted(baseline.parent.glob(f".{baseline.name}-new-*"))


@pytest.mark.parametrize("name, text", [
    ("stale.json", "{}"),  # not a run record
    ("notes.txt", "why the numbers moved\n"),  # someone's file
    ("orphan.log", "a log without its record\n"),
])
def test_an_update_refuses_a_baseline_folder_holding_files_it_does_not_own(tmp_path, run_main, name, text):
    """In this process (the suite's ``main``, what the script runs): the refusal comes before any run, and the
    script's own exits are the tests below."""
    base = tmp_path / "baseline"
    before = old_baseline(base)
    (base / name).write_text(text)
    out = run_main(suite_main, "--suite", str(tiny_suite(tmp_path)), "--baseline", str(base), "--update-baseline")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: --update-baseline: ") and name in out.stderr and out.stdout == ""
    assert contents(base) == {**before, name: text.encode()} and new_folders(base) == []


@pytest.mark.parametrize("domain", [["--domain", "tiny"], []])
def test_an_update_swaps_the_new_baseline_in_once_every_run_completed(tmp_path, domain):
    base = tmp_path / "baseline"
    before = old_baseline(base, other_domain=bool(domain))
    out = script("--suite", str(tiny_suite(tmp_path)), "--baseline", str(base), "--update-baseline", *domain)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 of 1 runs completed; removed 4 old baseline files" in out.stdout  # the tiny records and logs
    after = contents(base)
    kept = {n for n in before if n.startswith(("text-", "."))} if domain else {".gitignore"}
    assert {n: after[n] for n in kept} == {n: before[n] for n in kept}
    new = sorted(set(after) - kept)
    assert len(new) == 2 and all(n.startswith("tiny-blobs-linear-infonce-") and "-0.0.1-" not in n for n in new)
    assert new_folders(base) == []  # the new baseline's folder went, with the runs' scratch


def test_a_failed_update_leaves_the_old_baseline_as_it_was(tmp_path):
    base = tmp_path / "baseline"
    before = old_baseline(base, other_domain=False)
    out = script("--suite", str(tiny_suite(tmp_path)), "--baseline", str(base), "--update-baseline",
                 TINY_DOMAIN_FAIL="1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert contents(base) == before
    [new] = new_folders(base)
    assert f"0 of 1 runs completed: the baseline {base} is unchanged; the new runs are in {new}" in out.stderr
    assert "planted failure" in (next(new.glob("*.log"))).read_text()


def start(*args: str) -> subprocess.Popen:
    """``tools/regression-suite`` in a subprocess of its own process group, as a shell starts a command."""
    return subprocess.Popen([str(SCRIPT), *args], cwd=REPO, env={**harness_env(), "PYTHON": sys.executable},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)


def wait_for_runs(folder: Path, count: int, proc: subprocess.Popen, timeout: float = WAIT_S) -> None:
    """Wait until ``count`` runs have taken their lock (``<results>/.work/<run id>.lock``) under ``folder``."""
    end = time.monotonic() + timeout
    while len(list(folder.glob("**/.work/*.lock"))) < count:
        if proc.poll() is not None or time.monotonic() > end:
            pytest.fail(f"{count} runs did not start: {finish(proc, timeout=0)}")
        time.sleep(0.2)


def finish(proc: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """The output of ``proc`` once it ended by itself within ``timeout``; then what is left of its process group
    (it, or runs it left behind) is killed."""
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:  # say which of its processes were still there, and in what state
        ps = subprocess.run(["ps", "-o", "pid,ppid,stat,wchan:24,etimes,args", "--sid", str(proc.pid)],
                            capture_output=True, text=True).stdout
        return f"still running after {timeout:.0f} s; its processes:\n{ps}", ""
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def processes_naming(text: str) -> list[str]:
    """The command lines of the live processes that name ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        if text in line:
            found.append(line)
    return found


def test_ctrl_c_stops_an_update_at_once_and_keeps_the_old_baseline(tmp_path):
    base = tmp_path / "baseline"
    before = old_baseline(base, other_domain=False)
    proc = start("--suite", str(tiny_suite(tmp_path, SLEEPY)), "--baseline", str(base), "--update-baseline",
                 "--jobs", "1")
    wait_for_runs(tmp_path, 1, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    stdout, stderr = finish(proc)
    assert proc.returncode == 130, stdout + stderr
    [new] = new_folders(base)
    assert stderr.strip().splitlines() == [
        f"regression suite stopped by SIGINT: 0 runs finished, 1 running stopped, 3 not started; the baseline "
        f"{base} is unchanged, the runs done so far are in {new} (remove it); run the same command again to start "
        "over"]
    assert contents(base) == before
    assert [p.name[-8:] for p in (new / ".work").glob("*.lock")] == ["-s0.lock"]  # no queued run started
    assert processes_naming(str(new)) == []


def test_sigterm_stops_the_gate_and_ends_its_running_runs(tmp_path):
    results = tmp_path / "results"
    old_baseline(tmp_path / "baseline")  # one to gate against: without, the suite refuses to start
    proc = start("--suite", str(tiny_suite(tmp_path, SLEEPY)), "--baseline", str(tmp_path / "baseline"),
                 "--results", str(results), "--jobs", "2")
    wait_for_runs(results, 2, proc)
    proc.send_signal(signal.SIGTERM)  # to the suite alone, as `kill` does: it must stop its runs itself
    stdout, stderr = finish(proc)
    assert proc.returncode == 75, stdout + stderr
    assert stderr.strip().splitlines() == [
        f"regression suite stopped by SIGTERM: 0 runs finished, 2 running stopped, 2 not started; the runs done so "
        f"far are in {results}: run it again with --results {results} to go on (their completed records are "
        "reused)"]
    assert processes_naming(str(results)) == []
    assert sorted(re.sub(r".*-(s\d)\.lock", r"\1", p.name) for p in (results / ".work").glob("*.lock")) == ["s0", "s1"]
    assert not re.search("compare", stdout)  # no gate on runs that did not finish
