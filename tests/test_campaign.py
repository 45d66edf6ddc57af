"""The GPU campaign's runner (``tools/campaign``) through its command line: plans and their estimates, a plan that
cannot fit, bad lines, and the tarball's round trip from tiny CPU runs back into a repository, with the refusal
to overwrite a different record and the refusal to pack nothing."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support import wait_for
from test_sigint_race import interrupted_at
from tiny_domain import REPO, harness_env

from harness.suites.campaign import PLANS, load_plan
from harness.suites.campaign import main as campaign_main
from harness.suites.pack import CAMPAIGN_LOG

SCRIPT = REPO / "tools" / "campaign"


def campaign(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``tools/campaign`` in a subprocess with this interpreter and the tiny domain plugged in."""
    return subprocess.run([str(SCRIPT), *args], cwd=REPO, env={**harness_env(), "PYTHON": sys.executable, **env},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def planned(run_main):
    """``tools/campaign ARGS`` in this process (conftest's ``run_main``), for what only plans or refuses; the tests
    that start runs, and one dry run, go through the script."""
    return functools.partial(run_main, campaign_main)


def write_plan(folder: Path, *lines: str) -> Path:
    path = folder / "plan.txt"
    path.write_text("# a tiny plan\n" + "".join(line + "\n" for line in lines))
    return path


def estimate(out: str) -> tuple[float, float]:
    match = re.search(r"estimated device time .*?: (\d+) s .* at least (\d+) s", out)
    assert match, out
    return float(match[1]), float(match[2])


def test_every_committed_plan_loads_and_orders_its_items_as_the_issue():
    names = sorted(p.stem for p in PLANS.glob("*.txt"))
    assert names == ["2-biased-colouring", "2-biased-head", "2-biased-table3", "3a-cifar-debiased-pos",
                     "3b-cifar-bench", "3c-cifar-prior", "4-curl-100k", "5-quickthought-books"]
    for name in names:
        plan = load_plan(PLANS / f"{name}.txt")
        assert all(s.cost_s > 0 for s in plan.settings)
    grid = load_plan(PLANS / "2-biased-table3.txt")
    runs = {(s.loss, dict(kv.split("=") for kv in s.sets)["rho"], seed) for s in grid.settings for seed in s.seeds}
    assert len(runs) == 4 * 3 * 3  # every run: the committed seed-0 runs name an older source digest
    draws = load_plan(PLANS / "2-biased-colouring.txt").settings
    assert sorted(s.sets[-1] for s in draws) == [f"colour_seed={k}" for k in range(1, 5)]
    assert all(s.sets[:-1] == ("rho=0.999", "loss.epsilon=0.5") for s in draws)
    assert load_plan(PLANS / "3c-cifar-prior.txt").records == "leaderboards/prior"
    curl = load_plan(PLANS / "4-curl-100k.txt")
    assert {s.dataset for s in curl.settings} == {"cartpole-swingup", "reacher-easy", "cheetah-run", "walker-walk",
                                                 "ball_in_cup-catch", "finger-spin"}


def test_dry_run_prints_every_run_and_the_estimated_totals(tmp_path):
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0-2 100", "tiny linear blobs dcl quick 0 50 epochs=2",
                      "tiny linear blobs_hard infonce quick 0-1 30")
    out = campaign("run", str(plan), "--dry-run", "--jobs", "2", "--budget", "10m", "--stage", str(tmp_path / "s"),
                   "--repo", str(_repo(tmp_path)))
    assert out.returncode == 0, out.stderr
    commands = [line for line in out.stdout.splitlines() if " -m harness run " in line]
    assert len(commands) == 6
    assert "--set epochs=2" in commands[3] and "--seeds 0" in commands[3] and "[line 3, estimate 50 s]" in commands[3]
    assert f"--results {tmp_path / 's' / 'leaderboards' / 'results'}" in commands[0]
    # serial: 3 x 100 + 50 + 2 x 30 = 410. Two workers taking the runs in order: 100 and 100 end at 100; the
    # third 100 and the 50 take them to 200 and 150; the 30s go to the first free one: 150 + 30 = 180, then 210.
    assert estimate(out.stdout) == (410.0, 210.0)
    assert not (tmp_path / "s").exists()


def test_a_setting_never_completed_is_noted_before_its_seeds_start_side_by_side(tmp_path, planned):
    """Session 32 started three seeds of a never-run preset side by side on the device; all failed in their
    evaluation after 8 minutes. A setting of several seeds with no completed record of any code gets a note that
    says to run its first seed alone; one with a record, one seed, or one job at a time gets none."""
    from tiny_domain import synthetic_record, write_records

    repo = _repo(tmp_path)
    ran = synthetic_record("infonce", 0, 80.0)
    ran["command"] = ["harness", "run", "--domain", "tiny", "--method", "linear", "--dataset", "blobs", "--loss",
                      "infonce", "--preset", "quick", "--seeds", "0", "--device", "cpu", "--set", "epochs=2"]
    failed = synthetic_record("dcl", 0, 0.0, status="failed")
    failed["command"] = [*ran["command"][:9], "dcl", *ran["command"][10:]]
    write_records(repo / "leaderboards" / "results", [ran, failed])
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0-2 10 epochs=2",
                      "tiny linear blobs dcl quick 0-2 10 epochs=2", "tiny linear blobs infonce quick 0-1 10 epochs=3",
                      "tiny linear blobs pucl quick 0 10")
    out = planned("run", str(plan), "--dry-run", "--jobs", "3", "--repo", str(repo))
    notes = [line for line in out.stdout.splitlines() if line.startswith("note: no completed record")]
    assert notes == [
        f"note: no completed record of tiny linear blobs dcl quick epochs=2 in {repo / 'leaderboards' / 'results'}: "
        "its 3 seeds would meet any failure of the setting together; run seed 0 alone first (--seeds 0 --jobs 1)",
        f"note: no completed record of tiny linear blobs infonce quick epochs=3 in "
        f"{repo / 'leaderboards' / 'results'}: its 2 seeds would meet any failure of the setting together; run seed "
        "0 alone first (--seeds 0 --jobs 1)"]
    alone = planned("run", str(plan), "--dry-run", "--jobs", "1", "--repo", str(repo))
    assert "no completed record" not in alone.stdout


def test_a_plan_that_cannot_fit_its_budget_is_refused(tmp_path, planned):
    plan, repo = write_plan(tmp_path, "tiny linear blobs infonce quick 0-3 300"), str(_repo(tmp_path))
    out = planned("run", str(plan), "--dry-run", "--jobs", "2", "--budget", "9m", "--repo", repo)
    assert out.returncode == 2
    assert "error: the plan cannot fit: at least 600 s with 2 jobs, over the 540 s given" in out.stderr
    out = planned("run", str(plan), "--jobs", "2", "--budget", "9m", "--stage", str(tmp_path / "s"))
    assert out.returncode == 2 and not (tmp_path / "s").exists()  # refused before anything runs
    # Without --budget a plan longer than one call's --time is one of several calls, each resuming the last.
    out = planned("run", str(plan), "--dry-run", "--jobs", "2", "--time", "9m", "--repo", repo)
    assert out.returncode == 0 and "the same command again resumes them" in out.stdout


def test_only_takes_whole_words_so_a_value_never_selects_the_longer_values_it_begins(tmp_path, planned):
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0 10 lr=0.01",
                      "tiny linear blobs dcl quick 0 10 lr=0.015",
                      "tiny linear blobs_hard dcl quick 0 10 lr=0.01  # lr=0.015 in a comment is no setting's")

    repo = str(_repo(tmp_path))

    def chosen(*only: str) -> list[int]:
        out = planned("run", str(plan), "--dry-run", "--repo", repo,
                      *[arg for text in only for arg in ("--only", text)])
        assert out.returncode == 0, out.stderr
        return [int(line) for line in re.findall(r"\[line (\d+), estimate", out.stdout)]

    assert chosen("lr=0.01") == [2, 4]  # a substring match took lr=0.015 too
    assert chosen("lr=0.015") == [3]
    assert chosen("dcl quick") == [3, 4] and chosen("blobs dcl") == [3]  # words in a row
    assert chosen("infonce", "blobs_hard") == [2, 4]
    out = planned("run", str(plan), "--dry-run", "--repo", repo, "--only", "lr=0.0")
    assert out.returncode == 2 and "no setting of" in out.stderr and "lr=0.0" in out.stderr


def test_seeds_takes_those_seeds_of_every_chosen_setting(tmp_path, planned):
    """A short session runs one seed of every setting (a table's first full row) with --seeds, in the plan's order."""
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0-2 10", "tiny linear blobs dcl quick 1-2 10")
    repo = str(_repo(tmp_path))

    def chosen(*args: str) -> list[tuple[int, int]]:
        out = planned("run", str(plan), "--dry-run", "--repo", repo, *args)
        assert out.returncode == 0, out.stderr
        return [(int(line), int(seed)) for seed, line in re.findall(r"seed (\d+) \[line (\d+), estimate", out.stdout)]

    assert chosen() == [(2, 0), (2, 1), (2, 2), (3, 1), (3, 2)]
    assert chosen("--seeds", "0") == [(2, 0)]
    assert chosen("--seeds", "1-2", "--only", "dcl") == [(3, 1), (3, 2)]
    out = planned("run", str(plan), "--dry-run", "--repo", repo, "--seeds", "5")
    assert out.returncode == 2 and "has the seeds 5 (--seeds)" in out.stderr
    out = planned("run", str(plan), "--dry-run", "--repo", repo, "--seeds", "x")
    assert out.returncode == 2 and "--seeds expects" in out.stderr


@pytest.mark.parametrize("line, message", [
    ("tiny linear blobs infonce quick 0", "expected 7 columns (domain method dataset loss preset seeds cost)"),
    ("tiny linear blobs infonce quick 0 soon", "the cost 'soon' is not a positive number of seconds"),
    ("tiny linear blobs infonce quick 0 -5", "the cost '-5' is not a positive number"),
    ("tiny linear blobs infonce quick 0 10 epochs", "--set expects key=value, got 'epochs'"),
    ("tiny linear blobs infonce quick 0 10 epochz=3", "epochz"),
    ("tiny linear blobs infonce quick 0 10 epochs=zero", "epochs"),
    ("tiny linear blobs_hard infonce quick 0 10 loss.tau_plus=0.1", "tau_plus"),
    ("tiny linear2 blobs_hard infonce quick 0 10", "does not support blobs_hard"),
])
def test_a_bad_line_gets_one_line_naming_it(tmp_path, planned, line, message):
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0 10", line)
    out = planned("run", str(plan), "--dry-run")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith(f"error: {plan}:3: ") and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("folder", ["/etc", "leaderboards/..", "leaderboards/.work"])
def test_an_empty_plan_and_a_bad_records_folder_are_refused(tmp_path, planned, folder):
    empty = write_plan(tmp_path)
    out = planned("run", str(empty), "--dry-run")
    assert out.returncode == 2 and "lists no setting" in out.stderr
    plan = write_plan(tmp_path, f"#! records: {folder}", "tiny linear blobs infonce quick 0 10")
    out = planned("run", str(plan), "--dry-run")
    assert out.returncode == 2 and "must be leaderboards/<folder>" in out.stderr


def test_nothing_to_pack_fails_loudly(tmp_path, planned):
    (tmp_path / "stage" / "leaderboards" / "results").mkdir(parents=True)
    out = planned("pack", "--stage", str(tmp_path / "stage"), "--out", str(tmp_path / "out"), "--repo", str(tmp_path))
    assert out.returncode == 2 and "error: nothing to pack" in out.stderr
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


def _repo(tmp_path: Path) -> Path:
    """A repository's records folders: one record of another run already committed."""
    repo = tmp_path / "repo"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    (repo / "leaderboards" / "bench").mkdir()
    (repo / "leaderboards" / "bench" / "tiny-cpu.json").write_text('{"rows": []}\n')
    return repo


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One campaign call through the script, shared by the tests that read what it made (each copies what it
    changes): two seeds of infonce and a planted failure, on the CPU, 2 jobs at a time, into a stage seeded from a
    repository. The repository, the stage, and the call's outcome."""
    root = tmp_path_factory.mktemp("campaign")
    repo, stage = _repo(root), root / "stage"
    plan = write_plan(root, "tiny linear blobs infonce quick 0-1 5", "tiny linear blobs dcl quick 0 5 fail=true")
    done = campaign("run", str(plan), "--device", "cpu", "--jobs", "2", "--stage", str(stage), "--repo", str(repo))
    return repo, stage, done


def test_runs_pack_and_unpack_round_trip_and_a_different_record_is_never_overwritten(tmp_path, planned, ran):
    """Through subprocesses as a user runs them; the later checks of the same commands in this process."""
    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    shutil.copytree(ran[0], repo)
    shutil.copytree(ran[1], stage, symlinks=True)
    done = ran[2]
    assert done.returncode == 1, done.stdout + done.stderr  # the planted failure
    assert "campaign: 2 completed, 0 not finished yet (exit 75), 0 not started, 1 failed" in done.stdout
    staged = stage / "leaderboards" / "results"
    made = sorted(staged.glob("*.json"))
    completed = [p for p in made if json.loads(p.read_text())["status"] == "completed"]
    assert len(made) == 3 and len(completed) == 2
    (stage / "leaderboards" / "bench").mkdir()
    (stage / "leaderboards" / "bench" / "tiny-cpu.json").write_text('{"rows": [1]}\n')  # a new measurement

    packed = campaign("pack", "--stage", str(stage), "--out", str(out), "--repo", str(repo))
    assert packed.returncode == 0, packed.stderr
    tarball, = out.glob("campaign-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    failed = next(p for p in made if p not in completed)
    assert {f"leaderboards/results/{p.name}" for p in completed} <= names
    assert {f"leaderboards/results/{p.with_suffix('.log').name}" for p in completed} <= names
    assert f"campaign/failed/{failed.name}" in names and f"leaderboards/results/{failed.name}" not in names
    assert {"leaderboards/bench/tiny-cpu.json", "campaign/campaign.log", "MANIFEST.json"} <= names

    side = tmp_path / "side"
    back = campaign("unpack", str(tarball), "--repo", str(repo), "--side", str(side))
    assert back.returncode == 0, back.stderr
    for path in completed:
        assert (repo / "leaderboards" / "results" / path.name).read_bytes() == path.read_bytes()
    assert not (repo / "leaderboards" / "results" / failed.name).exists()
    assert (side / "failed" / failed.name).is_file()
    assert (repo / "leaderboards" / "bench" / "tiny-cpu.json").read_text() == '{"rows": [1]}\n'
    again = planned("unpack", str(tarball), "--repo", str(repo), "--side", str(side))
    assert again.returncode == 0 and "0 new records" in again.stdout  # identical files: nothing to do

    # The stage's records and bench file are now the repository's; with the failed run's record gone (a failed
    # record comes back each time: it is what says why), nothing new is left to pack.
    failed.unlink()
    nothing = planned("pack", "--stage", str(stage), "--out", str(tmp_path / "out2"), "--repo", str(repo))
    assert nothing.returncode == 2 and "nothing to pack" in nothing.stderr

    # A record of the same run id that differs: the whole tarball is refused, nothing written.
    mine = repo / "leaderboards" / "results" / completed[0].name
    edited = json.loads(mine.read_text())
    edited["metrics"]["accuracy"] = 1.0
    mine.write_text(json.dumps(edited))
    other = repo / "leaderboards" / "results" / completed[1].name
    other.unlink()
    refused = planned("unpack", str(tarball), "--repo", str(repo))
    assert refused.returncode == 2 and "would replace a different record" in refused.stderr
    assert completed[0].name in refused.stderr
    assert json.loads(mine.read_text())["metrics"]["accuracy"] == 1.0 and not other.exists()


def test_a_second_run_skips_what_the_repository_holds(tmp_path, planned, ran, monkeypatch):
    """In this process (a decision); a run it did not skip would start as the script starts it, with the tiny
    domain plugged in, and write its log."""
    repo = _repo(tmp_path)
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0 5")
    [record] = [path for path in (ran[1] / "leaderboards" / "results").glob("*.json")
                if (made := json.loads(path.read_text()))["loss"] == "infonce" and made["seed"] == 0]
    assert json.loads(record.read_text())["status"] == "completed", ran[2].stdout + ran[2].stderr
    (repo / "leaderboards" / "results" / record.name).write_bytes(record.read_bytes())  # committed since
    for name in ("HARNESS_PLUGINS", "PYTHONPATH"):
        monkeypatch.setenv(name, harness_env()[name])
    fresh = tmp_path / "fresh-stage"  # a new machine: the stage starts with the repository's records
    second = planned("run", str(plan), "--device", "cpu", "--stage", str(fresh), "--repo", str(repo))
    assert second.returncode == 0, second.stdout + second.stderr
    assert (fresh / "leaderboards" / "results" / record.name).read_bytes() == record.read_bytes()  # skipped
    assert not list((fresh / "leaderboards" / "results").glob("*.log"))  # no run wrote a log


def test_sigterm_stops_the_campaigns_runs_and_says_the_same_command_resumes_them(tmp_path):
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0-1 5 epochs=200 sleep_s=0.5")
    stage = tmp_path / "stage"
    proc = subprocess.Popen([str(SCRIPT), "run", str(plan), "--device", "cpu", "--jobs", "1", "--stage", str(stage),
                             "--repo", str(_repo(tmp_path))], cwd=REPO, env={**harness_env(), "PYTHON": sys.executable},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    wait_for("a campaign run to take its lock, or the campaign to end",
             lambda: bool(list(stage.glob("**/.work/*.lock"))) or proc.poll() is not None)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 75 and "Traceback" not in stderr, stderr
    assert "1 running stopped, 1 not started; the same command again resumes them" in stderr
    assert "campaign: stopped by SIGTERM" in (stage / CAMPAIGN_LOG).read_text()


def test_a_ctrl_c_that_the_campaign_caught_within_an_exec_of_a_string_exits_130_with_its_line(tmp_path):
    """Raised as its pool waits for its runs (test_sigint_race.py says why an exec of a string matters)."""
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0 5")
    command = ["-m", "harness.suites.campaign", "run", str(plan), "--device", "cpu", "--jobs", "1", "--stage",
               str(tmp_path / "stage"), "--repo", str(_repo(tmp_path))]
    out = interrupted_at("call:harness.suites.pool:as_completed", command, REPO)
    assert out.returncode == 130 and "Traceback" not in out.stderr, (out.returncode, out.stderr)
    assert out.stderr.splitlines()[-1].startswith("campaign: stopped by SIGINT: 0 runs finished, "), out.stderr


def _sized(path: Path, mib: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        f.truncate(int(mib * 2**20))  # sparse: its size counts, nothing is written


def test_travel_says_which_packed_part_would_not_fit_one_call_and_the_max_mib_to_pack_with(tmp_path, planned):
    """The call that finds a part over the limit through the script; the others in this process."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("ignored.bin\n")
    (repo / ".git" / "info" / "exclude").write_text("/.device-carry*/\n")  # as device-pack writes it
    _sized(repo / "tracked.bin", 10)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    _sized(repo / "untracked.bin", 5)  # not ignored: it travels
    _sized(repo / "ignored.bin", 100)  # ignored: it stays here
    out = planned("travel", "--repo", str(repo))
    assert out.returncode == 2 and "no .device-carry* folder" in out.stderr and "device-pack" in out.stderr
    _sized(repo / ".device-carry" / "site.tar.xz", 30)
    _sized(repo / ".device-carry-2" / "data" / "cifar10" / "train.parquet", 50)
    _sized(repo / ".device-carry-10" / "data" / "small", 1)
    out = campaign("travel", "--repo", str(repo))
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert re.search(r"working tree\s+15\.0 MiB", out.stdout)  # tracked + untracked, not the ignored file
    assert [line.split()[0] for line in lines if "the call sends" in line] == [
        ".device-carry", ".device-carry-2", ".device-carry-10"]  # in the order of the calls
    assert re.search(r"\.device-carry-2\s+50\.0 MiB\s+the call sends\s+65\.\d MiB: OVER by 3\.\d MiB", out.stdout)
    assert out.stderr.startswith("error: .device-carry-2 will not fit one call") and "--max-mib 46 " in out.stderr
    assert re.search(r"\.device-carry\s+30\.0 MiB .*: fits", out.stdout)
    out = planned("travel", "--repo", str(repo), "--carry", "nothing-here")
    assert out.returncode == 2 and "--carry nothing-here: no such path" in out.stderr
    (repo / ".device-carry-2" / "data" / "cifar10" / "train.parquet").unlink()
    _sized(repo / ".device-carry" / "site.tar.xz", 25)
    _sized(repo / "checkpoints" / "run.pt", 20)  # ignored by no rule, but named: counted once per call
    (repo / ".gitignore").write_text("ignored.bin\ncheckpoints/\n")
    out = planned("travel", "--repo", str(repo), "--carry", "checkpoints")
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"checkpoints\s+20\.0 MiB\s+every call", out.stdout)
    assert "a part may hold up to 26 MiB (device-pack --max-mib 26)" in out.stdout
