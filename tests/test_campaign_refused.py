"""A campaign run whose checkpoint ``harness run --resume`` refuses (damaged, another run's): the call goes on with
the plan's other runs, its summary counts the run as refused to resume (not failed) and says how to clear it, its
stage's copy is set aside so that the next call on the machine does not pack or resume it, and every call that
brings the checkpoint again says so again, until it is set aside where the call came from."""

from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_campaign import campaign, write_plan
from tiny_domain import REPO, harness_env, killed_mid_run

from domains.context import START_OVER
from harness.run.runner import run_ids
from harness.suites.campaign import load_plan, refused_run, set_aside
from harness.suites.campaign import main as campaign_main
from harness.suites.pack import CAMPAIGN_LOG

LINE = "tiny linear blobs infonce quick 0-1 5 epochs=6 sleep_s=0.5"  # slow enough to be killed after epoch 2
SUMMARY = "campaign: {} completed, 0 not finished yet (exit 75), 0 not started, 0 failed, {} refused to resume"


def _killed(records: Path, seed: int) -> Path:
    """The checkpoint of the plan's run of ``seed``, as a run killed after its second epoch left it in ``records``."""
    return killed_mid_run(["run", "--domain", "tiny", "--method", "linear", "--dataset", "blobs", "--loss", "infonce",
                           "--preset", "quick", "--seeds", str(seed), "--set", "epochs=6", "--set", "sleep_s=0.5",
                           "--device", "cpu", "--results", str(records), "--quiet", "--tracker", "none"], records, seed)


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A records folder with LINE's two runs (seeds 0 and 1), each killed after its second epoch: their logs and
    sound checkpoints. Made once, both runs at a time (each in a folder of its own, where its log is the only one
    it waits on), for the tests to copy and damage."""
    root = tmp_path_factory.mktemp("killed")
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda seed: _killed(root / f"s{seed}", seed), (0, 1)))
    for seed in (0, 1):
        shutil.copytree(root / f"s{seed}", root / "results", dirs_exist_ok=True)
    return root / "results"


def _copied(killed: Path, records: Path) -> tuple[Path, Path]:
    """The killed runs' folder copied to ``records``; the checkpoints of seeds 0 and 1 there."""
    shutil.copytree(killed, records)
    [mine], [other] = ((records / ".work").glob(f"*-s{seed}/checkpoint.pt") for seed in (0, 1))
    return mine, other


def test_a_refused_resume_is_skipped_counted_and_cleared_by_the_command_it_prints(tmp_path, run_main, monkeypatch):
    """The first call through the script; the next two in this process (their runs start as the script starts
    them, the tiny domain plugged in). The damaged checkpoint is no killed run's: any bytes at the run's work folder
    do, and the runs are quick."""
    repo, stage = tmp_path / "repo", tmp_path / "stage"
    records = repo / "leaderboards" / "results"
    plan = write_plan(tmp_path, "tiny linear blobs infonce quick 0-1 5 epochs=2")
    # where harness run looks for seed 0's checkpoint (elsewhere, the run would not read it: no refusal to check)
    [rid] = run_ids(load_plan(plan).settings[0].request([0]))
    checkpoint = records / ".work" / rid / "checkpoint.pt"  # as a call carries it from the repository, damaged
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"\x80\x02garbage")
    call = ["run", str(plan), "--device", "cpu", "--jobs", "1", "--stage", str(stage), "--repo", str(repo)]

    first = campaign(*call)
    assert first.returncode == 2, first.stdout + first.stderr
    lines = first.stdout.splitlines()
    assert SUMMARY.format(1, 1) in lines  # seed 1 still ran after seed 0's refusal, which is no failure
    staged = stage / "leaderboards" / "results"
    [record] = staged.glob("*.json")
    assert json.loads(record.read_text())["seed"] == 1
    [refused] = [line for line in lines if line.startswith("refused to resume: ")]
    assert refused.startswith("refused to resume: tiny linear blobs infonce quick epochs=2 seed 0 [line 2, ")
    assert refused.endswith("; the same command then starts it over")
    command = refused.split("in the repository the call came from: ", 1)[1].split(")", 1)[0]
    # The stage's copy went to .refused (not packed, not resumed on this machine); the repository's is as it was.
    assert not (staged / ".work" / rid).exists()
    [aside] = (staged / ".refused").glob(f"{rid}-*/checkpoint.pt")
    assert aside.read_bytes() == checkpoint.read_bytes() == b"\x80\x02garbage"
    assert f"refused to resume: {refused.split(': ')[1]}" in (stage / CAMPAIGN_LOG).read_text()

    # The next call on the same machine, the repository's checkpoint carried again: refused again, and said again
    # (seed 1, recorded in the stage, is skipped as done).
    for name in ("HARNESS_PLUGINS", "PYTHONPATH"):
        monkeypatch.setenv(name, harness_env()[name])
    again = run_main(campaign_main, *call)
    assert again.returncode == 2 and SUMMARY.format(1, 1) in again.stdout.splitlines(), again.stdout
    assert refused in again.stdout.splitlines()

    # The printed command, run where the call came from, sets the folder aside; the next call starts seed 0 over.
    subprocess.run(["bash", "-c", command], check=True)
    assert (records / ".refused" / rid / "checkpoint.pt").read_bytes() == b"\x80\x02garbage"
    assert not (records / ".work" / rid).exists()
    cleared = run_main(campaign_main, *call)
    assert cleared.returncode == 0 and SUMMARY.format(2, 0) in cleared.stdout.splitlines(), cleared.stdout
    assert not [line for line in cleared.stdout.splitlines() if line.startswith("refused to resume: ")]
    done = {(r["seed"], r["status"], r["info"]["start_epoch"]) for r in map(json.loads, map(Path.read_text,
                                                                                          staged.glob("*.json")))}
    assert done == {(0, "completed", 0), (1, "completed", 0)}  # seed 0 started over, from its first epoch
    # where the command puts it, git ignores it: it never travels in a call nor shows as a change
    assert subprocess.run(["git", "-C", str(REPO), "check-ignore", "-q", f"leaderboards/results/.refused/{rid}"]
                          ).returncode == 0


def test_a_dry_run_finds_here_a_checkpoint_that_resume_would_refuse(tmp_path, run_main, killed):
    """Before any device call: the dry run reads the checkpoints the call would carry, refuses what --resume would
    (damaged, another run's) with the command that sets each aside, and passes sound ones."""
    repo = tmp_path / "repo"
    records = repo / "leaderboards" / "results"
    mine, other = _copied(killed, records)
    plan = write_plan(tmp_path, LINE)

    def dry_run() -> subprocess.CompletedProcess:
        return run_main(campaign_main, "run", str(plan), "--dry-run", "--repo", str(repo))

    sound = dry_run()
    assert sound.returncode == 0 and sound.stderr == "", sound.stderr  # two sound checkpoints: nothing to say
    other.write_bytes(mine.read_bytes())  # seed 0's checkpoint in seed 1's folder
    mine.write_bytes(mine.read_bytes()[:100])  # truncated
    out = dry_run()
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    assert [line.split(": ", 2)[1] for line in lines] == [f"{LINE.split(' 0-1 ')[0]} epochs=6 sleep_s=0.5 seed {s}"
                                                         for s in (0, 1)]
    assert f"the checkpoint {mine} cannot be read" in lines[0] and f"{other} was saved by another run" in lines[1]
    for line in lines:
        subprocess.run(["bash", "-c", line.split("set it aside before a call carries it: ", 1)[1]], check=True)
    assert sorted(p.name for p in (records / ".refused").iterdir()) == sorted([mine.parent.name, other.parent.name])
    cleared = dry_run()
    assert cleared.returncode == 0 and cleared.stderr == ""


def test_a_dry_run_reads_the_checkpoint_of_the_run_id_not_another_configs(tmp_path, run_main, killed):
    """The dry run matched a checkpoint by domain, method, loss and seed: a damaged one of another config's run (its
    hash another) was refused too. Where the run id can be computed here (the tiny domain's data), only the
    checkpoint under it, as harness run named it, is read."""
    repo = tmp_path / "repo"
    records = repo / "leaderboards" / "results"
    mine, _ = _copied(killed, records)
    other = records / ".work" / "tiny-blobs-linear-infonce-0123abcd-s0" / "checkpoint.pt"
    other.parent.mkdir()
    other.write_bytes(b"\x80\x02garbage")
    plan = write_plan(tmp_path, LINE)
    sound = run_main(campaign_main, "run", str(plan), "--dry-run", "--seeds", "0", "--repo", str(repo))
    assert sound.returncode == 0 and sound.stderr == "", sound.stderr
    assert "note: no run id" not in sound.stdout
    mine.write_bytes(mine.read_bytes()[:100])
    out = run_main(campaign_main, "run", str(plan), "--dry-run", "--seeds", "0", "--repo", str(repo))
    assert out.returncode == 2
    [line] = out.stderr.splitlines()
    assert f"the checkpoint {mine} cannot be read" in line and line.endswith(f"{mine.parent} {records / '.refused'}/")


def test_a_dry_run_without_the_data_reads_every_checkpoint_of_the_names_and_says_so(tmp_path, run_main):
    """The tiny domain's 'absent' data set is on no machine: its run id cannot be computed, so each checkpoint of
    its domain, method, loss and seed is read, and a note says that other configs' are among them."""
    repo = tmp_path / "repo"
    work = repo / "leaderboards" / "results" / ".work"
    damaged = [work / f"tiny-absent-linear-infonce-{digest}-s0" / "checkpoint.pt"
               for digest in ("0123abcd", "89abcdef")]
    for path in damaged:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"\x80\x02garbage")
    plan = write_plan(tmp_path, "tiny linear absent infonce quick 0 5")
    out = run_main(campaign_main, "run", str(plan), "--dry-run", "--repo", str(repo))
    assert out.returncode == 2
    assert [f"the checkpoint {path} cannot be read" in line for path, line in zip(damaged, out.stderr.splitlines())] \
        == [True, True]
    [note] = [line for line in out.stdout.splitlines() if line.startswith("note: no run id")]
    assert note.startswith("note: no run id for tiny linear absent infonce quick here (dataset 'absent' not found; ")
    assert note.endswith("read every checkpoint of its domain, method, loss and seeds, those of its other configs too")


def test_only_an_error_about_a_work_folder_is_a_refused_resume():
    rid = "tiny-blobs-linear-infonce-0123abcd-s0"
    work = f"/tmp/campaign/leaderboards/results/.work/{rid}"
    assert refused_run(f"epoch 1\nerror: the checkpoint {work}/checkpoint.pt cannot be read (x); {START_OVER}\n") == rid
    assert refused_run(f"error: {work} is a symbolic link; the harness does not read") == rid
    assert refused_run("error: dataset 'blobs' is not under /data/blobs: stage it first") is None
    assert refused_run("Traceback (most recent call last):\n  RuntimeError: boom") is None
    # A resumed run that could not write its next checkpoint or its record (a full disk): its work folder holds the
    # sound checkpoint that the next call resumes, which setting it aside would lose.
    assert refused_run(f"error: cannot write {work}/checkpoint.pt: No space left on device; the file there, if any, "
                       f"is unchanged (log: {work.replace('/.work', '')}.log)") is None
    assert refused_run(f"error: cannot write the record {work.replace('/.work', '')}.json: No space left on device; "
                       f"the run's checkpoint is kept in {work}: free the space or fix the permission, then rerun "
                       "with --resume") is None


def test_a_work_folder_that_cannot_be_set_aside_leaves_the_report_to_go_on(tmp_path):
    """A refusal whose folder is not in the stage (a link's, gone since) is not moved: None, no OSError that would
    end the call before it reports the other runs."""
    assert set_aside(tmp_path, "tiny-blobs-linear-infonce-0123abcd-s0") is None
    assert not (tmp_path / ".refused").exists() or not list((tmp_path / ".refused").iterdir())
