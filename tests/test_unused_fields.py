"""Config fields a run ignores (``Domain.unused_fields``): ``harness run`` refuses a value given to one, which would
change the run's id and nothing else, and a sweep leaves it out of the jobs that ignore it, which then run once.
Each domain's claim is checked against its code: a run with every such field changed computes what the run with
the preset's values computes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import domains
from domains.errors import UserError
from harness.cli import main
from harness.run.runner import RunRequest, plan

QUICK_GRAPH = ["--set", "epochs=1", "--set", "svm_folds=2", "--set", "svm_inner_folds=2"]
QUICK_VISION = ["--set", "epochs=1", "--set", "linear_epochs=1", "--set", "knn_every=0"]
QUICK_TEXT = ["--set", "synthetic_eval_sentences=200", "--set", "kfold=2"]


@pytest.mark.parametrize(("request_", "meant"), [
    (RunRequest("graph", "jsd", sets={"temperature": "0.1"}), "jsd scores raw dot products"),
    (RunRequest("graph", "infonce", sets={"degree_onehot_limit": "5"}), "synthetic-motifs has node features"),
    (RunRequest("vision", "infonce", sets={"momentum": "0.5"}), "optimizer=adam has no momentum"),
    (RunRequest("vision", "infonce", sets={"rho": "0.9"}), "digits is not coloured here"),
    (RunRequest("vision", "ce", method="biased", dataset="biased-digits", sets={"fairkl_kld": "2"}),
     "fairkl_lambda=0 turns FairKL off"),
    (RunRequest("text", None, method="bow", sets={"epochs": "5"}), "method bow trains nothing"),
    (RunRequest("text", "infonce", sets={"bert_layers": "4"}), "method quickthought has no BERT encoder"),
])
def test_a_value_for_a_field_the_run_ignores_is_refused_with_the_reason(request_, meant):
    with pytest.raises(UserError, match=f"--set {next(iter(request_.sets))}=.* does not apply: {meant}"):
        plan(request_)


def test_the_presets_own_value_passes_and_a_field_that_counts_is_not_refused():
    """The preset's value gives the run's id unchanged; with sgd, momentum counts."""
    plan(RunRequest("graph", "jsd", sets={"temperature": "0.5"}))
    plan(RunRequest("vision", "infonce", sets={"optimizer": "sgd", "momentum": "0.5"}))
    plan(RunRequest("vision", "ce", method="biased", dataset="biased-digits", preset="paper-biased",
                    sets={"fairkl_kld": "2"}))  # the preset turns FairKL on, in the authors' form


def test_a_sweep_runs_the_jobs_that_ignore_a_key_once_and_says_so(tmp_path, run_main):
    out = run_main(main, "sweep", "--domains", "graph", "--losses", "jsd,infonce", "--grid", "temperature=0.1,0.2",
                   "--seeds", "0", "--results", str(tmp_path), "--dry-run")
    assert out.returncode == 0, out.stderr
    jobs = [line for line in out.stdout.splitlines() if re.match(r"(\S+=\S+ )*harness run ", line)]
    assert sorted((" --loss jsd" in job, "temperature" in job) for job in jobs) == [(False, True), (False, True),
                                                                                    (True, False)]
    assert "sweep: temperature left out of 2 jobs, which run at the preset's value, once: jsd scores raw" in out.stdout
    every = run_main(main, "sweep", "--domains", "graph", "--losses", "jsd", "--grid", "temperature=0.1,0.2",
                     "--results", str(tmp_path), "--dry-run")
    assert every.returncode == 2
    assert "error: --grid temperature applies to no job of the sweep: jsd scores raw dot products" in every.stderr


def _record(folder: Path) -> dict:
    [path] = folder.glob("*.json")
    record = json.loads(path.read_text())
    return {"metrics": record["metrics"], "loss": [point.get("loss") for point in record["curve"]]}


@pytest.mark.parametrize(("run", "changed"), [
    (["--domain", "graph", "--loss", "jsd", *QUICK_GRAPH],
     {"temperature": "0.1", "featureless": "constant", "degree_onehot_limit": "3"}),
    (["--domain", "vision", "--loss", "infonce", *QUICK_VISION],
     {"momentum": "0.5", "num_negatives": "64", "cmc_momentum": "0.1", "moco_momentum": "0.5", "rho": "0.5",
      "bias_percent": "1pct", "image_column": "x", "label_column": "y", "alpha": "0.5", "objective": "authors",
      "online_lr": "0.1", "biased_head": "true", "fairkl_moments": "mean", "fairkl_form": "authors",
      "fairkl_kld": "2"}),
    (["--domain", "vision", "--method", "biased", "--dataset", "biased-digits", "--loss", "ce", *QUICK_VISION],
     {"crop_min_scale": "0.5", "objective": "authors", "online_lr": "0.1"}),
    (["--domain", "text", "--method", "bow", *QUICK_TEXT],
     {"epochs": "7", "lr": "0.1", "batch_size": "50", "vocab_size": "100", "max_len": "5", "max_sentences": "10",
      "synthetic_sentences_per_doc": "10", "word_dim": "8", "bert_layers": "1", "hf_dataset": "x", "books": "a",
      "senteval_tasks": "MR", "probe_tenacity": "1", "hf_model_dir": "nowhere"}),
    (["--domain", "text", "--loss", "infonce", "--set", "max_steps=3", *QUICK_TEXT],
     {"bert_layers": "1", "bert_pooling": "cls", "hf_split": "test", "hf_doc_field": "d", "books": "a",
      "senteval_tasks": "MR", "eval_solver": "liblinear", "eval_max_iter": "5"}),
], ids=["graph-jsd", "vision-simclr", "vision-biased-ce", "text-bow", "text-quickthought"])
def test_every_field_called_unused_changes_nothing_the_run_computes(tmp_path, monkeypatch, run_main, run, changed):
    """With the refusal lifted, a run given other values for all the fields its domain calls unused there records the
    metrics and losses of the run at the preset's values (the same seed, in this process)."""
    name = run[run.index("--domain") + 1]
    domain = type(domains.get(name))
    request = RunRequest(name, None if "--loss" not in run else run[run.index("--loss") + 1],
                         method=run[run.index("--method") + 1] if "--method" in run else None,
                         dataset=run[run.index("--dataset") + 1] if "--dataset" in run else None)
    with pytest.raises(UserError) as refused:  # each is refused as it stands
        plan(RunRequest(**{**request.__dict__, "sets": changed}))
    assert all(f"--set {key}=" in str(refused.value) for key in changed), str(refused.value)
    monkeypatch.setattr(domain, "unused_fields", lambda *args: {})
    command = ["run", *run, "--seeds", "0", "--quiet", "--tracker", "none"]
    same = run_main(main, *command, "--results", str(tmp_path / "preset"))
    assert same.returncode == 0, same.stderr
    sets = [arg for key, value in changed.items() for arg in ("--set", f"{key}={value}")]
    other = run_main(main, *command, *sets, "--results", str(tmp_path / "other"))
    assert other.returncode == 0, other.stderr
    assert _record(tmp_path / "other") == _record(tmp_path / "preset")
