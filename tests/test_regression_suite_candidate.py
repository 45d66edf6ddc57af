"""The regression suite gates the records of the code it ran, not the newest code its results folder holds. The gate of
the code that ran is called in this process (``suite_in_process``), its runs and comparisons in subprocesses."""

from __future__ import annotations

from test_regression_suite import script
from tiny_domain import synthetic_record, write_records

from harness.version import source_digest

# A code committed after any the suite runs: compare takes a folder's newest code per group as the candidate.
LATER = {"source_digest": "f" * 64, "git_commit": "f" * 40, "git_commit_date": "2099-01-01T00:00:00+00:00"}


def test_a_reused_results_folder_holding_a_newer_codes_records_gates_the_code_that_ran(tmp_path, suite_in_process):
    """A results folder kept between runs (``--results`` to go on, or a cached CI folder) held another code's
    records of the suite's setting, with a later commit date: compare judged those, and passed, while the code
    that ran was never compared. An accuracy of 1000 (percent) is one no run reaches: the baseline's and the other
    code's records agree on it, so only the run's own record can fall short of it."""
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\n")
    base, cand = tmp_path / "baseline", tmp_path / "cand"
    write_records(base, [synthetic_record("infonce", 0, 1000.0, dataset="blobs_hard")])
    write_records(cand, [synthetic_record("infonce", 0, 1000.0, dataset="blobs_hard", software=LATER)])
    out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(cand))
    report = (cand / "regression-report.md").read_text()
    assert "**CANNOT DECIDE: 1 untestable" in report and out.returncode == 2, out.stdout + out.stderr
    assert f"{cand}@{source_digest('tiny', 'infonce')}" in report and "| 1000.0 (1) | 1000.0 (1) |" not in report
    # Another code's setting that the suite did not run is not one it left without a baseline record.
    write_records(cand, [synthetic_record("dcl", 0, 1000.0, dataset="blobs_hard", software=LATER)])
    out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(cand))
    assert out.returncode == 2 and "no completed baseline record" not in out.stderr, out.stdout + out.stderr


def test_a_suite_whose_settings_run_different_plugins_is_refused_before_it_runs(tmp_path):
    """(The script, in a subprocess: its plugins are loaded afresh, which this process's registry keeps.) One gate
    names one code: settings of a plugin loss and of a built-in one record two source digests (the
    plugin's is part of its runs' identity), and a candidate of one of them would leave the other ungated."""
    suite = tmp_path / "mixed.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\ntiny linear blobs_hard tiny_weighted_nce quick 0 1\n")
    base = tmp_path / "baseline"
    write_records(base, [synthetic_record("infonce", 0, 90.0, dataset="blobs_hard")])
    out = script("--suite", str(suite), "--baseline", str(base), "--results", str(tmp_path / "cand"), "--dry-run",
                 HARNESS_PLUGINS="tiny_domain,tiny_loss")
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    assert "the suite's settings run different code" in out.stderr and "tiny tiny_weighted_nce (line 2)" in out.stderr
