"""Writes that the system refuses midway (a full disk) and processes killed at once, met the way a user meets them:
the CLI in a subprocess. Whatever was written before stays whole, and the message names the file."""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from support import wait_for
from tiny_domain import REPO, harness, harness_env, synthetic_record, write_records

from domains import context
from domains.context import RunContext
from domains.errors import UnwritableFileError
from harness import records
from harness.cli import main
from harness.pages import leaderboard, report
from harness.pages.generated import IMAGE

FILE_SIZE_LIMIT = 1000  # bytes: every page is larger, so its write fails as on a full disk


def _files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def _no_large_files() -> None:
    # Writing past RLIMIT_FSIZE fails with EFBIG once SIGXFSZ is ignored: a full disk, without root or a tmpfs.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))


@pytest.mark.parametrize("command", ["leaderboard", "report"])
def test_a_page_command_on_a_full_disk_names_the_file_and_keeps_the_pages(tmp_path, command):
    results, out = tmp_path / "results", tmp_path / "pages"
    write_records(results, [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl") for s in range(2)])
    assert harness(command, "--results", str(results), "--out", str(out)).returncode == 0
    before = _files(out)
    assert max(len(data) for data in before.values()) > FILE_SIZE_LIMIT
    write_records(results, [synthetic_record("hcl", s, 70.0 + s) for s in range(2)])
    full = subprocess.run([sys.executable, "-m", "harness", command, "--results", str(results), "--out", str(out)],
                          cwd=REPO, env=harness_env(), capture_output=True, text=True, timeout=120,
                          preexec_fn=_no_large_files)
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr
    [line] = full.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write {out}/") and "File too large" in line
    assert _files(out) == before  # every page and figure as it was: none half-written, no temporary file left


def test_a_sweep_killed_at_once_leaves_no_worker_and_its_job_resumes(tmp_path):
    """SIGKILL (or the OOM killer) gives the sweep no chance to stop its pool: its worker must notice by itself, stop
    its job at a checkpoint and end, not run on (or wait forever) holding the run's lock and its memory."""
    psutil = pytest.importorskip("psutil")
    args = [sys.executable, "-m", "harness", "sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0",
            "--set", "epochs=40", "--set", "sleep_s=0.2", "--results", str(tmp_path)]
    sweep = subprocess.Popen(args, cwd=REPO, env=harness_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(f"a checkpoint in {tmp_path / '.work'}", lambda: bool(list((tmp_path / ".work").glob("*/checkpoint.pt"))))
    workers = psutil.Process(sweep.pid).children(recursive=True)
    assert workers
    sweep.kill()
    sweep.wait()
    # Its next epoch boundary is 0.2 s away, the job's end 8 s: a worker that ran on would have written its record
    # within the wait, one that waited forever would be alive at its end.
    _, alive = psutil.wait_procs(workers, timeout=15)
    for process in alive:
        process.kill()
    assert not alive, [process.cmdline() for process in alive]
    assert not list(tmp_path.glob("*.json"))  # stopped, not run to its end without the sweep
    resumed = harness(*args[3:], "--resume")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    [record] = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert record["status"] == "completed" and record["info"]["start_epoch"] > 0


def test_a_checkpoint_the_disk_refuses_is_named_and_the_one_before_is_kept(tmp_path):
    """torch.save reports a refused write as a RuntimeError (the OSError is its context): it is named as one."""
    script = f"""
import resource, signal
from pathlib import Path
import torch
from domains.context import RunContext
from domains.errors import UnwritableFileError
ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=Path(), work_dir=Path({str(tmp_path)!r}))
ctx.save_checkpoint({{"model": torch.nn.Linear(4, 2)}}, epoch=1)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT}))
try:
    ctx.save_checkpoint({{"model": torch.nn.Linear(4, 2)}}, epoch=2)
except UnwritableFileError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=harness_env(), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"cannot write {tmp_path / 'checkpoint.pt'}: File too large; the file there, if " \
                                 "any, is unchanged"
    saved = RunContext(seed=0, device=torch.device("cpu"), data_root=Path(), work_dir=tmp_path, resume=True)
    assert saved.saved_extras() == {"epoch": 1}


def test_a_run_that_could_write_nothing_does_not_claim_a_checkpoint(tmp_path, monkeypatch, capsys):
    # In this process: a harness subprocess under a file size limit would also leave git's index.lock behind.
    def full_disk(path: Path, data: object) -> None:
        raise UnwritableFileError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    monkeypatch.setattr(context, "write_atomic", full_disk)  # every checkpoint
    monkeypatch.setattr(records, "write_atomic", full_disk)  # and the record
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--quiet", "--tracker", "none",
                 "--results", str(tmp_path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: cannot write the record ") and "the run saved no checkpoint" in line
    assert not list(tmp_path.glob(".work/*/checkpoint.pt"))


def _refuse_pages(path: Path, data: object) -> None:
    raise UnwritableFileError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))


def _broken_links(out: Path) -> list[str]:
    return [f"{page.name}: {link}" for page in out.glob("*.md") for link in IMAGE.findall(page.read_text())
            if not (out / link).is_file()]


def test_a_leaderboard_that_fails_midway_leaves_its_pages_with_every_figure_they_show(tmp_path, monkeypatch):
    """A figure no longer drawn is removed after the pages that show it are replaced, not before."""
    results, out = tmp_path / "results", tmp_path / "board"
    made = [synthetic_record(loss, s, 80.0 + s, dataset=dataset) for dataset in ("blobs", "blobs_hard")
            for loss in ("infonce", "dcl") for s in range(2)]
    for record in made:
        record["curve"] = [{"epoch": 1, "loss": 2.0}, {"epoch": 2, "loss": 1.0}]
    write_records(results, made)
    assert main(["leaderboard", "--results", str(results), "--out", str(out)]) == 0
    assert len(list((out / "curves").glob("*.png"))) == 2 and not _broken_links(out)
    for path in results.glob("*blobs_hard*.json"):  # its figure is no longer drawn
        path.unlink()
    monkeypatch.setattr(leaderboard, "write_atomic", _refuse_pages)
    assert main(["leaderboard", "--results", str(results), "--out", str(out)]) == 2
    assert not _broken_links(out)


def test_a_report_that_fails_midway_keeps_the_figure_its_page_shows(tmp_path, monkeypatch):
    results, out = tmp_path / "results", tmp_path / "report"
    write_records(results, [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl") for s in range(2)])
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert list(out.glob("*.png")) and not _broken_links(out)
    for path in results.glob("*-infonce-*.json"):  # without the baseline, no improvement to draw: no figure
        path.unlink()
    write_records(results, [synthetic_record("hcl", s, 70.0 + s) for s in range(2)])
    monkeypatch.setattr(report, "write_atomic", _refuse_pages)
    assert main(["report", "--results", str(results), "--out", str(out)]) == 2
    assert not _broken_links(out)
