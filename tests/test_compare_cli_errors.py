"""``harness compare``'s one-line errors for what a new user mistypes: a ``--results`` that is no folder, and with
``--out`` a damaged record, whose error must say that the CANNOT DECIDE report was written."""

from __future__ import annotations

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain the records below belong to)
from tiny_domain import synthetic_record, write_records

from harness.cli import main


@pytest.mark.parametrize("kind, said", [("missing", "does not exist"), ("file", "is a file, not a folder")])
def test_a_results_that_is_no_folder_is_named_not_the_baseline(tmp_path, run_main, kind, said):
    """It said ``--baseline '1bcad669' is not a results folder (...) pass --results DIR``: the user had."""
    results = tmp_path / "leaderboard" / "results"
    if kind == "file":
        results.parent.mkdir()
        results.write_text("")
    out = run_main(main, "compare", "--results", str(results), "--baseline", "1bcad669", "--candidate", "90bfb705")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == f"error: --results '{results}' {said}\n"


def test_a_damaged_record_with_out_says_its_report_was_written(tmp_path, run_main):
    """The error said ``nothing was written`` while --out got its CANNOT DECIDE report (as the README promises)."""
    write_records(tmp_path / "a", [synthetic_record("infonce", s, 80.0) for s in range(3)])
    write_records(tmp_path / "b", [synthetic_record("infonce", s, 80.0) for s in range(3)])
    (tmp_path / "b" / "damaged.json").write_text('{"schema": ')  # a truncated record
    report = tmp_path / "r.md"
    out = run_main(main, "compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"),
                   "--out", str(report))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "damaged.json" in out.stderr and "nothing was written" not in out.stderr
    assert out.stderr.rstrip().endswith(f"; wrote {report}, a CANNOT DECIDE report")
    text = report.read_text()
    assert "**CANNOT DECIDE" in text and "damaged.json" in text and "nothing was written" not in text
    # Without --out nothing is written, and the error still says so.
    out = run_main(main, "compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"))
    assert out.returncode == 2 and out.stderr.rstrip().endswith("nothing was written")


@pytest.mark.parametrize("side", ["baseline", "candidate"])
def test_a_json_report_among_a_sides_records_is_refused_and_not_written(tmp_path, run_main, side):
    """An audit (session 33) wrote ``--out <candidate folder>/report.json``: the folder then held a .json that is no
    record, and every later compare of it (the regression suite's next run too) was refused."""
    write_records(tmp_path / "baseline", [synthetic_record("infonce", s, 80.0) for s in range(3)])
    write_records(tmp_path / "candidate", [synthetic_record("infonce", s, 80.0) for s in range(3)])
    report = tmp_path / side / "report.json"
    out = run_main(main, "compare", "--baseline", str(tmp_path / "baseline"), "--candidate",
                   str(tmp_path / "candidate"), "--out", str(report))
    assert out.returncode == 2 and not report.exists() and "Traceback" not in out.stderr
    assert f"is among the records of the {side}'s folder" in out.stderr
    # as markdown, or beside the folders, it is written
    for ok in (tmp_path / side / "report.md", tmp_path / "report.json"):
        out = run_main(main, "compare", "--baseline", str(tmp_path / "baseline"), "--candidate",
                       str(tmp_path / "candidate"), "--out", str(ok))
        assert out.returncode == 0 and ok.exists(), out.stderr
