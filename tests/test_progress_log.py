"""A progress bar written to a log (standard error not a terminal: a file, a pipe, a job's captured output) refreshes
every LOG_REFRESH_S, not at tqdm's 0.1 s default, which leaves several frames a second in the file for as long as
a run trains. Through the CLI in a subprocess whose standard error is a pipe, on the tiny domain."""

from __future__ import annotations

import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
from tiny_domain import harness


def test_a_bar_on_a_pipe_refreshes_seldom(tmp_path, monkeypatch):
    monkeypatch.delenv("TQDM_MININTERVAL", raising=False)  # tqdm's own setting, which the harness honours
    # 40 epochs of 0.05 s: 2 s of training, about 20 refreshes at tqdm's default interval
    proc = harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(tmp_path),
                   "--set", "epochs=40", "--set", "sleep_s=0.05")
    assert proc.returncode == 0, proc.stderr
    frames = [f for f in proc.stderr.replace("\n", "\r").split("\r") if f.startswith("epochs:")]
    assert frames, proc.stderr  # the bar is shown, on a pipe too
    # its first frame, its last, and at most one more: 2 s is far below domains.context.LOG_REFRESH_S
    assert len(frames) <= 3, frames


def test_tqdms_own_setting_wins(tmp_path):
    proc = harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(tmp_path),
                   "--set", "epochs=40", "--set", "sleep_s=0.05", env={"TQDM_MININTERVAL": "0"})
    assert proc.returncode == 0, proc.stderr
    assert len([f for f in proc.stderr.replace("\n", "\r").split("\r") if f.startswith("epochs:")]) >= 20
