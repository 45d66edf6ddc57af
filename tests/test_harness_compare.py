"""``harness compare`` as a CI gate: planted regressions at 1, 3 and 10 seeds, mixed code, changed settings, NaN
and failed seeds, versions and commits by name, the correction for many groups, and honest reruns that pass."""

from __future__ import annotations

import math
import random

import pytest
from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main
from harness.stats import adjust, compare_values, detectable, min_p

DCL = {"tau_plus": 0.1}


def _group(loss: str, values: list[float], version: str = "0.1.0", seeds: list[int] | None = None, **kw) -> list[dict]:
    seeds = list(range(len(values))) if seeds is None else seeds
    params = DCL if loss == "dcl" else None
    return [synthetic_record(loss, s, v, version=version, loss_params=params, **kw) for s, v in zip(seeds, values)]


def _noisy(mean: float, n: int, seed: int, sd: float = 0.5) -> list[float]:
    rng = random.Random(seed)
    return [mean + rng.gauss(0, sd) for _ in range(n)]


def _compare(tmp_path, base: list[dict], cand: list[dict], *extra: str) -> tuple[int, str]:
    """``harness compare`` of two folders (in-process: the CLI's parser and exit codes), and its report."""
    for side in ("a", "b"):
        for old in (tmp_path / side).glob("*.json"):
            old.unlink()
    write_records(tmp_path / "a", base)
    write_records(tmp_path / "b", cand)
    code = main(["compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"),
                 "--out", str(tmp_path / "report.md"), *extra])
    return code, (tmp_path / "report.md").read_text()


def _section(report: str, title: str) -> str:
    return report.split(f"## {title}")[1].split("\n## ")[0]


def test_a_planted_regression_at_10_seeds_fails_with_its_interval_and_effect(tmp_path):
    base = _group("infonce", _noisy(80, 10, 0)) + _group("dcl", _noisy(85, 10, 1))
    cand = _group("infonce", _noisy(80, 10, 0)) + _group("dcl", [v - 5 for v in _noisy(85, 10, 1)])
    code, report = _compare(tmp_path, base, cand)
    assert code == 1
    regressions = _section(report, "Regressions (1)")
    assert "| dcl | tau_plus=0.1 |" in regressions and "-5.00 [-5.00, -5.00]" in regressions
    assert "paired-t, 10 pairs" in regressions
    assert "## Within tolerance (1)" in report and "Holm" in report and "FAIL: 1 regression(s)" in report


def test_a_planted_regression_at_3_seeds_fails_with_the_default_test(tmp_path):
    write_records(tmp_path / "a", _group("dcl", [85.0, 86.0, 85.5]))
    write_records(tmp_path / "b", _group("dcl", [80.1, 80.8, 80.6]))  # paired: the drop differs a little per seed
    out = harness("compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"))
    assert out.returncode == 1 and "## Regressions (1)" in out.stdout


def test_mann_whitney_at_3_seeds_cannot_decide_so_a_drop_is_untestable_not_unchanged(tmp_path):
    assert min_p("mannwhitney", 3, 3, 0) == pytest.approx(0.1)
    base, cand = _group("dcl", [85.0, 86.0, 85.5]), _group("dcl", [80.1, 80.8, 80.6])
    code, report = _compare(tmp_path, base, cand, "--test", "mannwhitney")
    assert code == 2 and "## Untestable: drops worse than the tolerance that the test did not confirm (1)" in report
    assert "## Within tolerance (0)" in report and "0.1 |" in report  # the minimum p is shown
    code, _ = _compare(tmp_path, base, cand, "--test", "mannwhitney", "--allow-untestable")
    assert code == 0


def test_a_one_seed_group_never_passes_a_drop(tmp_path):
    code, report = _compare(tmp_path, _group("dcl", [85.0]), _group("dcl", [65.0]))
    assert code == 2 and "## Untestable: drops worse than the tolerance that the test did not confirm (1)" in report
    assert "CANNOT DECIDE" in report and "-20.00" in report
    # Within the tolerance it is listed as untested, not unchanged, and passes.
    code, report = _compare(tmp_path, _group("dcl", [85.0]), _group("dcl", [84.5]))
    assert code == 0 and "## Untested" in report and "## Within tolerance (0)" in report


def test_failed_nonfinite_and_vanished_seeds_and_groups_fail_the_gate(tmp_path):
    base = _group("infonce", [80.0, 81.0, 82.0]) + _group("dcl", [85.0, 86.0, 85.5]) + _group("hcl", [84.0, 84.5])
    cand = (_group("infonce", [80.0, 81.0]) + _group("dcl", [85.1, 86.0, 85.4])
            + [synthetic_record("dcl", 2, 0.0, loss_params=DCL, status="failed")])
    cand[-2]["metrics"]["accuracy"] = None  # seed 2 of dcl: a completed record with a NaN metric
    cand[-2]["run_id"] += "-nan"
    code, report = _compare(tmp_path, base, cand)
    assert code == 1
    missing = _section(report, "Missing, failed or non-finite in the candidate (3)")
    assert "seed(s) 2 of the baseline not run" in missing  # infonce
    assert "non-finite accuracy on seed(s) 2" in missing  # dcl
    assert "hcl" in missing and "not in the candidate" in missing
    code, report = _compare(tmp_path, base, cand, "--allow-missing")  # waives absent seeds, not a divergence
    assert code == 1 and "1 with seeds the candidate failed or diverged on: never waived" in report
    code, report = _compare(tmp_path, base, cand[:-2] + cand[-1:], "--allow-missing")  # dcl seed 2 failed only
    assert code == 1 and "1 with seeds the candidate failed or diverged on: never waived" in report
    code, _ = _compare(tmp_path, base, cand[:-3], "--allow-missing")  # dcl seed 2 not run: waived
    assert code == 0


def test_changed_settings_show_removed_added_and_config_differences(tmp_path):
    base = _group("dcl", [85.0, 86.0, 85.5], config={"epochs": 3, "knn_t": 0.1})
    # The same command whose resolved config changed (a default), and a group run with another override.
    cand = (_group("dcl", [85.0, 86.0, 85.5], config={"epochs": 3, "knn_t": 0.07})
            + _group("infonce", [80.0, 81.0], overrides={"epochs": 5}))
    code, report = _compare(tmp_path, base + _group("infonce", [80.0, 81.0]), cand)
    assert code == 1
    differences = _section(report, "Config differences of matched groups")
    assert "knn_t: 0.1 → 0.07" in differences
    # The group is named as in every other section of the report: with its setting (preset and budget)
    assert differences.count("- tiny / blobs / linear / dcl (") == 1 and ", quick" in differences
    assert "not in the candidate" in _section(report, "Missing")  # the removed setting (infonce, quick)
    assert "| infonce |" in _section(report, "Added in the candidate")


def test_two_honest_reruns_of_many_groups_pass(tmp_path):
    """30 groups rerun with fresh noise: without the correction some would 'regress' by chance."""
    losses = [f"l{i}" for i in range(30)]
    base = [r for i, loss in enumerate(losses) for r in _group(loss, _noisy(80, 5, i, sd=1.5))]
    cand = [r for i, loss in enumerate(losses) for r in _group(loss, _noisy(80, 5, 100 + i, sd=1.5))]
    code, report = _compare(tmp_path, base, cand, "--tolerance", "3")
    assert code == 0, report
    assert "## Within tolerance (30)" in report
    # A tolerance of 0 calls every drop a change: no group regresses (the correction), but the seeds' noise shows
    # drops the test can neither confirm nor rule out, so the gate cannot decide rather than pass them.
    code, report = _compare(tmp_path, base, cand, "--tolerance", "0")
    assert code == 2 and "## Regressions (0)" in report and "CANNOT DECIDE" in report


def test_a_drop_the_seeds_show_but_the_test_cannot_confirm_is_never_unchanged(tmp_path):
    """Two seeds, each 10 points down: the paired t-test on 1 degree of freedom gives p = 0.064, short of 0.05. The
    drop is ten times the tolerance, so the gate cannot decide (exit 2) rather than pass it as unchanged."""
    base, cand = _group("dcl", [85.0, 86.0]), _group("dcl", [76.0, 75.0])
    code, report = _compare(tmp_path, base, cand)
    section = _section(report, "Untestable: drops worse than the tolerance that the test did not confirm (1)")
    assert code == 2 and "-10.00" in section and "0.0635 (0.0635)" in section and "## Within tolerance (0)" in report
    assert "±12.71 | 1 |" in section  # the detectable change: t(0.975, 1) * se, se = 1
    # The same drop among 4 groups of 3 noisy seeds (rl-like: a 30 % drop of the return): Holm's correction leaves
    # it short of significance; still never a pass.
    others = [r for loss in ("l1", "l2", "l3") for r in _group(loss, [80.0, 81.0, 82.0])]
    base = _group("infonce", [205.0, 192.0, 180.0]) + others
    cand = _group("infonce", [128.0, 140.0, 135.0]) + others
    code, report = _compare(tmp_path, base, cand, "--tolerance", "25")
    assert code == 2 and "| infonce |" in _section(report, "Untestable")
    # With a tolerance above the drop it is within what the user said does not matter, and passes.
    code, report = _compare(tmp_path, base, cand, "--tolerance", "80")
    assert code == 0 and "## Within tolerance (4)" in report


def test_the_report_says_when_the_sides_ran_on_different_machines(tmp_path):
    def on(records: list[dict], **hardware: str) -> list[dict]:
        for r in records:
            r["hardware"] = {"torch": "2.14.1", "torch_threads": 1, **hardware}
        return records
    base = on(_group("dcl", [85.0, 86.0, 85.5]), cpu_capability="AVX512")
    code, report = _compare(tmp_path, base, on(_group("dcl", [85.0, 86.0, 85.5]), cpu_capability="AVX512"))
    assert code == 0 and "machines" not in report
    code, report = _compare(tmp_path, base, on(_group("dcl", [85.0, 86.0, 85.5]), cpu_capability="DEFAULT",
                                               cpu="AMD EPYC"))
    machines = _section(report, "Notes")
    assert code == 0 and "machines (the change holds theirs as well as the code's): paired seeds ran on different " \
        "cpu_capability: AVX512 → DEFAULT (seed(s) 0,1,2)" in machines
    assert "torch" not in machines and "EPYC" not in machines  # the same, or one side lacks it


def test_tolerances_per_domain_and_dataset(tmp_path):
    base = _group("dcl", [85.0, 86.0, 85.5]) + _group("infonce", [80.0, 81.0, 82.0], dataset="other")
    cand = _group("dcl", [83.0, 84.2, 83.4]) + _group("infonce", [78.0, 79.2, 79.9], dataset="other")
    domain = base[0]["domain"]
    code, report = _compare(tmp_path, base, cand)  # both drop about 2: beyond the default tolerance of 1
    assert code == 1 and "## Regressions (2)" in report
    code, report = _compare(tmp_path, base, cand, "--tolerance", f"{domain}=3")
    assert code == 0 and "## Within tolerance (2)" in report
    code, report = _compare(tmp_path, base, cand, "--tolerance", f"{domain}=3", "--tolerance", f"{domain}/other=0.5")
    assert code != 0 and "| infonce |" not in _section(report, "Within tolerance") and f"{domain}/other: 0.5" in report
    code = main(["compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"),
                 "--tolerance", "chemistry=3"])
    assert code == 2  # a selector that names no group would leave its groups at the default without a word


def test_mixed_code_uses_the_newest_code_so_a_drop_is_not_diluted(tmp_path):
    base = _group("dcl", _noisy(85, 7, 3), seeds=list(range(7)))
    old = _group("dcl", _noisy(85, 7, 3), software={"source_digest": "a" * 64, "git_commit_date": "2026-01-01"})
    new = _group("dcl", [v - 20 for v in _noisy(85, 3, 4)], seeds=[7, 8, 9],
                 software={"source_digest": "b" * 64, "git_commit_date": "2026-02-01"})
    code, report = _compare(tmp_path, base, old + new, "--allow-missing")
    regressions = _section(report, "Regressions (1)")
    assert code == 1 and "| – (0) |" not in regressions and "(3) |" in regressions  # only the 3 new seeds


def test_versions_and_commits_by_name_from_one_folder(tmp_path, capsys):
    a = _group("dcl", [85.0, 86.0, 85.5, 85.2], version="0.1.dev5+gaaaa", software={"git_commit": "a" * 40})
    b = _group("dcl", [80.0, 80.5, 79.8, 80.2], version="0.1.dev6+gbbbb", software={"git_commit": "b" * 40})
    write_records(tmp_path, a + b)
    args = ["compare", "--results", str(tmp_path)]
    assert main([*args, "--baseline", "0.1.dev5+gaaaa", "--candidate", "bbbbbbbb"]) == 1
    assert main([*args, "--baseline", "bbbb", "--candidate", "aaaa"]) == 0  # an improvement passes
    assert main(["compare", "--baseline", f"{tmp_path}@aaaa", "--candidate", f"{tmp_path}@bbbb"]) == 1
    capsys.readouterr()
    assert main([*args, "--baseline", "aaaa", "--candidate", "0.1.dev5+gaaaa"]) == 2  # the same records
    assert "the same 4 records" in capsys.readouterr().err
    assert main([*args, "--baseline", "0.3.0", "--candidate", "aaaa"]) == 2
    err = capsys.readouterr().err
    assert "present: versions 0.1.dev5+gaaaa, 0.1.dev6+gbbbb; commits aaaaaaaa, bbbbbbbb; source digests " in err
    assert "named by a prefix of its source digest" in err


@pytest.mark.parametrize("option", [["--alpha", "nan"], ["--alpha", "1.5"], ["--tolerance", "-1"],
                                    ["--tolerance", "inf"], ["--tolerance", "rl=x"], ["--tolerance", "/b=1"],
                                    ["--tolerance", "1", "--tolerance", "2"], ["--tolerance", "=1"], ["--out", "."]])
def test_every_option_is_validated_before_anything_is_read(tmp_path, option, capsys):
    missing = str(tmp_path / "absent")
    assert main(["compare", "--baseline", missing, "--candidate", missing, *option]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --") and err.count("\n") == 1


def test_a_dataset_whose_name_holds_a_slash_takes_its_own_tolerance(tmp_path):
    """A dataset may hold "/" (vision's hf:uoft-cs/cifar10): its DOMAIN/DATASET tolerance was refused as a selector
    of three parts, so the group could only take its domain's or the default."""
    records = []
    for side, values in (("a", [85.9, 82.45, 86.6, 81.2, 80.9]), ("b", [82.9, 79.45, 83.6, 78.2, 77.9])):
        for record in _group("infonce", values, dataset="hf:org/set"):  # 3 points down on every seed
            record["run_id"] = record["run_id"].replace("/", "_")
            records.append(record)
        write_records(tmp_path / side, records[-5:])
    compare = ("compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"), "--tolerance")
    out = harness(*compare, "tiny/hf:org/set=5")
    assert out.returncode == 0 and "PASS" in out.stdout, out.stdout + out.stderr
    out = harness(*compare, "5", "--tolerance", "tiny/hf:org/set=0.5")  # the dataset's, not the default
    assert out.returncode == 1 and "Regressions (1)" in out.stdout, out.stdout + out.stderr


def test_a_bad_choice_exits_2_through_the_cli(tmp_path):
    out = harness("compare", "--baseline", str(tmp_path), "--candidate", str(tmp_path), "--test", "ttest")
    assert out.returncode == 2 and "invalid choice: 'ttest'" in out.stderr and "Traceback" not in out.stderr


def test_the_statistics_against_known_answers():
    # Wilcoxon at n pairs cannot go below 2/2^n; the exact Mann-Whitney U at 4 vs 4 reaches 2/70.
    assert min_p("wilcoxon", 5, 5, 5) == pytest.approx(1 / 16)
    assert min_p("mannwhitney", 4, 4, 0) == pytest.approx(2 / 70)
    change = compare_values({0: 1.0, 1: 2.0, 2: 3.0, 3: 4.0}, {0: 2.0, 1: 4.0, 2: 3.0, 3: 6.0}, "paired-t")
    # differences 1, 2, 0, 2: mean 1.25, sd 0.9574, t = 2.611 on 3 df
    assert change.change == pytest.approx(1.25) and change.effect == pytest.approx(1.25 / 0.957427, rel=1e-5)
    assert change.p == pytest.approx(0.07955, abs=1e-4)
    # Holm on (0.01, 0.04, 0.03): 0.03, 0.06, 0.06
    assert adjust([0.01, 0.04, 0.03], "holm") == pytest.approx([0.03, 0.06, 0.06])
    # The detectable change: t(1 - level/2, 3) times the standard error 0.9574 / 2, t(0.975, 3) = 3.1824 from the
    # tables; at 0.05 / 4 (Holm, a lone group of 4) checked through Student's closed-form CDF on 3 degrees of
    # freedom, F(t) = 1/2 + (atan(x) + x / (1 + x^2)) / pi with x = t / sqrt(3).
    assert change.se == pytest.approx(0.957427 / 2, rel=1e-5) and change.df == 3
    assert detectable(change, 0.05) == pytest.approx(3.182446 * 0.478714, rel=1e-5)
    x = detectable(change, 0.0125) / change.se / math.sqrt(3)
    assert 0.5 + (math.atan(x) + x / (1 + x * x)) / math.pi == pytest.approx(1 - 0.0125 / 2, abs=1e-9)
    assert change.low == pytest.approx(change.change - detectable(change, 0.05))  # the interval's half-width
    # Welch: se = sqrt(va/na + vb/nb), the Welch-Satterthwaite df, as scipy's interval uses them.
    welch = compare_values({0: 1.0, 1: 2.0, 2: 4.0}, {3: 2.0, 4: 3.0, 5: 3.5, 6: 5.0}, "welch")
    assert welch.high - welch.change == pytest.approx(detectable(welch, 0.05))
    assert math.isnan(detectable(compare_values({0: 1.0, 1: 2.0}, {0: 2.0, 1: 4.0}, "wilcoxon"), 0.05))
