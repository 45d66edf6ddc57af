"""``harness compare`` never passes a drop through a side door: each test is a way an audit of the gate once got
exit 0 (or a traceback) for a candidate that was clearly worse, and now gets a failure or "cannot decide".

Doors: ``--allow-missing`` waiving an unconfirmed drop, a paired test leaving the candidate's extra seeds out, the
newest code chosen by commit dates in other UTC offsets or by digest order, a named commit or version holding two
codes, an older code standing in for a newer one that failed, hidden or renamed copies of records, two results for
one seed, one folder spelt two ways, metrics that are NaN or too large to compute with, copies of one side's records
in the other's folder standing in for its own code, and a name that is a tag and a branch."""

from __future__ import annotations

import json
import os

from support import git_repo
from tiny_domain import synthetic_record, write_records

from harness import version
from harness.cli import main
from harness.stats import compare_values

GOOD = [85.9, 82.45, 86.6, 81.2, 80.9]  # five seeds of an honest run (mean 83.41)
OLD = {"source_digest": "a" * 64, "git_commit": "a" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00"}
NEW = {"source_digest": "b" * 64, "git_commit": "b" * 40, "git_commit_date": "2026-11-26T03:30:00-05:00"}


def _records(values: list[float], seeds: list[int] | None = None, **kw) -> list[dict]:
    seeds = list(range(len(values))) if seeds is None else seeds
    return [synthetic_record("infonce", s, v, **kw) for s, v in zip(seeds, values)]


def _gate(tmp_path, cand: list[dict], *extra: str, base: list[dict] | None = None) -> tuple[int, str]:
    """Exit status and report of ``harness compare`` of the five honest seeds against ``cand``."""
    write_records(tmp_path / "base", _records(GOOD) if base is None else base)
    write_records(tmp_path / "cand", cand)
    out = tmp_path / "report.md"
    code = main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "cand"),
                 "--out", str(out), *extra])
    return code, out.read_text() if out.exists() else ""


def test_allow_missing_waives_the_absent_seeds_not_the_drop_the_others_show(tmp_path, capsys):
    one = _records([25.0])  # one seed, at chance level
    assert _gate(tmp_path / "1", one, "--allow-missing")[0] == 2
    assert "untestable" in capsys.readouterr().err
    two = _records([GOOD[0] - 10, GOOD[1] - 12])  # p = 0.058 on two pairs
    code, report = _gate(tmp_path / "2", two, "--allow-missing")
    assert code == 2 and "the test did not confirm" in report
    code, report = _gate(tmp_path / "3", two, "--allow-missing", "--allow-untestable")
    assert code == 0 and "PASS with waivers: 1 missing (--allow-missing), 1 untestable (--allow-untestable)" in report
    assert "every baseline group compared and held" not in report


def test_the_candidates_extra_seeds_count(tmp_path, capsys):
    collapsed = _records(GOOD) + _records([25.0 + s / 10 for s in range(10)], seeds=list(range(5, 15)))
    code, report = _gate(tmp_path / "auto", collapsed)
    assert code == 1 and "welch" in report  # the default test pairs no seeds then: Welch's over all 15
    code, report = _gate(tmp_path / "paired", collapsed, "--test", "paired-t")
    assert code == 2  # the pairs show +0.00; the mean over all seeds fell by 38.64
    assert "seed(s) 5,6,7,8,9,10,11,12,13,14 have no baseline seed to pair with" in report
    assert "mean changed by -38.64" in report
    capsys.readouterr()


def test_the_newest_code_is_ordered_by_utc_commit_time(tmp_path):
    # NEW was committed at 08:30 UTC, written in its committer's -05:00: as text it sorts before OLD's 08:00.
    cand = _records(GOOD, software=OLD) + _records([v - 20 for v in GOOD], software=NEW)
    code, report = _gate(tmp_path, cand)
    assert code == 1 and "Regressions (1)" in report


def test_an_older_code_rerun_later_from_a_copied_tree_is_not_newer_than_a_later_commit(tmp_path):
    """A copy of OLD's tree without .git (as the GPU machine runs) records OLD's digest and no commit date; its
    finish time, a day after NEW was committed, outranked NEW's commit date, and the gate passed OLD's good seeds
    while NEW was 20 points down."""
    copied = _records([84.0], seeds=[5], software={"source_digest": OLD["source_digest"]},
                      finished_at="2026-11-27T09:00:00+00:00")
    cand = _records(GOOD, software=OLD) + copied + _records([v - 20 for v in GOOD], software=NEW)
    code, report = _gate(tmp_path, cand)
    assert code == 1 and "Regressions (1)" in report and "| 63.41 (5) |" in report


def test_two_edited_trees_of_one_commit_the_one_run_last_is_newer(tmp_path, capsys):
    tree = {"git_commit": "c" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00", "git_dirty": True}
    first = _records(GOOD, version="0.2.dev1+gccc.d20261126", software={**tree, "source_digest": "f" * 64},
                     finished_at="2026-11-26T07:17:00+00:00")
    later = _records([v - 20 for v in GOOD], version="0.2.dev1+gccc.d20261126",
                     software={**tree, "source_digest": "0" * 64}, finished_at="2026-11-26T09:00:00+00:00")
    code, report = _gate(tmp_path, first + later)  # "f..." sorts after "0...": the digest order would pick first
    assert code == 1 and "Regressions (1)" in report
    # Naming that version names both trees: refused, not judged on one of them.
    write_records(tmp_path / "both", first + later + _records(GOOD, version="0.1.0"))
    assert main(["compare", "--results", str(tmp_path / "both"), "--baseline", "0.1.0",
                 "--candidate", "0.2.dev1+gccc.d20261126"]) == 2
    assert "ambiguous" in capsys.readouterr().err
    assert main(["compare", "--results", str(tmp_path / "both"), "--baseline", "0.1.0", "--candidate", "0000"]) == 1


def test_a_newer_code_that_failed_is_the_sides_result(tmp_path):
    failed = [synthetic_record("infonce", s, 0.0, status="failed", software=NEW,
                               finished_at="2026-11-26T09:00:00+00:00") for s in range(5)]
    code, report = _gate(tmp_path, _records(GOOD, software=OLD) + failed)
    assert code == 1 and "failed on seed(s) 0,1,2,3,4" in report


def test_a_group_only_an_older_code_of_the_candidate_ran_is_missing(tmp_path):
    """The candidate is its newest code: an older code's records never stand in for a group it did not run."""
    other = {"dataset": "rings"}
    base = _records(GOOD) + _records(GOOD, **other)
    cand = _records(GOOD, software=OLD) + _records(GOOD, software=OLD, **other) + _records(GOOD, software=NEW)
    code, report = _gate(tmp_path, cand, base=base)
    missing = report.split("## Missing")[1].split("\n## ")[0]
    assert code == 1 and "tiny / rings /" in missing and "tiny / blobs /" not in missing
    assert "only an older code of the candidate ran it (aaaaaaa); its newest code (bbbbbbb) did not" in missing
    code, report = _gate(tmp_path, cand, "--allow-missing", base=base)
    assert code == 0 and "PASS with waivers: 1 missing (--allow-missing)" in report


def test_a_group_only_an_older_commit_ran_is_missing_where_records_have_no_source_digest(tmp_path):
    """Records written before the source digest are one code class per version, whatever their commits: an audit
    (session 33) passed a candidate of version 0.1.0 whose newest commit ran only rings, its blobs judged on an
    older commit's records. The commit is all that tells such records' code apart: blobs is missing, unless named."""
    old = {"git_commit": "1" * 40, "git_commit_date": "2026-11-20T08:00:00+00:00"}
    new = {"git_commit": "2" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00"}
    base = _records(GOOD, version="0.0.9") + _records(GOOD, version="0.0.9", dataset="rings")
    cand = _records(GOOD, software=old) + _records(GOOD, software=new, dataset="rings")
    code, report = _gate(tmp_path, cand, base=base)
    missing = report.split("## Missing")[1].split("\n## ")[0]
    assert code == 1 and "tiny / blobs /" in missing and "tiny / rings /" not in missing
    assert "only an older code of the candidate ran it (1111111); its newest code (2222222) did not" in missing
    named = main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", f"{tmp_path / 'cand'}@1111111",
                  "--out", str(tmp_path / "named.md")])
    report = (tmp_path / "named.md").read_text()
    assert named == 1 and "tiny / rings /" in report.split("## Missing")[1].split("\n## ")[0]  # that commit ran blobs
    # One commit's clean and edited (+dirty) trees are one code here, as naming the commit selects both: a reviewer
    # saw the committed prior records of 738092f fail against themselves
    dirty = {**new, "git_dirty": True}
    cand = _records(GOOD, software=dirty) + _records(GOOD, software=new, dataset="rings")
    code, report = _gate(tmp_path / "dirty", cand, base=base)
    assert code == 0, report


def test_hidden_and_renamed_copies_of_records_are_not_results(tmp_path, capsys):
    bad = _records([v - 30 for v in GOOD])
    write_records(tmp_path / "cand", bad)
    for record in _records(GOOD):  # a hidden copy of each good record: ls does not show it, the gate must not read it
        (tmp_path / "cand" / f".{record['run_id']}.json").write_text(json.dumps(record))
    assert _gate(tmp_path, [])[0] == 1
    renamed = _records(GOOD)
    write_records(tmp_path / "copy", renamed)
    (tmp_path / "copy" / "a-copy.json").write_text(json.dumps({**renamed[0], "metrics": {"accuracy": 30.0}}))
    capsys.readouterr()
    assert main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "copy")]) == 2
    err = capsys.readouterr().err
    assert "a-copy.json: holds the record of run" in err and err.count("\n") == 1


def test_two_results_of_one_seed_are_refused_not_chosen_between(tmp_path, capsys):
    cand = _records(GOOD)
    other = {**cand[0], "run_id": cand[0]["run_id"] + "-otherdata", "metrics": {"accuracy": 30.0},
             "data_fingerprint": {"dataset": "blobs", "sha256": "1" * 64}}
    assert _gate(tmp_path, [*cand, other])[0] == 2
    err = capsys.readouterr().err
    assert "different results for one seed of one code" in err and "seed 0" in err and "30.00" in err


def test_one_folder_spelt_two_ways_is_refused(tmp_path, capsys):
    write_records(tmp_path / "base", _records(GOOD))
    (tmp_path / "link").symlink_to(tmp_path / "base")
    spellings = [str(tmp_path / "base" / ".." / "base"), str(tmp_path / "link"),
                 os.path.relpath(tmp_path / "base")]
    for spelling in spellings:
        assert main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", spelling]) == 2
        assert "the same 5 records" in capsys.readouterr().err


def test_the_report_says_when_the_sides_read_different_data_and_a_side_mixing_configs_is_refused(tmp_path, capsys):
    cand = [{**r, "data_fingerprint": {"dataset": "blobs", "graphs": 50}} for r in _records(GOOD)]
    code, report = _gate(tmp_path / "data", cand)
    assert code == 0 and "## Groups whose data differ" in report
    # Seeds of one side, one code and one command that ran different configs are two experiments, not one mean.
    mixed = [{**r, "config": {"epochs": 30}} if r["seed"] < 2 else r for r in _records(GOOD)]
    code, report = _gate(tmp_path / "config", mixed)
    err = capsys.readouterr().err
    assert code == 2 and "its seeds ran different configs (epochs 3 (seed(s) 2,3,4) vs 30 (seed(s) 0,1))" in err
    assert "CANNOT DECIDE" in report and "PASS" not in report


def test_nan_and_huge_metrics(tmp_path, capsys):
    nan = _records(GOOD)
    text = json.dumps(nan[0]).replace(str(GOOD[0]), "NaN")  # a hand-made file: Python's json reads the literal
    write_records(tmp_path / "cand", nan[1:])
    (tmp_path / "cand" / f"{nan[0]['run_id']}.json").write_text(text)
    code, report = _gate(tmp_path, [])
    assert code == 1 and "non-finite accuracy on seed(s) 0" in report
    capsys.readouterr()
    huge = _records([1.7e308] * 5, version="0.2.0")
    assert _gate(tmp_path / "huge", huge)[0] == 2
    [err] = capsys.readouterr().err.splitlines()
    # the pages' words (harness.groups.too_large), naming the records of the side whose values overflow
    ids = sorted(r["run_id"] for r in huge)
    assert err.startswith("error: tiny / blobs / linear / infonce (") and (
        "): its accuracy values are too large to compute a mean or a test with; check the records' values (records "
        f"{ids[0]}, {ids[1]}, {ids[2]} and 2 more); wrote ") in err
    # Each side's mean can be computed, the paired differences' cannot: both sides' records are named.
    base, cand = _records([-6e307, -6e307]), _records([6e307, 7e307], version="0.2.0")
    assert _gate(tmp_path / "apart", cand, base=base)[0] == 2
    [err] = capsys.readouterr().err.splitlines()
    ids = sorted(r["run_id"] for r in base + cand)
    assert f"(records {ids[0]}, {ids[1]}, {ids[2]} and 1 more); wrote " in err
    # A difference itself too large for a float (it was a traceback from the statistics module): the same refusal.
    base, cand = _records([-9e307, -9e307]), _records([9e307, 9.5e307], version="0.2.0")
    assert _gate(tmp_path / "inf", cand, base=base)[0] == 2
    [err] = capsys.readouterr().err.splitlines()
    assert f"too large to compute a mean or a test with; check the records' values (records {ids[0]}, " in err


def test_a_rank_tests_p_never_goes_below_the_smallest_it_can_reach():
    change = compare_values({0: 1.0, 1: 1.0, 2: 1.0}, {0: 2.0, 1: 2.0, 2: 2.0}, "mannwhitney")
    assert change.p == change.min_p == 0.1
    change = compare_values({s: 1.0 for s in range(4)}, {s: 2.0 for s in range(4)}, "wilcoxon")
    assert change.p == change.min_p == 0.125



def test_copies_of_the_baselines_records_never_stand_in_for_the_candidates_own_code(tmp_path, capsys):
    """A candidate folder seeded with a copy of the baseline (to reuse its records), then run by a code committed
    before the baseline's: per group the copies were the candidate's newest code, so the baseline was compared with
    its own copies and passed, while the code that ran was 20 points down."""
    cand = _records(GOOD, software=NEW) + _records([v - 20 for v in GOOD], software=OLD)
    code, report = _gate(tmp_path, cand, base=_records(GOOD, software=NEW))
    assert code == 2 and "(copies in both folders), newer than the candidate's own code(s) aaaaaaa" in report
    assert "PASS" not in report and "of its own" in capsys.readouterr().err
    # Named, the candidate's code is judged.
    assert main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", f"{tmp_path / 'cand'}@aaaa"]) == 1
    # A rerun of the baseline's code (written at other times: no copy) is the candidate's newest code, and judged.
    rerun = _records([v - 20 for v in GOOD], software=NEW, finished_at="2026-11-27T00:00:00+00:00")
    code, report = _gate(tmp_path / "rerun", rerun + _records(GOOD, software=OLD), base=_records(GOOD, software=NEW))
    assert code == 1 and "Regressions (1)" in report
    # The candidate's records copied into the baseline's folder shadow the baseline's own code there.
    bad = _records([v - 20 for v in GOOD], software=NEW)
    code, report = _gate(tmp_path / "into-base", bad, base=_records(GOOD, software=OLD) + bad)
    assert code == 2 and "newer than the baseline's own code(s) aaaaaaa" in report and "PASS" not in report


def test_a_tag_and_a_branch_of_one_name_are_refused_not_read_as_the_tag(tmp_path, monkeypatch, capsys):
    """git reads a name that is a tag and a branch as the tag (its warning is quiet under --verify --quiet): the
    gate judged the tag's good commit while the branch, the code meant, was 20 points down."""
    git = git_repo(tmp_path / "repo")
    commits = []
    for step in ("one", "two"):
        git("commit", "-q", "--allow-empty", "-m", step)
        commits.append(git("rev-parse", "HEAD"))
    git("tag", "rel", commits[0])
    git("branch", "rel", commits[1])
    monkeypatch.setattr(version, "ROOT", tmp_path / "repo")  # the checkout whose refs the gate's names resolve in
    tagged = _records(GOOD, version="0.2.0", software={"git_commit": commits[0]})
    branch = _records([v - 20 for v in GOOD], version="0.3.0", software={"git_commit": commits[1]})
    write_records(tmp_path / "all", _records(GOOD) + tagged + branch)
    compare = ["compare", "--results", str(tmp_path / "all"), "--baseline", "0.1.0", "--candidate"]
    assert main([*compare, "rel"]) == 2
    err = capsys.readouterr().err
    assert "'rel' is ambiguous in git" in err and "refs/tags/rel" in err and "refs/heads/rel" in err
    assert main([*compare, "refs/heads/rel"]) == 1  # named in full: judged
    assert main([*compare, "refs/tags/rel"]) == 0
