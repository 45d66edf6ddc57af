"""``harness compare``: a planted regression exits 1, equal results exit 0; folders and versions."""

from __future__ import annotations

from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main

BASE = {"infonce": [80.0, 81.0, 82.0, 81.5], "dcl": [85.0, 86.0, 85.5, 85.2]}
DCL = {"tau_plus": 0.1}


def _records(values: dict[str, list[float]], version: str = "0.1.0") -> list[dict]:
    return [synthetic_record(loss, seed, v, version=version, loss_params=DCL if loss == "dcl" else None)
            for loss, vs in values.items() for seed, v in enumerate(vs)]


def test_planted_regression_exits_1(tmp_path):
    write_records(tmp_path / "a", _records(BASE))
    worse = {"infonce": BASE["infonce"], "dcl": [80.0, 80.5, 79.8, 80.2]}
    write_records(tmp_path / "b", _records(worse) + [synthetic_record("pucl", 0, 70.0)])
    out = harness("compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b"),
                  "--out", str(tmp_path / "report.md"))
    assert out.returncode == 1, out.stderr
    text = (tmp_path / "report.md").read_text()
    assert text in out.stdout
    regressions = text.split("## Regressions (1)")[1].split("## Improvements")[0]
    assert "| dcl | tau_plus=0.1 |" in regressions and "-5.30" in regressions
    assert "## Unchanged (1)" in text and "| candidate only | tiny | blobs | linear | pucl |" in text
    assert "worse than the baseline's by more than 1 " in text and "Welch t-test" in text
    assert "FAIL: 1 regression(s)" in text


def test_equal_results_exit_0(tmp_path, capsys):
    write_records(tmp_path / "a", _records(BASE))
    write_records(tmp_path / "b", _records(BASE))
    assert main(["compare", "--baseline", str(tmp_path / "a"), "--candidate", str(tmp_path / "b")]) == 0
    assert "**PASS: no regression** (2 matched groups, 0 improvement(s))" in capsys.readouterr().out


def test_versions_in_one_folder_tolerance_and_mann_whitney(tmp_path, capsys):
    better = {"infonce": BASE["infonce"], "dcl": [86.0, 87.0, 86.5, 86.2]}  # +1.0 on dcl: at the tolerance
    write_records(tmp_path, _records(BASE, "0.1.0") + _records(better, "0.2.0"))
    assert main(["compare", "--results", str(tmp_path), "--baseline", "0.1.0", "--candidate", "0.2.0"]) == 0
    assert "## Improvements (0)" in capsys.readouterr().out  # a change of exactly the tolerance is not counted
    args = ["compare", "--results", str(tmp_path), "--baseline", "0.2.0", "--candidate", "0.1.0"]
    assert main([*args, "--tolerance", "0.5"]) == 1
    assert main([*args, "--tolerance", "0.5", "--test", "mannwhitney"]) == 1  # 4 vs 4 seeds: p = 2/70
    assert "Mann-Whitney U" in capsys.readouterr().out
    assert main([*args[:-4], "--baseline", "0.3.0", "--candidate", "0.1.0"]) == 2
    assert "present: 0.1.0, 0.2.0" in capsys.readouterr().err
