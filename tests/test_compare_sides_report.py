"""``harness compare`` says what it judged: per side the records it read and the code(s) it judged, the records
of other codes and of subfolders it left out (in the report and on stderr); it never overwrites a file that is
not a compare report; and its messages do not misname what they count."""

from __future__ import annotations

import random

from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main

GOOD = [85.9, 82.45, 86.6, 81.2, 80.9, 84.3]
MAIN = {"source_digest": "c" * 64, "git_commit": "c" * 40, "git_commit_date": "2026-11-26T07:00:00+00:00"}
BRANCH = {"source_digest": "a" * 64, "git_commit": "a" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00"}
HEAD = {"source_digest": "b" * 64, "git_commit": "b" * 40, "git_commit_date": "2026-11-26T09:00:00+00:00"}


def _records(values: list[float], seeds: list[int] | None = None, loss: str = "infonce", **kw) -> list[dict]:
    seeds = list(range(len(values))) if seeds is None else seeds
    return [synthetic_record(loss, s, v, **kw) for s, v in zip(seeds, values)]


def _compare(run_main, baseline, candidate, *extra: str):
    return run_main(main, "compare", "--baseline", str(baseline), "--candidate", str(candidate), *extra)


def test_a_branch_older_than_head_in_one_folder_is_named_as_left_out_with_the_name_to_judge_it(tmp_path, run_main):
    """The audit's case: a branch commit dated before HEAD lost to HEAD's records in one folder, and the gate passed
    HEAD's records without naming either side's code; the branch itself fails by 30 points."""
    write_records(tmp_path / "base", _records(GOOD, software=MAIN))
    write_records(tmp_path / "cand", _records(GOOD, software=HEAD, finished_at="2026-01-02T00:00:00+00:00")
                  + _records([v - 30 for v in GOOD], software=BRANCH))
    report = tmp_path / "r.md"
    out = _compare(run_main, tmp_path / "base", tmp_path / "cand", "--out", str(report))
    assert out.returncode == 0  # the rule is kept: per group the newest code by commit date
    text = report.read_text()
    sides = text.split("## Sides")[1].split("\n## ")[0]
    assert "baseline: read 6 record(s)" in sides and "digest cccccccccccc" in sides
    assert "candidate: read 12 record(s)" in sides
    assert "judged code(s): version 0.1.0 / commit bbbbbbb / digest bbbbbbbbbbbb" in sides
    hint = f"{tmp_path / 'cand'}@aaaaaaaaaaaa"
    left = [line for line in sides.splitlines() if "left out" in line]
    assert len(left) == 1 and "left out 6 record(s) of other code(s): version 0.1.0 / commit aaaaaaa" in left[0]
    assert hint in left[0] and "baseline" not in left[0]
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and warned[0].startswith("warning: the candidate '") and hint in warned[0]
    assert "left out 6 record(s)" in warned[0]
    assert "(1 within tolerance; the candidate left records out: see Sides)." in out.stdout  # the verdict line
    # The hint judges the branch: it fails.
    out = _compare(run_main, tmp_path / "base", hint)
    assert out.returncode == 1 and "FAIL: 1 regression(s)" in out.stdout and "left out" not in out.stdout


def test_records_in_a_subfolder_are_counted_and_warned_about_not_the_runs_own_folders(tmp_path, run_main):
    """The baseline's second group sat in base/sub/: never read, and the gate passed with one group, silently."""
    write_records(tmp_path / "base", _records(GOOD))
    write_records(tmp_path / "base" / "sub", _records(GOOD, loss="dcl", loss_params={"tau_plus": 0.1}))
    for own in (".work", "models", "tb", ".hidden"):  # what runs write there: never a warning
        (tmp_path / "base" / own).mkdir()
        (tmp_path / "base" / own / "x.json").write_text("{}")
    write_records(tmp_path / "cand", _records(GOOD, finished_at="2026-01-02T00:00:00+00:00"))
    out = _compare(run_main, tmp_path / "base", tmp_path / "cand")
    assert out.returncode == 0 and "baseline: read 6 record(s)" in out.stdout
    warned = [line for line in out.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "has 6 *.json file(s) in subfolders" in warned[0]
    assert str(tmp_path / "base" / "sub") in warned[0] and "read from the folder's top level only" in warned[0]
    assert "not read: records are read from the folder's top level only" in out.stdout
    assert "candidate, warning" not in out.stdout


def test_a_folder_whose_records_are_all_in_subfolders_names_them(tmp_path, run_main):
    """It said only "the baseline 'base' has no completed records": the records one level down went unnamed."""
    base, cand = tmp_path / "base", tmp_path / "cand"
    write_records(base / "x", _records(GOOD))
    write_records(base / "y" / "z", _records(GOOD[:2], dataset="rings"))
    write_records(cand, _records(GOOD, finished_at="2026-01-02T00:00:00+00:00"))
    done = harness("compare", "--baseline", str(base), "--candidate", str(cand))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr == (f"error: the baseline '{base}' has no records at the top level of '{base}', the only level "
                           "read; found 8 *.json file(s) in its subfolders x/ (6), y/z/ (2): name one as the side, "
                           f"e.g. --baseline {base / 'x'}\n")
    # as the hint says, it is judged
    assert harness("compare", "--baseline", str(base / "x"), "--candidate", str(cand)).returncode == 0
    # by name, in the folder or with --results, the hint keeps the name; the candidate's side alike
    out = _compare(run_main, f"{base}@0.1.0", cand)
    assert out.returncode == 2 and f"e.g. --baseline {base / 'x'}@0.1.0\n" in out.stderr
    out = run_main(main, "compare", "--results", str(base), "--baseline", "0.1.0", "--candidate", "0.1.0")
    assert out.returncode == 2 and "the baseline '0.1.0' has no records at the top level" in out.stderr
    assert f"subfolders x/ (6), y/z/ (2): name one as the side, e.g. --baseline {base / 'x'}@0.1.0" in out.stderr
    out = _compare(run_main, cand, base)
    assert out.returncode == 2 and f"the candidate '{base}' has no records at the top level" in out.stderr
    assert f"e.g. --candidate {base / 'x'}\n" in out.stderr


def test_out_never_replaces_a_record_or_a_users_file_only_a_compare_report(tmp_path, run_main):
    """``--out A/<record>.json`` replaced the baseline's record with the markdown report."""
    write_records(tmp_path / "a", _records(GOOD))
    write_records(tmp_path / "b", _records(GOOD, finished_at="2026-01-02T00:00:00+00:00"))
    record = next((tmp_path / "a").glob("*.json"))
    before = record.read_bytes()
    out = _compare(run_main, tmp_path / "a", tmp_path / "b", "--out", str(record))
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert "not generated by `harness compare`" in out.stderr and record.read_bytes() == before
    # A report of its own (a verdict's or an error's) is replaced.
    report = tmp_path / "r.md"
    assert _compare(run_main, tmp_path / "a", tmp_path / "b", "--out", str(report)).returncode == 0
    assert _compare(run_main, tmp_path / "a", tmp_path / "nowhere", "--out", str(report)).returncode == 2
    assert "**CANNOT DECIDE" in report.read_text()
    assert _compare(run_main, tmp_path / "a", tmp_path / "b", "--out", str(report)).returncode == 0


def test_a_large_drop_within_the_tolerance_is_not_called_unchanged(tmp_path, run_main):
    rng = random.Random(0)
    write_records(tmp_path / "a", _records([99.0 + rng.gauss(0, 0.3) for _ in range(10)]))
    write_records(tmp_path / "b", _records([0.2 + rng.gauss(0, 0.3) for _ in range(10)],
                                           finished_at="2026-01-02T00:00:00+00:00"))
    out = _compare(run_main, tmp_path / "a", tmp_path / "b", "--tolerance", "100")
    assert out.returncode == 0 and "## Within tolerance (1)" in out.stdout
    assert "nchanged (" not in out.stdout and "(1 within tolerance)." in out.stdout


def test_a_tolerance_with_an_empty_selector_is_refused_not_read_as_the_default(tmp_path, run_main):
    write_records(tmp_path / "a", _records(GOOD))
    write_records(tmp_path / "b", _records(GOOD, finished_at="2026-01-02T00:00:00+00:00"))
    out = _compare(run_main, tmp_path / "a", tmp_path / "b", "--tolerance", "=3")
    assert out.returncode == 2 and "--tolerance '=3'" in out.stderr and out.stdout == ""


def test_folder_at_an_empty_name_is_refused_not_read_as_the_whole_folder(tmp_path, run_main):
    write_records(tmp_path / "a", _records(GOOD))
    write_records(tmp_path / "b", _records(GOOD, finished_at="2026-01-02T00:00:00+00:00"))
    out = _compare(run_main, f"{tmp_path / 'a'}@", tmp_path / "b")
    assert out.returncode == 2 and "FOLDER@NAME needs a NAME after @" in out.stderr and out.stdout == ""


def test_a_regression_on_other_seeds_does_not_claim_nothing_is_missing(tmp_path, run_main):
    """Candidate seeds 5-9 against baseline seeds 0-4 said ``FAIL: 1 regression(s), 0 missing``."""
    write_records(tmp_path / "a", _records(GOOD[:5]))
    write_records(tmp_path / "b", _records([v - 20 for v in GOOD[:5]], seeds=list(range(5, 10))))
    out = _compare(run_main, tmp_path / "a", tmp_path / "b")
    verdict = next(line for line in out.stdout.splitlines() if line.startswith("**FAIL"))
    assert out.returncode == 1 and "1 of them also short of the baseline's seeds" in verdict
    assert "the candidate also lacks: seed(s) 0,1,2,3,4 of the baseline not run" in out.stdout



def test_the_verdict_line_says_when_a_groups_config_or_data_differ(tmp_path, run_main):
    """A changed default or another copy of the data was said only in a section after the verdict tables."""
    write_records(tmp_path / "a", _records(GOOD, config={"epochs": 3, "knn_t": 0.1}))
    write_records(tmp_path / "b", _records(GOOD, config={"epochs": 3, "knn_t": 0.07}))
    out = _compare(run_main, tmp_path / "a", tmp_path / "b")
    assert out.returncode == 0 and "knn_t: 0.1 → 0.07" in out.stdout
    assert "(1 within tolerance; 1 group(s)' config or data differ: see below)." in out.stdout
    same = _records(GOOD, config={"epochs": 3, "knn_t": 0.1})
    data = [{**r, "data_fingerprint": {"dataset": "blobs", "graphs": 50}} for r in same]
    write_records(tmp_path / "c", data)
    out = _compare(run_main, tmp_path / "a", tmp_path / "c")
    assert "## Groups whose data differ" in out.stdout and "## Config differences" not in out.stdout
    assert "1 group(s)' config or data differ: see below)." in out.stdout
