"""A ``--resume`` that cannot go on from the checkpoint it finds (another run's, unreadable) is a mistake about the
command, not a result of the run: ``harness run`` exits 2 naming the checkpoint and writes nothing (it wrote a
failed record), ``harness sweep`` reports the job as refused; the checkpoint and any earlier record stay."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from tiny_domain import harness, killed_mid_run

from harness.cli import main

SETS = ["--set", "epochs=6", "--set", "sleep_s=0.5"]
RUN = ["run", "--domain", "tiny", "--loss", "infonce", *SETS, "--quiet", "--tracker", "none"]


def _killed_mid_run(results: Path, seed: int, *extra: str) -> Path:
    return killed_mid_run([*RUN, "--seeds", str(seed), "--results", str(results), *extra], results, seed)


def _folder(results: Path) -> dict[str, bytes]:
    return {p.relative_to(results).as_posix(): p.read_bytes() for p in sorted(results.rglob("*")) if p.is_file()}


def test_a_refused_resume_writes_no_record_and_keeps_the_checkpoint(tmp_path, run_main):
    results, other = tmp_path / "results", tmp_path / "other"
    done = harness(*RUN, "--seeds", "0", "--results", str(results))
    assert done.returncode == 0, done.stderr
    [record] = results.glob("*.json")
    # A --force rerun killed mid-run: its checkpoint, beside the completed record it was redoing.
    checkpoint = _killed_mid_run(results, 0, "--force")
    foreign = _killed_mid_run(other, 1)
    for plant, problem in ((lambda: shutil.copy(foreign, checkpoint), "was saved by another run"),
                           (lambda: checkpoint.write_bytes(b"\x80\x02garbage"), "cannot be read")):
        plant()
        before = _folder(results)
        # through main in this process (what the command calls): the command's exit 2 is the next test's
        out = run_main(main, *RUN, "--seeds", "0", "--results", str(results), "--force", "--resume")
        assert out.returncode == 2, out.stderr
        [line] = out.stderr.splitlines()
        assert line.startswith(f"error: the checkpoint {checkpoint} ") or line.startswith(f"error: {checkpoint} ")
        assert problem in line and line.endswith("rerun without --resume to start over")
        assert _folder(results) == before  # no failed record; the completed one, the log, the checkpoint as they were


def test_a_resume_refused_as_the_domain_restores_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """The right run's checkpoint, its epoch out of range, passes the early check and is refused only as the domain
    restores its objects: that wrote no record but appended the run's command and the refusal to its log, and
    opened its trackers (a W&B run, an MLflow run marked failed). The log and trackers now open only once the
    checkpoint is restored, so the folder, the log and the trackers' own folders included, is as it was; the run
    then goes on from a sound checkpoint in the same log."""
    for name in ("WANDB_MODE", "MLFLOW_TRACKING_URI"):  # W&B offline and MLflow's files, in the results folder
        monkeypatch.delenv(name, raising=False)
    results = tmp_path / "results"
    trackers = ["--tracker", "tensorboard", "--tracker", "mlflow"]
    # (W&B's service outlives a killed run, writing its own log for seconds: the resumes add a W&B run instead)
    checkpoint = killed_mid_run([*RUN[:-2], *trackers, "--seeds", "0", "--results", str(results)], results, 0)
    trackers += ["--tracker", "wandb"]
    kept = checkpoint.read_bytes()
    state = torch.load(checkpoint, weights_only=False)
    state["extra"]["epoch"] = 99
    torch.save(state, checkpoint)
    before = _folder(results)
    out = harness(*RUN[:-2], *trackers, "--seeds", "0", "--results", str(results), "--resume",
                  timeout=300)
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.splitlines()
    assert line.startswith(f"error: the checkpoint {checkpoint} cannot be read (its epoch 99 is not a whole number "
                           "from 0 to 6")
    assert _folder(results) == before
    checkpoint.write_bytes(kept)
    done = harness(*RUN[:-2], *trackers, "--seeds", "0", "--results", str(results), "--resume",
                   timeout=300)
    assert done.returncode == 0, done.stderr
    [log] = results.glob("*.log")
    text = log.read_text()
    assert text.startswith(before[log.name].decode()) and text.count(" run ") >= 2 and "epoch 6:" in text


def test_a_sweep_reports_a_refused_resume_as_refused(tmp_path):
    results = tmp_path / "results"
    checkpoint = _killed_mid_run(results, 0)
    checkpoint.write_bytes(b"\x80\x02garbage")
    before = _folder(results)
    out = harness("sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", *SETS, "--tracker", "none",
                  "--results", str(results), "--resume", timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    [job] = [line for line in out.stdout.splitlines() if line.startswith("[")]
    assert job.startswith("[refused] tiny/blobs/infonce seed 0: the checkpoint ") and str(checkpoint) in job
    assert "cannot be read" in job
    assert out.stdout.splitlines()[-1] == "sweep done: 1 refused (--resume cannot go on from its checkpoint: see above)"
    assert _folder(results) == before
