"""Live tracking of a ``--force`` rerun, as a user meets it (``python -m harness run``): while the earlier run's
completed record stands, its TensorBoard log stays as it was, whether the rerun fails or is stopped; once the
rerun's record is written, its log (one value a step, resumed or not) takes the earlier one's place."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from support import wait_for
from test_faults import _start
from test_tracking import _scalars
from tiny_domain import harness, resume_args

from harness.cli import main
from harness.run.stopping import EXIT_STOPPED

RUN = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=6"]


def _wait_for_line(log: Path, line: str, times: int) -> None:
    """Until the run's log (every attempt's, appended) holds ``line`` ``times`` times."""
    wait_for(f"{log} to say {line!r} {times} times", lambda: log.read_text().count(line) >= times)


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_a_forced_rerun_keeps_the_earlier_log_till_its_record_replaces_the_earlier_record(tmp_path, monkeypatch,
                                                                                          run_main):
    results = ["--results", str(tmp_path)]
    assert harness(*RUN, *results).returncode == 0
    [record_path] = tmp_path.glob("*.json")
    earlier_record, rid = record_path.read_bytes(), json.loads(record_path.read_text())["run_id"]
    earlier_log = _files(tmp_path / "tb" / rid)

    with monkeypatch.context() as failing:  # in this process: what a failure leaves, not the process boundary
        failing.setenv("TINY_DOMAIN_FAIL", "1")
        failed = run_main(main, *RUN, *results, "--force")
    assert failed.returncode == 1, failed.stderr
    assert record_path.read_bytes() == earlier_record and _files(tmp_path / "tb" / rid) == earlier_log

    # The rerun holds after its epoch 2 till `release` exists: SIGTERM reaches it mid-run however it is scheduled.
    release = tmp_path.parent / f"{tmp_path.name}-release"
    proc = _start([*RUN, *results, "--force"], hold=(2, release))
    _wait_for_line(record_path.with_suffix(".log"), "epoch 2:", 2)  # the rerun's epoch 2, not the first run's
    proc.send_signal(signal.SIGTERM)
    release.touch()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    assert record_path.read_bytes() == earlier_record and _files(tmp_path / "tb" / rid) == earlier_log

    resumed = harness(*resume_args(stderr.strip().splitlines()[-1]))
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(record_path.read_text())
    assert record["resumed"] and record["info"]["tracking"] == {"tensorboard": f"tb/{rid}"}
    assert os.listdir(tmp_path / "tb") == [rid]  # the rerun's log in place, the earlier one gone
    assert not set(_files(tmp_path / "tb" / rid)) & set(earlier_log)
    logged = _scalars(tmp_path / "tb" / rid)
    assert logged["loss"] == [(p["epoch"], p["loss"]) for p in record["curve"]]
    assert [step for step, _ in logged["final/accuracy"]] == [6]


def test_a_rerun_whose_log_cannot_take_its_place_keeps_its_written_record(tmp_path, monkeypatch, capsys):
    """The record is written before the rerun's log replaces the earlier one: a failure of that move said "cannot
    write the record ... rerun with --resume", exit 2, of a record that was written."""
    import errno

    from harness.run import tracking

    args = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=2", "--quiet",
            "--results", str(tmp_path)]
    assert main(args) == 0
    [record] = tmp_path.glob("*.json")
    first = record.stat().st_ino  # a record is replaced by a new file (written aside, then renamed over it)

    def refused(trackers):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(tracking, "publish", refused)
    capsys.readouterr()
    assert main([*args, "--force"]) == 0
    assert record.stat().st_ino != first  # the rerun's record replaced the earlier one
    [said] = [line for line in capsys.readouterr().err.splitlines() if "TensorBoard log" in line]
    assert said.startswith("warning: ") and "its record is written" in said
    assert f"it stays in {tmp_path / 'tb' / (record.stem + tracking.RERUN)}" in said
