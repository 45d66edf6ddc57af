"""``harness compare``: each test is a way the gate once exited 0 for a candidate that was worse (or for
results that were not one experiment), or misreported; every gate call here also checks that the
report's verdict line says what the exit status says."""

from __future__ import annotations

import json
import random

import pytest
from tiny_domain import synthetic_record, write_records

from harness.cli import main
from harness.stats import compare_values, min_p

GOOD = [85.9, 82.45, 86.6, 81.2, 80.9, 84.3]  # six seeds of an honest run (mean 83.56)
OLD = {"source_digest": "a" * 64, "git_commit": "a" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00"}
NEW = {"source_digest": "b" * 64, "git_commit": "b" * 40, "git_commit_date": "2026-11-26T09:00:00+00:00"}
VERDICT = {0: "**PASS", 1: "**FAIL", 2: "**CANNOT DECIDE"}


def _records(values: list[float], seeds: list[int] | None = None, **kw) -> list[dict]:
    seeds = list(range(len(values))) if seeds is None else seeds
    return [synthetic_record("infonce", s, v, **kw) for s, v in zip(seeds, values)]


def _compare(tmp_path, baseline: str, candidate: str, *extra: str) -> tuple[int, str]:
    """Exit status and report of ``harness compare``; the report's verdict line must agree with the status."""
    out = tmp_path / "report.md"
    code = main(["compare", "--baseline", baseline, "--candidate", candidate, "--out", str(out), *extra])
    report = out.read_text()
    verdicts = [line for line in report.splitlines() if line.startswith("**")]
    assert len(verdicts) == 1 and verdicts[0].startswith(VERDICT[code]), (code, verdicts)
    return code, report


def _gate(tmp_path, base: list[dict], cand: list[dict], *extra: str) -> tuple[int, str]:
    write_records(tmp_path / "base", base)
    write_records(tmp_path / "cand", cand)
    return _compare(tmp_path, str(tmp_path / "base"), str(tmp_path / "cand"), *extra)


@pytest.mark.parametrize("test", ["paired-t", "wilcoxon"])
def test_a_significant_paired_improvement_never_hides_the_collapse_of_the_seeds_it_leaves_out(tmp_path, test):
    """Every pair 3 points up (significant even for Wilcoxon at 6 pairs: p = 2/64), and 10 more seeds at chance
    level: over all 16 seeds the mean fell by 35 points. The gate passed it as an improvement."""
    cand = _records([v + 3 for v in GOOD]) + _records([25.0 + s / 10 for s in range(10)], seeds=list(range(6, 16)))
    code, report = _gate(tmp_path, _records(GOOD), cand, "--test", test)
    assert code == 2 and "## Improvements (0)" in report and "| infonce |" in report.split("## Untestable")[1]
    assert "over all seeds the mean changed by -35." in report


@pytest.mark.parametrize("test", ["paired-t", "wilcoxon"])
def test_a_paired_test_that_pairs_no_seed_still_sees_the_drop_the_seeds_show(tmp_path, test):
    """No seed in common: the paired test has no change to give. Its NaN read as 'no drop', so --allow-missing
    (which waives the absent seeds, not a drop) passed a candidate 58 points down."""
    cand = _records([25.0 + s / 10 for s in range(5)], seeds=list(range(10, 15)))
    code, report = _gate(tmp_path, _records(GOOD), cand, "--test", test, "--allow-missing")
    assert code == 2 and "show a drop worse than the tolerance that the test did not confirm" in report
    assert "seed(s) 10,11,12,13,14 have no baseline seed to pair with" in report and "changed by -58." in report
    assert "nan" not in report  # the paired test has no change to show: a dash
    assert _gate(tmp_path / "strict", _records(GOOD), cand, "--test", test)[0] == 1  # and missing without it


def test_a_folder_against_one_code_in_it_never_compares_records_with_themselves(tmp_path, capsys):
    """The folder's newest code per group is the named code: each group was compared with itself and passed."""
    folder = tmp_path / "all"
    write_records(folder, _records(GOOD, software=OLD) + _records([v - 20 for v in GOOD], software=NEW))
    code, report = _compare(tmp_path, str(folder), f"{folder}@bbbb")
    assert code == 2 and "## Within tolerance (0)" in report and "only as the baseline's own records" in report
    assert "of its own" in capsys.readouterr().err
    # Named the other way round, a group only the older code ran is not the candidate's: missing, not unchanged.
    write_records(folder, _records(GOOD, software=OLD, dataset="rings") + _records(GOOD, software=NEW, seeds=[6]))
    code, report = _compare(tmp_path, f"{folder}@aaaa", str(folder))
    missing = report.split("## Missing")[1].split("\n## ")[0]
    assert code == 1 and "tiny / rings /" in missing and "the candidate's code did not run it" in missing
    assert "| rings |" not in report.split("## Within tolerance")[1].split("\n## ")[0]


def test_a_side_whose_seeds_read_different_data_is_refused_not_averaged(tmp_path, capsys):
    base = [
        {**r, "data_fingerprint": {"dataset": "blobs", "sha256": "1" * 8 if r["seed"] < 3 else "2" * 8}}
        for r in _records(GOOD)
    ]
    code, report = _gate(tmp_path, base, _records(GOOD))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "mixes experiments in one group" in err
    assert 'its seeds read different data (sha256 "11111111" (seed(s) 0,1,2) vs "22222222" (seed(s) 3,4,5))' in err
    assert "CANNOT DECIDE" in report and "PASS" not in report


def test_an_error_never_leaves_an_earlier_verdict_at_out(tmp_path, capsys, monkeypatch):
    code, report = _gate(tmp_path, _records(GOOD), _records(GOOD))
    assert code == 0 and "**PASS" in report
    clash = {**_records([30.0])[0], "run_id": "a-second-record-of-seed-0"}
    write_records(tmp_path / "cand", [clash])
    args = ["compare", "--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "cand")]
    assert main([*args, "--out", str(tmp_path / "report.md")]) == 2
    report = (tmp_path / "report.md").read_text()
    assert "PASS" not in report and "**CANNOT DECIDE" in report and "different results for one seed" in report
    assert "different results for one seed" in capsys.readouterr().err
    # A crash (exit 1 through the CLI's traceback) says so too.
    (tmp_path / "cand" / "a-second-record-of-seed-0.json").unlink()
    assert main([*args, "--out", str(tmp_path / "report.md")]) == 0

    def crash(*_):
        raise RuntimeError("planted")

    monkeypatch.setattr("harness.compare.judge", crash)
    with pytest.raises(RuntimeError):
        main([*args, "--out", str(tmp_path / "report.md")])
    assert "**FAIL: the comparison crashed.** error: RuntimeError: planted" in (tmp_path / "report.md").read_text()


def test_rank_tests_at_many_seeds():
    """The smallest reachable p at 1,100 pairs (2.0 / 2**1100) and at 600 seeds a side (a float of C(1200, 600))
    overflowed, and the gate then blamed the metrics as 'too large'; the exact Mann-Whitney distribution at
    hundreds of seeds a side took seconds to minutes. Small counts keep their exact floors; past 100 pairs the
    Wilcoxon test's floor is its normal approximation's p at the same sign on every pair (3e-67 here, not 2/2^300)."""
    assert min_p("wilcoxon", 1100, 1100, 1100) == 0.0 and min_p("mannwhitney", 600, 600, 0) == 0.0
    assert min_p("wilcoxon", 5, 5, 5) == 1 / 16 and min_p("mannwhitney", 3, 3, 0) == 0.1
    base = {s: 80.0 + (s * 37 % 101) / 50 for s in range(300)}
    cand = {s: v - 0.5 for s, v in base.items()}
    for test in ("wilcoxon", "mannwhitney"):
        change = compare_values(base, cand, test)
        assert change.change == pytest.approx(-0.5) and change.p < 0.05 and change.min_p < 1e-60


def _section(report: str, title: str) -> str:
    return report.split(f"## {title}")[1].split("\n## ")[0]


def test_a_baseline_group_without_a_finite_value_judges_nothing_so_the_gate_cannot_decide(tmp_path):
    """A baseline that diverged on every seed was "missing" (1), and --allow-missing passed it: it is the baseline
    that lacks a value, and a gate with nothing to judge the candidate by cannot decide, waived or not."""
    base = _records(GOOD)
    for record in base:
        record["metrics"]["accuracy"] = None
    for n, extra in enumerate([[], ["--allow-missing", "--allow-untestable"]]):
        code, report = _gate(tmp_path / str(n), base, _records(GOOD), *extra)
        assert code == 2, extra
        assert "its code 0.1.0 gave a non-finite accuracy on seed(s) 0,1,2,3,4,5; nothing to compare with" in _section(
            report, "Unjudged")


def test_a_baseline_group_that_only_failed_is_named_and_judges_nothing(tmp_path, capsys):
    """A group whose newest baseline code only failed has no completed record: it vanished from the baseline, the
    candidate's group was listed as added, and the gate passed with nothing compared to it."""
    held = [synthetic_record("dcl", s, v) for s, v in enumerate(GOOD)]  # another group, compared and held
    crashed = [synthetic_record("infonce", s, 0.0, status="failed", software=NEW) for s in range(3)]
    base = _records(GOOD, software=OLD) + crashed + held  # an older code completed it, the newest failed
    code, report = _gate(tmp_path, base, _records([v - 30 for v in GOOD]) + held)
    assert code == 2 and "PASS" not in report and "## Added in the candidate, not in the baseline (0)" in report
    assert "tiny / blobs / linear / infonce (–, quick): the baseline has no finite accuracy: its code bbbbbbb " \
        "failed on seed(s) 0,1,2; nothing to compare with" in _section(report, "Unjudged")
    assert "the baseline failed or diverged on every seed of 1 group(s)" in capsys.readouterr().err
    code, _ = _gate(tmp_path / "waived", base, _records([v - 30 for v in GOOD]) + held, "--allow-missing",
                    "--allow-untestable")
    assert code == 2
    # A failure elsewhere still fails: the gate cannot decide this group, and knows another regressed.
    dropped = [synthetic_record("dcl", s, v - 40) for s, v in enumerate(GOOD)]
    code, report = _gate(tmp_path / "other", base, _records(GOOD) + dropped)
    assert code == 1 and "Regressions (1)" in report and "Unjudged: " in report


def test_a_group_both_sides_only_failed_fails_the_gate(tmp_path):
    """Failed on both sides, the group vanished from both: the gate passed while the candidate's code crashed."""
    held = [synthetic_record("dcl", s, v) for s, v in enumerate(GOOD)]
    crashed = [synthetic_record("infonce", s, 0.0, status="failed") for s in range(3)]
    for n, extra in enumerate([[], ["--allow-missing"]]):
        code, report = _gate(tmp_path / str(n), crashed + held, crashed + held, *extra)
        assert code == 1 and "1 with seeds the candidate failed or diverged on: never waived" in report, extra
        assert "its code 0.1.0 failed on seed(s) 0,1,2; nothing to compare with; the candidate: failed on seed(s) " \
            "0,1,2" in _section(report, "Missing")
    diverged = [synthetic_record("infonce", s, 0.0) for s in range(3)]
    for record in diverged:
        record["metrics"]["accuracy"] = None
    code, report = _gate(tmp_path / "nan", crashed + held, diverged + held, "--allow-missing")
    assert code == 1 and "the candidate: gave a non-finite accuracy on seed(s) 0,1,2" in report


def test_the_report_names_the_seeds_a_baseline_failed_or_diverged_on(tmp_path):
    """A baseline that failed on some seeds was compared on the others with no word of why its n was short."""
    base = _records(GOOD[:3]) + [synthetic_record("infonce", s, 0.0, status="failed") for s in (3, 4)]
    base[2]["metrics"]["accuracy"] = None
    code, report = _gate(tmp_path, base, _records(GOOD[:5]))
    assert code == 0 and "| 84.18 (2) |" in report
    assert "- tiny / blobs / linear / infonce (–, quick): the baseline: its code 0.1.0 failed on seed(s) 3,4 and " \
        "gave a non-finite accuracy on seed(s) 2; compared on its other seed(s) 0,1" in _section(report, "Notes")


def test_an_added_group_the_candidate_failed_or_diverged_on_is_listed_as_such(tmp_path):
    """Added groups gate nothing, but one whose every seed failed holds no completed record: it vanished from the
    report ("Added (0)"), and one that diverged was listed like a new result."""
    crashed = [synthetic_record("dcl", s, 0.0, status="failed") for s in range(2)]
    diverged = _records([0.0, 0.0], dataset="rings")
    diverged[1]["metrics"]["accuracy"] = None
    code, report = _gate(tmp_path, _records(GOOD), _records(GOOD) + crashed + diverged)
    added = _section(report, "Added in the candidate")
    assert code == 0 and "## Added in the candidate, not in the baseline (2)" in report
    assert "- tiny / blobs / linear / dcl (–, quick): failed on seed(s) 0,1 (no baseline: not gated)" in added
    assert "- tiny / rings / linear / infonce (–, quick): gave a non-finite accuracy on seed(s) 1 (no baseline" in added


def test_a_folder_whose_name_holds_an_at_sign_is_that_folder(tmp_path, capsys):
    write_records(tmp_path / "runs@v1", _records(GOOD))
    write_records(tmp_path / "cand", _records([v - 5 for v in GOOD]))
    code, _ = _compare(tmp_path, str(tmp_path / "runs@v1"), str(tmp_path / "cand"))
    assert code == 1
    (tmp_path / "runs").mkdir()  # now it also reads as the folder 'runs' and the name 'v1'
    assert main(["compare", "--baseline", str(tmp_path / "runs@v1"), "--candidate", str(tmp_path / "cand")]) == 2
    assert "is ambiguous: it is a folder, and also the folder" in capsys.readouterr().err


def test_a_lower_is_better_metric_is_gated_in_its_own_direction(tmp_path):
    lower = {"metric": "error", "higher_is_better": False}
    base = _records([10.0, 10.4, 9.8, 10.1, 9.9, 10.2], **lower)
    worse = _records([v + 3 for v in [10.0, 10.4, 9.8, 10.1, 9.9, 10.2]], **lower)
    better = _records([v - 3 for v in [10.0, 10.4, 9.8, 10.1, 9.9, 10.2]], **lower)
    code, report = _gate(tmp_path / "worse", base, worse)
    assert code == 1 and "| error (↓) |" in report.split("## Regressions (1)")[1]
    code, report = _gate(tmp_path / "better", base, better)
    assert code == 0 and "## Improvements (1)" in report
    code, _ = _gate(tmp_path / "one", base, _records([14.0], **lower), "--allow-missing")
    assert code == 2  # one seed, 4 points worse: untestable, not passed
    code, _ = _gate(tmp_path / "tolerated", base, worse, "--tolerance", "3.5")
    assert code == 0


def test_a_copy_of_the_baselines_records_in_another_folder_is_compared_not_refused(tmp_path):
    """A copy of the baseline's records in another folder is the same code's result (a rerun would be bit for bit
    on the same machine): compared, not refused, and it passes as unchanged."""
    base = _records(GOOD)
    write_records(tmp_path / "copy", [json.loads(json.dumps(r)) for r in base])
    write_records(tmp_path / "base", base)
    code, report = _compare(tmp_path, str(tmp_path / "base"), str(tmp_path / "copy"))
    assert code == 0 and "## Within tolerance (1)" in report


def test_two_codes_that_cannot_be_ordered_are_refused_not_chosen_by_digest(tmp_path, capsys):
    """Two edited trees of one commit whose runs finished in the same second: the digests' alphabetical order chose
    the side's result ("f..." over "0..."), and the gate passed the good tree while the bad one was as new."""
    tree = {"git_commit": "c" * 40, "git_commit_date": "2026-11-26T08:00:00+00:00", "git_dirty": True}
    same = {"version": "0.2.dev1+gccc.d20261126", "finished_at": "2026-11-26T09:00:00+00:00"}
    good = _records(GOOD, software={**tree, "source_digest": "f" * 64}, **same)
    bad = _records([v - 20 for v in GOOD], software={**tree, "source_digest": "0" * 64}, **same)
    code, report = _gate(tmp_path, _records(GOOD), good + bad)
    err = capsys.readouterr().err
    assert code == 2 and "which code is newest cannot be told" in err and "000000000000, ffffffffffff" in err
    write_records(tmp_path / "cand", [])
    assert _compare(tmp_path, str(tmp_path / "base"), f"{tmp_path / 'cand'}@0000")[0] == 1  # named: judged


def test_a_candidate_whose_every_run_failed_fails_the_gate(tmp_path):
    """It exited 2 ('no completed records', as for bad input); every run of the candidate crashing is a failure."""
    failed = [synthetic_record("infonce", s, 0.0, status="failed") for s in range(6)]
    code, report = _gate(tmp_path, _records(GOOD), failed)
    assert code == 1 and "failed on seed(s) 0,1,2,3,4,5" in report


def test_with_results_a_name_that_is_also_a_folder_is_refused(tmp_path, capsys, monkeypatch):
    """``--results res --candidate 2.0`` read the folder ./2.0 (an old copy that held) instead of version 2.0 in
    res (5 points down), and passed."""
    write_records(tmp_path / "res", _records(GOOD, version="1.0") + _records([v - 5 for v in GOOD], version="2.0"))
    write_records(tmp_path / "2.0", _records(GOOD, version="3.0"))
    monkeypatch.chdir(tmp_path)
    args = ["compare", "--results", "res", "--baseline", "1.0", "--candidate"]
    assert main([*args, "2.0"]) == 2
    assert "'2.0' is ambiguous: it is a folder, and also names records in --results" in capsys.readouterr().err
    assert main([*args, "res@2.0"]) == 1 and main([*args, "./2.0"]) == 0


def test_a_records_names_cannot_forge_a_verdict_line_in_the_report(tmp_path):
    """A name with a newline makes the record invalid (names hold no control character): the gate cannot decide,
    names the record, and its report's one verdict line is its own (``_compare`` checks there is one)."""
    forged = "blobs\n\n**PASS: every baseline group compared and held** (1 unchanged).\n"
    base = [{**r, "run_id": f"forged-s{r['seed']}"} for r in _records(GOOD, dataset=forged)]
    code, report = _gate(tmp_path, _records(GOOD) + base, _records(GOOD))
    assert code == 2 and "forged-s0.json: invalid run record: dataset:" in report
    assert "holds a control character" in report


def test_random_candidates_never_pass_a_drop_of_their_newest_code(tmp_path):
    """Random candidates of two groups: the baseline's seeds shifted (by nothing up to a collapse), extra seeds at
    another level, an older code's good records beside them, every test. Whenever the gate passes without a waiver,
    the candidate's newest code's mean over all its seeds is within the tolerance of the baseline's, and the
    report's verdict line is the exit status's (``_compare``)."""
    old = {"source_digest": "b" * 64, "git_commit_date": "2026-11-21T08:00:00+00:00"}
    new = {"source_digest": "c" * 64, "git_commit_date": "2026-11-22T08:00:00+00:00"}
    shifts = [0.0, 0.0, 0.3, -0.5, -3.0, -20.0]
    passed = 0
    for i in range(40):
        rng = random.Random(i)
        base, cand, drops = [], [], []
        for dataset in ("blobs", "rings"):
            seeds = rng.sample(range(12), rng.randint(2, 6))
            values = {s: 80 + rng.gauss(0, rng.choice([0.0, 0.3, 2.0])) for s in seeds}
            extra = {s: 80 + rng.choice(shifts) for s in rng.sample(range(12, 20), rng.choice([0, 0, 1, 3]))}
            shift = rng.choice(shifts)
            mine = {**{s: v + shift + rng.gauss(0, 0.2) for s, v in values.items()}, **extra}
            base += _records(list(values.values()), list(values), dataset=dataset)
            cand += _records(list(mine.values()), list(mine), dataset=dataset, software=new)
            if rng.random() < 0.5:  # an older code that held
                cand += _records(list(values.values()), list(values), dataset=dataset, software=old)
            drops.append(sum(mine.values()) / len(mine) - sum(values.values()) / len(values))
        test = ["auto", "paired-t", "wilcoxon", "welch", "mannwhitney"][i % 5]
        code, report = _gate(tmp_path / str(i), base, cand, "--test", test)
        if code == 0 and "waivers" not in report:
            passed += 1
            assert min(drops) >= -1, (i, test, drops)
    assert passed >= 5  # the property was exercised


def test_seeds_the_candidate_failed_or_diverged_on_are_never_waived_as_missing(tmp_path):
    """A candidate whose every seed gave NaN, or crashed, passed with --allow-missing, as if its seeds had not run:
    a seed that ran and failed or diverged is the candidate code's failure."""
    cand = _records([float("nan")] * len(GOOD))
    for extra in ((), ("--allow-missing",), ("--allow-missing", "--allow-untestable")):
        code, report = _gate(tmp_path / "-".join(extra or ("plain",)), _records(GOOD), cand, *extra)
        assert code == 1 and "1 with seeds the candidate failed or diverged on: never waived" in report, extra
    # one seed of six diverged: the same, the other five do not make up for it
    code, report = _gate(tmp_path / "one", _records(GOOD), _records([*GOOD[:5], float("inf")]), "--allow-missing")
    assert code == 1 and "1 with seeds the candidate failed or diverged on" in report
    # every seed crashed
    crashed = _records(GOOD, status="failed")
    code, report = _gate(tmp_path / "crashed", _records(GOOD), crashed, "--allow-missing")
    assert code == 1 and "1 with seeds the candidate failed or diverged on" in report
    # seeds the candidate did not run at all are still waivable
    code, report = _gate(tmp_path / "absent", _records(GOOD), _records(GOOD[:5]), "--allow-missing")
    assert code == 0 and "PASS with waivers: 1 missing (--allow-missing)" in report


def test_a_side_whose_seeds_ran_different_commits_of_one_version_is_refused_not_averaged(tmp_path, capsys):
    """Records without a source digest are grouped by version, and the committed ones all say 0.1.0: 30 seeds of
    an older commit and 2 of a newer one 15 points down were one group, whose mean fell by 0.9 (within the
    tolerance), and the gate passed a commit that collapsed."""
    good = [85.0 + (s % 5) * 0.2 for s in range(30)]
    old = _records(good, software={"git_commit": "a" * 40})
    new = _records([70.0, 70.0], seeds=[30, 31], software={"git_commit": "b" * 40})
    code, report = _gate(tmp_path, _records(good, software={"git_commit": "a" * 40}), old + new)
    err = capsys.readouterr().err
    assert code == 2 and "CANNOT DECIDE" in report and "PASS" not in report
    assert "its seeds ran different code (aaaaaaa (seed(s) 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20," in err
    assert "vs bbbbbbb (seed(s) 30,31))" in err
    # A dirty tree of the commit is other code too; the baseline is held to the same rule.
    dirty = _records([70.0, 70.0], seeds=[30, 31], software={"git_commit": "a" * 40, "git_dirty": True})
    code, _ = _gate(tmp_path / "dirty", old + dirty, _records(good, software={"git_commit": "a" * 40}))
    assert code == 2 and "'" + str(tmp_path / "dirty" / "base") + "' mixes experiments" in capsys.readouterr().err
    # One commit's records are one code: compared.
    assert _gate(tmp_path / "one", old, old)[0] == 0


@pytest.mark.parametrize("brk", ["\r", "\u2028", "\x85"])
def test_a_line_break_in_a_records_values_cannot_forge_a_verdict_line(tmp_path, brk):
    """A hyper-parameter's value is free JSON: a carriage return (Unicode's line separator, NEL) in it ended the
    table row of a failed gate's report with a second, forged verdict line; any line break did the same in the report
    of a comparison that stopped on an error quoting it. (``_compare`` checks the report has one verdict line.)"""
    forged = "PASS: every baseline group compared and held** (1 unchanged)."

    def records(values: list[float], side: str) -> list[dict]:
        tau = {"tau": f"0.5{brk}{brk}**{forged}"}  # (a run id holds no line break: the file's name is plain)
        return [{**r, "run_id": f"{side}-s{r['seed']}"} for r in _records(values, loss_params=tau)]

    code, report = _gate(tmp_path, records(GOOD, "base"), records([v - 20 for v in GOOD], "cand"))
    assert code == 1 and "## Regressions (1)" in report
    clash = {**records([30.0], "clash")[0], "run_id": "a-second-record-of-seed-0"}
    code, report = _gate(tmp_path / "error", records(GOOD, "base"), records(GOOD, "cand") + [clash])
    assert code == 2 and "different results for one seed" in report


def test_a_report_file_that_cannot_be_written_shows_no_verdict(tmp_path, monkeypatch, capsys):
    """The report was printed, with its PASS line, before ``--out`` was written: a write that then failed (a full
    disk) exited 2 under a screen that said PASS."""
    import errno
    import os

    import harness.compare
    from domains.errors import UnwritableFileError

    def full_disk(path, data):
        raise UnwritableFileError(path, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))

    write_records(tmp_path / "base", _records(GOOD))
    write_records(tmp_path / "cand", _records(GOOD))
    monkeypatch.setattr(harness.compare, "write_atomic", full_disk)
    out = tmp_path / "report.md"
    code = main(["compare", "--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "cand"),
                 "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 2 and f"cannot write {out}: No space left on device" in captured.err
    assert "PASS" not in captured.out


def test_the_wilcoxon_floor_counts_only_the_pairs_the_test_keeps():
    """scipy's Wilcoxon test leaves out pairs whose difference is 0: six pairs with one tie reach p = 2/2^5, not
    2/2^6, so a group that cannot reach 0.05 was counted as one the gate could decide."""
    base = {s: float(s) for s in range(6)}
    cand = {0: 0.0, **{s: s + 1.0 for s in range(1, 6)}}  # one zero difference, five equal shifts
    change = compare_values(base, cand, "wilcoxon")
    assert change.min_p == 1 / 16 and change.p >= change.min_p


def test_mann_whitney_with_ties_counts_every_split_of_the_seeds():
    """scipy's exact Mann-Whitney distribution ignores ties: [2, 3, 3, 3] against [1, 1, 2, 2] gave p = 0.057.
    Counting the 70 splits of the eight values by hand, 6 give a U at least as far from its mean: p = 6/70."""
    import itertools

    a, b = [1.0, 1.0, 2.0, 2.0], [2.0, 3.0, 3.0, 3.0]
    values = a + b

    def u(x: list[float], y: list[float]) -> float:
        return sum(1.0 if xi > yi else 0.5 if xi == yi else 0.0 for xi in x for yi in y)

    observed = abs(u(b, a) - 8)
    splits = list(itertools.combinations(range(8), 4))
    extreme = sum(abs(u([values[i] for i in s], [values[i] for i in range(8) if i not in s]) - 8) >= observed - 1e-12
                  for s in splits)
    change = compare_values(dict(enumerate(a)), {s + 10: v for s, v in enumerate(b)}, "mannwhitney")
    assert change.p == pytest.approx(extreme / len(splits)) == pytest.approx(6 / 70)


def test_a_p_value_is_never_printed_on_the_other_side_of_alpha():
    """history.md printed an adjusted p of 0.049996 as 0.05 beside its step mark (p < 0.05)."""
    from harness.stats import p_text

    assert p_text(0.049996) == "0.049996" and p_text(0.12345) == "0.123" and p_text(0.0500004) == "0.05"
    assert p_text(0.0099999, alpha=0.01) == "0.0099999" and p_text(float("nan")) == "–"


def test_mann_whitney_with_ties_past_the_enumeration_cap_takes_the_normal_approximation():
    """Every split of 3 against 100 seeds (176,851 splits of 103 values) held 1.3 GB at once; past
    PERMUTATION_VALUES_MAX the test takes scipy's tie-corrected normal approximation."""
    from scipy import stats

    base = {s: float(s % 4) for s in range(100)}
    cand = {s + 1000: v for s, v in enumerate([2.0, 3.0, 3.0])}
    change = compare_values(base, cand, "mannwhitney")
    expected = stats.mannwhitneyu(list(cand.values()), list(base.values()), method="asymptotic").pvalue
    assert change.p == pytest.approx(expected)
