"""``harness run`` through subprocesses on the tiny domain: records, errors, skip/--force, concurrency, resume."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from filelock import FileLock
from support import page_decimals
from tiny_domain import REPO, TinyDomain, harness, harness_env, killed_mid_run

from harness.cli import main
from harness.records import REQUIRED_FIELDS, config_hash, run_hash
from harness.run import data_root_prefix, metric_text
from harness.run.runner import RunRequest, plan
from harness.run.stopping import EXIT_STOPPED


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One ``harness run`` subprocess that three tests read: seeds 3 and 4 of pucl (alpha 0.2, two epochs) on the
    tiny domain, with a data root of one's own (a path with a space). Its data root, results folder and output."""
    tmp = tmp_path_factory.mktemp("two_seeds")
    root, results = tmp / "my data", tmp / "results"
    root.mkdir()
    out = harness("run", "--domain", "tiny", "--loss", "pucl", "--seeds", "3,4", "--set", "loss.alpha=0.2",
                  "--set", "epochs=2", "--results", str(results), "--quiet", env={"HARNESS_DATA_ROOT": str(root)})
    assert out.returncode == 0, out.stderr
    return root, results, out


def test_run_writes_a_schema_complete_record(two_seeds):
    _, results, out = two_seeds
    records = _records(results)
    assert [r["seed"] for r in records] == [3, 4]
    record = records[0]
    assert set(REQUIRED_FIELDS) <= set(record)
    assert record["status"] == "completed" and record["seed"] == 3
    assert record["loss_params"] == {"alpha": 0.2, "c": 0.01}
    assert record["config"]["epochs"] == 2 and record["overrides"] == {"epochs": 2}
    # The id holds the config and the data: the hash of both, not of the config alone.
    spec = plan(RunRequest(domain="tiny", loss="pucl", seeds=[3], sets={"loss.alpha": "0.2", "epochs": "2"})).specs[0]
    assert record["config_hash"] == config_hash(spec)
    assert record["run_id"] == f"tiny-blobs-linear-pucl-{run_hash(spec, record['data_fingerprint'])[:8]}-s3"
    assert 0 <= record["metrics"]["accuracy"] <= 100 and len(record["curve"]) == 2
    assert set(record["timings"]) == {"pretrain_s", "evaluate_s", "total_s"}
    assert record["software"]["contrastive_harness"] and record["hardware"]["torch"]
    assert record["hardware"]["torch_threads"] >= 1
    # the kernels the CPU picked, and the CPU: what a seed's rerun bit for bit also depends on
    assert record["hardware"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and record["hardware"]["cpu"]
    assert (results / f"{record['run_id']}.log").read_text().count("epoch ") == 2
    assert record["run_id"] in out.stdout and "accuracy=" in out.stdout
    # The recorded command reproduces the same run (same run id), so it is skipped as existing.
    assert main([*record["command"][1:], "--results", str(results)]) == 0
    assert _records(results) == records


def test_each_seed_prints_its_metrics_to_the_summarys_decimals(two_seeds):
    """A seed's line says 98.00 beside the summary's 97.13 ± 1.68, not 98 (as :.4g printed it)."""
    _, results, out = two_seeds
    records = _records(results)
    lines = out.stdout.splitlines()
    for record in records:
        metrics = ", ".join(f"{k}={page_decimals(v)}" for k, v in sorted(record["metrics"].items()))
        assert f"  seed {record['seed']}: {metrics}" in lines, out.stdout
        assert f"{record['run_id']}: accuracy={page_decimals(record['metrics']['accuracy'])} (" in out.stdout
    accuracies = [r["metrics"]["accuracy"] for r in records]
    assert f"accuracy: {statistics.fmean(accuracies):.2f} ± {statistics.stdev(accuracies):.2f} over 2 seeds" in lines
    assert "n_test=60.00" in out.stdout  # a count the domain records as a float, as the leaderboard prints it


def test_a_count_kept_as_a_whole_number_prints_as_one():
    """A metric a domain records as an int (text's and graph's n_test) is a count: ``n_test=3775``, where the
    decimals of a float metric would print ``3775.00``; a float, whole or not, keeps the pages' decimals."""
    assert [metric_text(v) for v in (3775, 0, 60.0, 0.5, 1234.56, None)] == \
        ["3775", "0", "60.00", "0.5000", "1234.6", "null (non-finite)"]

def test_a_method_with_its_own_baseline_records_it(tmp_path):
    for method, loss in (("linear", "infonce"), ("linear2", "supcon")):
        assert main(["run", "--domain", "tiny", "--method", method, "--loss", loss, "--seeds", "0",
                     "--set", "epochs=1", "--results", str(tmp_path), "--quiet"]) == 0
    assert {r["method"]: r["baseline_loss"] for r in _records(tmp_path)} == {"linear": "infonce", "linear2": "supcon"}


def test_user_error_from_a_subprocess_is_one_line(tmp_path):
    out = harness("run", "--domain", "nope", "--loss", "infonce", "--results", str(tmp_path))
    assert out.returncode == 2 and out.stderr.startswith("error: unknown domain 'nope'. Available: ")
    assert len(out.stderr.strip().splitlines()) == 1 and "tiny" in out.stderr


@pytest.mark.parametrize("field, typo, meant", [("domain", "tinny", "tiny"), ("method", "linaer", "linear"),
                                                ("dataset", "blobs_hrd", "blobs_hard"), ("preset", "quik", "quick")])
def test_a_misspelt_name_is_answered_with_the_closest_one(field, typo, meant):
    request = dict(domain="tiny", loss="infonce", seeds=[0]) | {field: typo}
    with pytest.raises(Exception, match=f"unknown {field} '{typo}'.*; did you mean '{meant}'\\? Available: "):
        plan(RunRequest(**request))


@pytest.mark.parametrize("args, expected", [
    (["--domain", "nope", "--loss", "infonce"], "unknown domain 'nope'"),
    (["--domain", "tiny", "--loss", "jsd"], "does not accept loss 'jsd': it needs raw logits, each pair scored on "
                                            "its own, which tiny's methods linear, linear2 do not supply; accepted: "
                                            "infonce"),
    (["--domain", "tiny", "--loss", "infnce"], "unknown loss 'infnce'; did you mean 'infonce'? Domain 'tiny' "
                                               "accepts: infonce"),
    (["--domain", "tiny", "--loss", "infonce", "--set", "nope=1"], "Valid keys: classes, dim_in"),
    (["--domain", "tiny", "--loss", "infonce", "--set", "epoch=1"], "unknown --set key 'epoch' for domain 'tiny'; "
                                                                      "did you mean 'epochs'? Valid keys: classes"),
    (["--domain", "tiny", "--loss", "infonce", "--seeds", "5-2"], "--seeds range '5-2' is empty: it ends before "
                                                                   "it starts; write 2-5"),
    (["--domain", "tiny", "--loss", "infonce", "--set", "epochs=x"], "--set epochs=x: must be a valid integer"),
    (["--domain", "tiny", "--loss", "pucl", "--set", "loss.alpha=2"], "alpha must be a number in (0, 1) or auto, "
                                                                       "got 2"),
    (["--domain", "tiny", "--loss", "pucl", "--set", "loss.beta=1"], "Valid: loss.alpha, loss.c"),
    (["--domain", "tiny", "--loss", "pucl", "--set", "loss.alpah=0.1"], "did you mean 'loss.alpha'?"),
    (["--domain", "tiny"], "--loss is required: method 'linear' of domain 'tiny' trains with one (harness list "
                           "losses)"),
])
def test_user_errors_are_one_line_exit_2(tmp_path, capsys, args, expected):
    assert main(["run", *args, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.json"))


def test_an_evaluation_only_method_needs_no_loss_and_names_its_baseline_as_before(tmp_path, run_main):
    """text's bow trains nothing: --loss was required all the same, and entered the run id. Without it the record
    names the method's baseline loss, so the run is the one a user who passed that loss ran (its record reused).
    Three folds, not the protocol's ten: the probe's fits are all the run's time, and not what is checked."""
    args = ["run", "--domain", "text", "--method", "bow", "--seeds", "0", "--set", "kfold=3", "--results",
            str(tmp_path), "--quiet"]
    first = run_main(main, *args)
    assert first.returncode == 0, first.stderr
    [record] = _records(tmp_path)
    assert record["loss"] == "infonce" and record["loss_used"] is False and "--loss infonce" in first.stdout
    again = run_main(main, *args[:-3], "--loss", "infonce", *args[-3:])
    assert again.returncode == 0 and "[skipped]" in again.stdout, again.stdout + again.stderr
    refused = run_main(main, "run", "--domain", "text", "--seeds", "0", "--results", str(tmp_path))
    assert refused.returncode == 2 and "only bow, hf ignore it" in refused.stderr


@pytest.mark.parametrize("method", ["bow", "hf"])
def test_an_evaluation_only_method_refuses_a_loss_other_than_its_baseline(tmp_path, run_main, method):
    """Any --loss was taken, each giving the same evaluation under another run id (text-...-bow-hcl-...)."""
    refused = run_main(main, "run", "--domain", "text", "--method", method, "--loss", "hcl", "--seeds", "0",
                       "--results", str(tmp_path))
    assert refused.returncode == 2 and refused.stderr == (
        f"error: method '{method}' of domain 'text' trains nothing, so --loss hcl would repeat its evaluation under "
        "another run id: leave --loss out (its record names infonce)\n")
    assert not list(tmp_path.glob("*.json"))
    sets = {"hf_model_dir": str(tmp_path)} if method == "hf" else {}  # hf's plan checks that its model folder exists
    spec = plan(RunRequest(domain="text", method=method, loss="infonce", seeds=[0], sets=sets)).specs[0]
    assert spec.loss == "infonce" and spec == plan(RunRequest(domain="text", method=method, loss=None, seeds=[0],
                                                              sets=sets)).specs[0]


def test_a_set_key_given_twice_is_refused_as_sweep_refuses_it(tmp_path, run_main):
    """Was: the last value silently won (epochs=2 ran)."""
    proc = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                    "--set", "epochs=2", "--results", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr == "error: --set epochs is given twice (epochs=1 and epochs=2); give it once\n"
    assert not tmp_path.exists() or not list(tmp_path.glob("*.json"))


def test_quiet_hides_the_progress_bars_not_where_the_live_logs_are(tmp_path, run_main):
    """--quiet (its help and the README: no progress bars) hid the tracking line as well."""
    proc = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                    "--results", str(tmp_path), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert f"tracking: tensorboard --logdir {tmp_path / 'tb'}\n" in proc.stderr
    assert "epoch" not in proc.stderr  # no progress bar
    helped = run_main(main, "run", "--help")
    assert helped.returncode == 0 and "the tracking line" in " ".join(helped.stdout.split())


def test_verbose_shows_the_harness_log_lines_not_the_version_library_s(run_main, capsys, monkeypatch):
    """-v showed "INFO vcs_versioning._scm_version: version 0.0 -> 0.0" (where the record says 0.1.devN)."""
    import logging

    from harness.run.output import output_settings

    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # as in a fresh process: -v's basicConfig applies
    capsys.readouterr()
    with output_settings(True):
        logging.getLogger("vcs_versioning._scm_version").info("version 0.0 -> 0.0")
        logging.getLogger("harness").info("run tiny-...")
        logging.getLogger("absl").info("a library's line")  # -v shows library log lines
    err = capsys.readouterr().err
    assert "INFO harness: run tiny-..." in err and "INFO absl: a library's line" in err
    assert "vcs_versioning" not in err
    assert logging.getLogger("vcs_versioning").level == logging.NOTSET  # put back afterwards


def test_failures_write_a_failed_record(tmp_path, capsys):
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "fail=true",
                 "--results", str(tmp_path), "--quiet"]) == 1
    assert "Traceback" not in capsys.readouterr().err
    [record] = _records(tmp_path)
    assert record["status"] == "failed" and record["error"] == "RuntimeError: planted failure"
    assert "Traceback" in (tmp_path / f"{record['run_id']}.log").read_text()
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--dataset", "absent", "--seeds", "0",
                 "--results", str(tmp_path), "--quiet"]) == 2
    assert "put it under" in capsys.readouterr().err


def test_skip_and_force(tmp_path, capsys):
    args = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(tmp_path), "--quiet"]
    assert main(args) == 0
    [first] = _records(tmp_path)
    assert main(args) == 0
    assert "[skipped]" in capsys.readouterr().out and _records(tmp_path) == [first]
    assert main([*args, "--force"]) == 0
    assert "[completed]" in capsys.readouterr().out
    [second] = _records(tmp_path)
    assert second["run_id"] == first["run_id"] and second["started_at"] >= first["started_at"]
    assert second["metrics"] == first["metrics"]  # every random source is seeded from the run's seed


def test_the_data_is_prepared_once_for_all_the_seeds_of_a_run(tmp_path, monkeypatch):
    calls, seen = [], set()
    prepare, pretrain = TinyDomain.prepare, TinyDomain.pretrain

    def counted(self, spec, ctx):
        calls.append(spec.seed)
        return prepare(self, spec, ctx)

    def pretrain_noting_the_data(self, spec, ctx, data):
        seen.add(id(data))
        return pretrain(self, spec, ctx, data)

    monkeypatch.setattr(TinyDomain, "prepare", counted)
    monkeypatch.setattr(TinyDomain, "pretrain", pretrain_noting_the_data)
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0-2", "--set", "epochs=1",
                 "--results", str(tmp_path), "--quiet"]) == 0
    assert calls == [0] and len(seen) == 1 and len(_records(tmp_path)) == 3


def test_a_run_whose_seeds_all_have_records_skips_them_without_loading_the_data(tmp_path, monkeypatch):
    """Where the domain computes its fingerprint without the data, a finished run loads nothing; a run with one
    seed left loads the data once, before it runs."""
    prepare = TinyDomain.prepare
    calls: list[int] = []

    def counted(self, spec, ctx):
        calls.append(spec.seed)
        return prepare(self, spec, ctx)

    monkeypatch.setattr(TinyDomain, "data_fingerprint", lambda self, spec, ctx: prepare(self, spec, ctx).fingerprint)
    monkeypatch.setattr(TinyDomain, "prepare", counted)
    args = ["run", "--domain", "tiny", "--loss", "infonce", "--set", "epochs=1", "--results", str(tmp_path), "--quiet"]
    assert main([*args, "--seeds", "0-1"]) == 0 and calls == [0]
    assert main([*args, "--seeds", "0-1"]) == 0 and calls == [0]  # both skipped, nothing loaded
    assert main([*args, "--seeds", "0-2"]) == 0 and calls == [0, 0]  # seed 2 runs: loaded once
    assert len(_records(tmp_path)) == 3


def test_concurrent_writers_into_one_directory(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "harness", "run", "--domain", "tiny", "--loss", "dcl",
                               "--seeds", str(seed), "--results", str(tmp_path), "--quiet"],
                              cwd=REPO, env=harness_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for seed in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    records = _records(tmp_path)
    assert sorted(r["seed"] for r in records) == [0, 1, 2, 3]
    assert all(r["status"] == "completed" for r in records)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_resume_after_a_killed_run(tmp_path):
    args = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=6",
            "--set", "sleep_s=0.5", "--results", str(tmp_path), "--quiet"]
    killed_mid_run(args, tmp_path, 0)
    assert not list(tmp_path.glob("*.json"))  # a killed run leaves no record, only its checkpoint
    out = harness(*args, "--resume")
    assert out.returncode == 0, out.stderr
    [record] = _records(tmp_path)
    assert record["info"]["start_epoch"] >= 2 and record["resumed"] is True
    assert [c["epoch"] for c in record["curve"]] == [1, 2, 3, 4, 5, 6]
    # The timings are the whole run's: each of the six epochs sleeps 0.5 s, the killed process's among them.
    timings = record["timings"]
    assert timings["earlier_s"] >= 0.5 * record["info"]["start_epoch"] and timings["pretrain_s"] >= 0.5 * 6
    assert timings["total_s"] >= timings["pretrain_s"] + timings["evaluate_s"]
    assert not (tmp_path / ".work" / record["run_id"]).exists()  # the checkpoint goes once the record exists


def test_a_run_held_by_another_process_is_skipped_and_failed_force_keeps_the_record(tmp_path, capsys, monkeypatch):
    args = ["run", "--domain", "tiny", "--loss", "hcl", "--seeds", "0", "--set", "epochs=1",
            "--results", str(tmp_path), "--quiet"]
    assert main(args) == 0
    [record] = _records(tmp_path)
    capsys.readouterr()
    with FileLock(str(tmp_path / ".work" / f"{record['run_id']}.lock")):
        assert main([*args, "--force"]) == EXIT_STOPPED  # not done yet
    assert "[busy]" in capsys.readouterr().out and _records(tmp_path) == [record]
    monkeypatch.setenv("TINY_DOMAIN_FAIL", "1")
    assert main([*args, "--force"]) == 1
    assert _records(tmp_path) == [record]  # a failed --force rerun keeps the completed record
    assert "keeping its earlier completed record" in (tmp_path / f"{record['run_id']}.log").read_text()


def test_the_printed_reproduce_line_names_a_data_root_of_ones_own(two_seeds, tmp_path, monkeypatch):
    # The record's command names no data root (the data's fingerprint, not its folder, is the run's): without the
    # prefix, the line pasted in a new shell would look for one's own data under the built-in root.
    root, _, out = two_seeds
    lines = [ln.split("reproduce: ", 1)[1] for ln in out.stdout.splitlines() if "reproduce: " in ln]
    assert len(lines) == 2, out.stdout  # one per seed
    for line in lines:
        assert line.startswith(f"HARNESS_DATA_ROOT='{root}' HARNESS_PLUGINS=tiny_domain harness run --domain tiny ")

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("HARNESS_DATA_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert data_root_prefix(None) == "" == data_root_prefix(str(tmp_path / ".cache/contrastive-harness/data"))
    assert data_root_prefix("relative") == f"HARNESS_DATA_ROOT={tmp_path / 'relative'} "  # --data-root, absolute
