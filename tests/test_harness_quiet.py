"""A normal ``harness run`` shows progress bars and results only; ``-v`` adds log lines and library chatter.
Longer presets print one time estimate. Through the CLI in a subprocess, as a user sees it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support import toy_tu  # a TU set of 24 small graphs, written in the test's folder
from tiny_domain import harness

from harness.cli import main
from harness.run import estimate

GRAPH_RUN = ["run", "--domain", "graph", "--loss", "infonce", "--set", "svm_folds=2", "--set", "svm_inner_folds=2",
             "--set", "download=false"]


def _graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str, dataset: str = "TOY",
           preset: tuple[str, ...] = ("--seeds", "0", "--set", "epochs=1")) -> subprocess.CompletedProcess:
    """A graph run on ``dataset``: a fresh TU set (read and cached on first use), or the embedded data."""
    pytest.importorskip("torch_geometric")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # PyG stays silent under pytest; the user's shell has no such variable
    if dataset == "TOY":
        toy_tu(tmp_path / "data")
    proc = harness(*GRAPH_RUN, *preset, "--dataset", dataset, "--data-root", str(tmp_path / "data"), "--results",
                   str(tmp_path / "results"), *extra)
    assert proc.returncode == 0, proc.stderr
    assert "[completed]" in proc.stdout
    return proc


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess:
    """One normal run of a longer preset on the embedded data, shared by the checks of what a normal run prints
    and of its estimate: two seeds, two epochs (the second one's start is the first timed step past a tenth of
    them, where the estimate is printed)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _graph(tmp_path_factory.mktemp("paper"), monkeypatch, dataset="synthetic-motifs",
                      preset=("--preset", "paper", "--seeds", "0,1", "--set", "epochs=2"))


def test_a_normal_run_prints_no_warning_no_processing_and_no_log_line(tmp_path, monkeypatch, paper_run):
    err = paper_run.stderr + _graph(tmp_path, monkeypatch).stderr
    assert "Warning" not in err and "warn" not in err
    assert "Processing" not in err and "Done!" not in err
    assert "INFO" not in err


def test_verbose_shows_the_log_lines(tmp_path, monkeypatch):
    """(PyG's "Processing..." is no longer among them: TU sets are read with its reader, not processed by
    ``TUDataset``, :mod:`domains.graph.tucache`.)"""
    err = _graph(tmp_path, monkeypatch, "-v").stderr  # (the log lines do not depend on the data)
    assert "INFO harness: run graph-TOY-" in err


def test_the_estimate_leaves_out_a_cheap_first_phase():
    """Three steps of 0.1 s (CURL's random-action steps), then steps of 10 s: the latest half of the time
    gives 10 s a step, where the mean over all steps would say 5."""
    assert estimate.recent_step_time([0.0, 0.1, 0.2, 0.3, 10.3, 20.3, 30.3]) == pytest.approx(10.0)


@pytest.mark.parametrize("cheap", [0, 500])
def test_the_estimate_waits_for_the_steps_past_a_cheap_first_phase(monkeypatch, capsys, cheap):
    """1,000 steps: 500 of 0.01 s (random actions), then 500 of 1 s (updates), as a run with a small
    ``num_env_steps`` has them. Told where the steady steps start, the estimate times them (450 s left),
    where after a tenth of the steps it would time only random actions (9 s)."""
    clock = [0.0]
    monkeypatch.setattr(estimate.time, "perf_counter", lambda: clock[0])

    def steps():
        for step in range(1000):
            yield step
            clock[0] += 0.01 if step < 500 else 1.0

    assert list(estimate.estimating(steps(), "CURL", 1000, 1, cheap=cheap)) == list(range(1000))
    [line] = capsys.readouterr().err.splitlines()
    assert line == ("estimate: CURL: 1 s per step; about 8 min of pretraining left over 1 seed, plus each seed's "
                    "evaluation" if cheap else "estimate: CURL: 0.01 s per step; about 9 s of pretraining left over 1 "
                    "seed, plus each seed's evaluation"), line


def test_a_longer_preset_prints_one_estimate_and_quick_none(tmp_path, run_main, paper_run):
    """The estimate is printed once per run, from its first seed, and names the seeds it covers."""
    lines = [line for line in paper_run.stderr.splitlines() if line.startswith("estimate: ")]
    assert len(lines) == 1 and "over 2 seeds" in lines[0] and " per epoch; " in lines[0], paper_run.stderr
    quick = run_main(main, *GRAPH_RUN, "--seeds", "0", "--set", "epochs=2", "--results", str(tmp_path), "--quiet",
                     "--preset", "quick")  # (one seed, in this process)
    assert quick.returncode == 0 and "estimate" not in quick.stderr, quick.stderr


def test_a_warning_of_the_harness_is_one_line_and_a_librarys_says_whose_it_is():
    """Python's format gives the file, the line and its source (``records.set_aside_damaged(path)``), which tells a
    user nothing about the harness's own warnings; a library's warning keeps it, as it says where it comes from."""
    import io

    from harness.run import output

    own, library = io.StringIO(), io.StringIO()
    output._show_warning(UserWarning("moved it aside"), UserWarning, output.__file__, 7, own, "call()")
    output._show_warning(UserWarning("old API"), UserWarning, io.__file__, 7, library, "call()")
    assert own.getvalue() == "warning: moved it aside\n"
    assert io.__file__ in library.getvalue() and "UserWarning: old API" in library.getvalue()


def test_a_sweeps_jobs_print_no_estimate_of_their_own(tmp_path):
    """The sweep's bar estimates the whole sweep; a line per job ("about 1.2 s of pretraining left") was noise."""
    out = harness("sweep", "--domains", "tiny", "--losses", "infonce", "--preset", "paper", "--seeds", "0,1",
                  "--set", "sleep_s=0.05", "--tracker", "none", "--results", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "sweep done: 2 completed" in out.stdout and "estimate" not in out.stdout + out.stderr
