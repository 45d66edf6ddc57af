"""The regression suite: its file names a valid setting of every domain, the script's arguments, and (slow) the
whole gate end to end on the tiny domain: a new baseline, a passing run, a planted regression, a crashed run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_domain import REPO, harness_env, synthetic_record, write_records

import domains
from domains.errors import UserError
from harness.suites import SUITES, load_suite, suite_path
from harness.suites.__main__ import baseline_files
from harness.suites.__main__ import main as suite_main
from harness.version import source_digest

SCRIPT = REPO / "tools" / "regression-suite"


def script(*args: str, **env: str) -> subprocess.CompletedProcess:
    """``tools/regression-suite`` in a subprocess with this interpreter and the tiny domain plugged in."""
    return subprocess.run([str(SCRIPT), *args], cwd=REPO, env={**harness_env(), "PYTHON": sys.executable, **env},
                          capture_output=True, text=True, timeout=300)


def test_the_suite_names_a_regression_setting_of_every_domain():
    settings = load_suite(suite_path("regression"))
    assert sorted(s.domain for s in settings) == ["graph", "rl", "text", "vision"]
    for s in settings:
        domain = domains.get(s.domain)
        assert s.dataset == domain.default_dataset  # the embedded data: nothing to download in CI
        assert s.preset == "regression" and s.seeds == domain.presets["regression"].seeds
        assert len(s.seeds) >= 3
        assert s.loss in domain.accepted_losses(s.method)


@pytest.mark.parametrize("line, message", [
    ("graph infograph synthetic-motifs pucl regression 0-4", "expected 7 columns"),
    ("graph infograph synthetic-motifs pucl nightly 0-4 1", "no preset 'nightly'"),
    ("vision simclr cifar11 infonce regression 0-4 1", "no dataset 'cifar11'"),
    ("vision biased digits infonce regression 0-4 1", "takes the losses"),
    ("graph infograph synthetic-motifs pucl regression 4-0 1", "ends before it starts"),
    ("chemistry gnn qm9 infonce quick 0 1", "unknown domain 'chemistry'"),
    ("graph infograph synthetic-motifs pucl regression 0-4 -1", "the tolerance '-1' is not a finite number >= 0"),
    ("graph infograph synthetic-motifs pucl regression 0-4 epochs=3", "the tolerance 'epochs=3' is not a finite"),
])
def test_a_bad_line_names_its_file_and_line(tmp_path, line, message):
    path = tmp_path / "suite.txt"
    path.write_text(f"# a comment\n\ntext quickthought synthetic-topics dcl quick 0 1  # trailing comment\n{line}\n")
    with pytest.raises(UserError, match=message) as error:
        load_suite(path)
    assert str(error.value).startswith(f"{path}:4: ")


def test_two_tolerances_for_one_domain_and_dataset_are_refused(suite_in_process, tmp_path):
    suite = tmp_path / "suite.txt"
    suite.write_text("tiny linear blobs infonce quick 0-2 1\ntiny linear blobs dcl quick 0-2 2 loss.tau_plus=0.1\n")
    out = suite_in_process("--suite", str(suite), "--dry-run")
    assert out.returncode == 2 and "lines 1 and 2 give tiny/blobs two tolerances (1 and 2)" in out.stderr


def test_an_empty_or_absent_suite_is_refused(tmp_path):
    (tmp_path / "empty.txt").write_text("# nothing yet\n")
    with pytest.raises(UserError, match="lists no setting"):
        load_suite(tmp_path / "empty.txt")
    with pytest.raises(UserError, match=f"no suite file .*suites under {SUITES}: regression"):
        suite_path("nightly")


def test_dry_run_prints_one_run_per_seed_then_the_comparison(tmp_path):
    out = script("--dry-run", "--results", str(tmp_path / "r"), "--report", str(tmp_path / "report.md"))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    settings = load_suite(suite_path("regression"))
    assert len(lines) == sum(len(s.seeds) for s in settings) + 1
    first = settings[0]
    assert lines[0] == (f"OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 {sys.executable} -m harness run "
                        f"--domain {first.domain} --method {first.method} --dataset "
                        f"{first.dataset} --loss {first.loss} --preset regression --seeds {first.seeds[0]} "
                        f"--device cpu --results {tmp_path / 'r'} --quiet")
    tolerances = " ".join(f"--tolerance {s.domain}/{s.dataset}={s.tolerance:g}" for s in settings)
    assert lines[-1] == (f"{sys.executable} -m harness compare --baseline leaderboards/regression --candidate "
                         f"{tmp_path / 'r'}@{source_digest()} --out {tmp_path / 'report.md'} {tolerances}")
    assert not (tmp_path / "r").exists()


def test_dry_run_of_an_update_runs_beside_the_baseline_and_removes_nothing(suite_in_process, tmp_path):
    (tmp_path / "kept.json").write_text("{}")
    out = suite_in_process("--dry-run", "--update-baseline", "--baseline", str(tmp_path))
    assert out.returncode == 0, out.stderr
    new = tmp_path.parent / f".{tmp_path.name}-new-XXXXXX"  # the new baseline's folder, swapped in when complete
    assert all(f"--results {new} --quiet" in line for line in out.stdout.splitlines())
    assert "compare" not in out.stdout and (tmp_path / "kept.json").exists() and not new.exists()


def test_dry_run_of_one_domains_update_runs_only_its_settings(suite_in_process, tmp_path):
    out = suite_in_process("--dry-run", "--update-baseline", "--domain", "graph", "--baseline", str(tmp_path))
    assert out.returncode == 0, out.stderr
    graph = [s for s in load_suite(suite_path("regression")) if s.domain == "graph"]
    lines = out.stdout.splitlines()
    assert len(lines) == sum(len(s.seeds) for s in graph) and all(" --domain graph " in line for line in lines)


def test_one_domains_baseline_files_are_its_records_and_their_logs(tmp_path):
    """Two domains' committed baseline records side by side: only the graph one (and its log) is graph's."""
    baseline = REPO / "leaderboards" / "regression"
    for prefix in ("graph", "text"):
        record = sorted(baseline.glob(f"{prefix}-*.json"))[0]
        for path in (record, record.with_suffix(".log")):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    suite = load_suite(suite_path("regression"))
    graph = [p.name for p in baseline_files(tmp_path, suite, "graph")]
    assert len(graph) == 2 and all(name.startswith("graph-") for name in graph)
    assert {p.suffix for p in baseline_files(tmp_path, suite, "graph")} == {".json", ".log"}
    assert len(baseline_files(tmp_path, suite)) == 4 and baseline_files(tmp_path, suite, "vision") == []
    (tmp_path / "broken.json").write_text("{")  # not guessed at: a domain's update refuses to start
    with pytest.raises(UserError, match="broken.json"):
        baseline_files(tmp_path, suite, "graph")


def test_an_update_refuses_a_folder_of_other_runs_and_removes_nothing(tmp_path, run_main):
    """A wrong --baseline that holds records and logs only, such as leaderboards/results: an audit (session 33) saw
    the update remove them all. Records of a domain and preset that no setting of the suite has are not its own."""
    results = REPO / "leaderboards" / "results"
    for record in sorted(results.glob("graph-DD-*.json"))[:2]:
        for path in (record, record.with_suffix(".log")):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    before = sorted(p.name for p in tmp_path.iterdir())
    out = run_main(suite_main, "--update-baseline", "--baseline", str(tmp_path))
    assert out.returncode == 2 and "holds 2 records of no domain and preset of the suite" in out.stderr
    assert "graph-DD-" in out.stderr and sorted(p.name for p in tmp_path.iterdir()) == before
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}-new-*"))  # and ran nothing


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--jobs", "0"], "error: --jobs must be at least 1"),
    (["--update-baseline", "--results", "x"], "error: --update-baseline writes into --baseline"),
    (["--suite", "nightly"], "error: no suite file"),
    (["--domain", "graph"], "error: --domain applies to --update-baseline only"),
    (["--update-baseline", "--domain", "chemistry"], "no setting of that domain (its domains: rl, text"),
])
def test_bad_arguments_exit_2_before_any_run(suite_in_process, args, message):
    out = suite_in_process(*args, "--dry-run")
    assert out.returncode == 2 and message in out.stderr and out.stdout == ""


def test_a_baseline_the_gate_cannot_use_exits_2_before_any_run(suite_in_process, tmp_path):
    """No baseline folder, one without a completed record, or --results that is the baseline folder (however
    spelt): refused before the suite runs, not after minutes of runs (nor with runs written among the baseline)."""
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\n")
    base = tmp_path / "baseline"
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard")])
    (tmp_path / "empty").mkdir()
    before = sorted(base.iterdir())
    for args, message in ((["--baseline", str(tmp_path / "absent")], "is not a folder of run records"),
                          (["--baseline", str(tmp_path / "empty")], "holds no completed run record"),
                          (["--baseline", str(base), "--results", str(tmp_path / "empty" / ".." / "baseline")],
                           "is the baseline folder"),
                          (["--baseline", str(base), "--results", str(tmp_path / "runs"), "--report",
                            str(tmp_path / "runs" / "report.json")], "would be read as a run record"),
                          (["--baseline", str(base), "--report", str(base / "report.json")],
                           "would be read as a run record")):
        out = suite_in_process("--suite", str(suite), *args)
        assert out.returncode == 2 and message in out.stderr and out.stdout == "", out.stdout + out.stderr
    assert sorted(base.iterdir()) == before and not (tmp_path / "runs").exists()


def test_a_results_folder_the_gate_cannot_read_back_is_an_error_not_a_traceback(suite_in_process, tmp_path,
                                                                                 monkeypatch):
    """After compare's verdict the gate reads the runs' records back (settings without a baseline): a stray .json
    in --results ended the suite with a traceback (an audit, session 33)."""
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\n")
    base, runs = tmp_path / "baseline", tmp_path / "runs"
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard")])
    write_records(runs, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard")])
    (runs / "notes.json").write_text("[]")  # no record
    monkeypatch.setattr("harness.suites.__main__.run_all", lambda commands, jobs: [0 for _ in commands])
    out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(runs))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "error:" in out.stderr and "notes.json" in out.stderr


def _records(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.json"))


@pytest.mark.slow  # 17 interpreters that import torch: about 50 s of CPU
def test_the_gate_end_to_end_on_the_tiny_domain(tmp_path):
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0-2 1\n")
    base, cand = tmp_path / "baseline", tmp_path / "candidate"
    # An old baseline record (of another code version, so another run id): the update replaces it.
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard", version="0.0.1")])

    out = script("--suite", str(suite), "--baseline", str(base), "--update-baseline")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "removed 1 old baseline files" in out.stdout and "3 of 3 runs completed" in out.stdout
    assert len(_records(base)) == 3 and not list(base.glob("*-0.0.1-*"))

    out = script("--suite", str(suite), "--baseline", str(base), "--results", str(cand))
    assert out.returncode == 0, out.stdout + out.stderr  # the same code and seeds: nothing changed
    assert "PASS" in (cand / "regression-report.md").read_text()

    # A planted regression: the baseline's accuracies 20 points above what this code measures.
    for path in _records(base):
        record = json.loads(path.read_text())
        record["metrics"]["accuracy"] += 20.0
        path.write_text(json.dumps(record))
    report = tmp_path / "report.md"
    out = script("--suite", str(suite), "--baseline", str(base), "--results", str(cand), "--report", str(report))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL" in report.read_text()

    # A crashed run: the gate does not pass, and the run's output is shown.
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\n")
    out = script("--suite", str(suite), "--baseline", str(cand), "--results", str(tmp_path / "crashed"),
                 TINY_DOMAIN_FAIL="1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[exit 1] tiny linear blobs_hard infonce quick seed 0" in out.stdout and "planted failure" in out.stdout



def test_an_update_whose_run_diverged_keeps_the_old_baseline(suite_in_process, tmp_path):
    """A seed that diverged completes (exit 0), but a baseline of it would fail every gate after it: refused."""
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 1\n")
    base = tmp_path / "baseline"
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard", version="0.0.1")])
    before = {path.name: path.read_bytes() for path in base.iterdir()}
    out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--update-baseline", TINY_DOMAIN_DIVERGE="1")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 diverged (a non-finite metric" in out.stderr and f"the baseline {base} is unchanged" in out.stderr
    assert {path.name: path.read_bytes() for path in base.iterdir()} == before


@pytest.mark.slow  # 6 interpreters that import torch: about 20 s of CPU
def test_one_domains_update_keeps_the_other_domains_baseline(tmp_path):
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0-2 1\n")
    base = tmp_path / "baseline"
    out = script("--suite", str(suite), "--baseline", str(base), "--update-baseline")
    assert out.returncode == 0, out.stdout + out.stderr
    other = sorted((REPO / "leaderboards" / "regression").glob("text-*.json"))[0]
    (base / other.name).write_bytes(other.read_bytes())  # another domain's record, as in the real baseline
    out = script("--suite", str(suite), "--baseline", str(base), "--update-baseline", "--domain", "tiny")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "removed 6 old baseline files of domain tiny" in out.stdout and "3 of 3 runs completed" in out.stdout
    assert (base / other.name).read_bytes() == other.read_bytes() and len(_records(base)) == 4


def test_a_setting_without_a_baseline_record_fails_the_gate_it_would_have_passed(suite_in_process, tmp_path):
    """compare lists a candidate group the baseline lacks as added and passes: a setting added to the suite without
    its baseline was gated by nothing, and CI passed."""
    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 100\n"
                     "tiny linear blobs_hard dcl quick 0 100 loss.tau_plus=0.1\n")
    base = tmp_path / "baseline"
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard")])  # infonce's only
    out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(tmp_path / "cand"))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "PASS" in (tmp_path / "cand" / "regression-report.md").read_text()  # compare alone passed it
    assert "1 setting(s) of the suite have no completed baseline record" in out.stderr
    assert "tiny / blobs_hard / linear / dcl (tau_plus=0.1, quick)" in out.stderr and "infonce" not in out.stderr


def test_a_run_busy_in_another_process_is_not_a_failure_and_not_a_pass(suite_in_process, tmp_path):
    """A seed another process holds exits 75 (not finished): the gate said "a run failed", exit 1."""
    from filelock import FileLock

    suite = tmp_path / "tiny.txt"
    suite.write_text("tiny linear blobs_hard infonce quick 0 100\n")
    base, cand = tmp_path / "baseline", tmp_path / "cand"
    write_records(base, [synthetic_record("infonce", 0, 50.0, dataset="blobs_hard")])
    assert suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(cand)).returncode == 0
    [record] = _records(cand)
    record.unlink()  # to be run again, while another process holds its lock
    with FileLock(str(cand / ".work" / f"{record.stem}.lock"), timeout=0):
        out = suite_in_process("--suite", str(suite), "--baseline", str(base), "--results", str(cand))
    assert out.returncode == 2, out.stdout + out.stderr
    assert "a run is not finished" in out.stderr and "a run failed" not in out.stderr
