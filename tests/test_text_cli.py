"""End to end through the command line: the embedded default, two Gutenberg books, the bag-of-words baseline."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

EVALUATION = ["--set", "kfold=3", "--seeds", "0", "--device", "cpu", "--quiet"]
TINY = ["--set", "max_steps=3", "--set", "word_dim=16", "--set", "hidden_dim=32", "--set", "batch_size=50", *EVALUATION]


def _run(tmp_path: Path, *args: str, data_root: Path | None = None, stdin: str = "") -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "text", *args, "--results", str(tmp_path)]
    if data_root is not None:
        cmd += ["--data-root", str(data_root)]
    env = {**__import__("os").environ, "HARNESS_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, input=stdin)


def _record(tmp_path: Path) -> dict:
    (path,) = tmp_path.glob("text-*.json")
    return json.loads(path.read_text())


def test_cli_embedded_default(tmp_path):
    out = _run(tmp_path, "--loss", "dcl", "--set", "loss.tau_plus=0.01", "--set", "synthetic_documents=40",
               "--set", "synthetic_sentences_per_doc=10", "--set", "synthetic_eval_sentences=300", *TINY)
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert record["status"] == "completed"
    assert (record["method"], record["dataset"], record["loss"]) == ("quickthought", "synthetic-topics", "dcl")
    assert record["loss_params"]["tau_plus"] == 0.01
    metrics, details = record["metrics"], record["details"]
    assert 100 / 4 - 15 < metrics["accuracy"] <= 100 and metrics["bayes_accuracy"] > 50
    assert details["chance_accuracy"] == 25.0 and details["class_prior"] == [0.25] * 4
    assert record["info"]["steps"] == 3 and record["throughput"]["sentences_per_s"] > 0
    assert len(record["curve"]) >= 1 and record["config"]["similarity"] == "dot"


def test_cli_two_books_on_two_senteval_tasks(tmp_path, data_root):
    out = _run(tmp_path, "--loss", "infonce", "--dataset", "books", "--set", "books=blake-poems,carroll-alice",
               "--set", "max_sentences=600", "--set", "senteval_tasks=MR,MRPC", "--set", "senteval_max_samples=300",
               *TINY, data_root=data_root)
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert record["status"] == "completed", record.get("error")
    assert record["data_fingerprint"]["books"] == ["blake-poems", "carroll-alice"]
    assert record["info"]["documents"] == 2 and record["info"]["train_sentences"] <= 600
    metrics = record["metrics"]
    assert set(metrics) == {"accuracy", "MR", "MRPC", "MRPC_f1"}
    assert metrics["accuracy"] == pytest.approx((metrics["MR"] + metrics["MRPC"]) / 2)
    assert record["details"]["tasks"]["MR"]["n_train"] == 300 and record["details"]["subsampled_to"] == 300


def test_cli_bag_of_words_ignores_the_loss(tmp_path, data_root):
    out = _run(tmp_path, "--method", "bow", "--loss", "infonce", "--dataset", "books", "--set", "senteval_tasks=TREC",
               "--set", "senteval_max_samples=400", *EVALUATION, data_root=data_root)
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert {k: v for k, v in record["info"].items() if k != "tracking"} == {"trained": False}
    assert record["loss_used"] is False
    assert record["metrics"]["TREC"] > 50  # word counts separate question types well above chance (23%)


def test_cli_bag_of_words_on_the_default_dataset(tmp_path):
    """Its sparse features reach the synthetic task's class-structure figure too (they once crashed it)."""
    out = _run(tmp_path, "--method", "bow", "--loss", "infonce", "--set", "synthetic_eval_sentences=300", *EVALUATION)
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert record["status"] == "completed" and record["loss_used"] is False
    assert 0 <= record["metrics"]["accuracy"] <= 100 and record["details"]["class_structure"]


@pytest.mark.parametrize(("sets", "message"), [
    ((), "use_senteval_package=true needs the `senteval` package, which does not import (No module named 'senteval'): "
         "install it with pip install git+https://github.com/facebookresearch/SentEval"),
    (("senteval_max_samples=300",), "senteval_max_samples cannot be used with use_senteval_package=true"),
])
def test_cli_the_senteval_package_is_checked_before_training(tmp_path, data_root, sets, message):
    """use_senteval_package=true trained quick-thought and only then found the package missing (it is no dependency,
    and not installed here), or senteval_max_samples set: both are refused before the run, one line, no record."""
    if not sets and importlib.util.find_spec("senteval") is not None:
        pytest.skip("the senteval package is installed here")
    settings = [arg for value in ("use_senteval_package=true", "senteval_tasks=MR", "books=blake-poems",
                                  "max_sentences=200", *sets) for arg in ("--set", value)]
    out = _run(tmp_path, "--loss", "infonce", "--dataset", "books", *settings, *TINY, data_root=data_root)
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not list(tmp_path.glob("text-*.json"))


def test_cli_hf_without_a_model_directory_is_a_one_line_error(tmp_path, monkeypatch, run_main):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    out = run_main(main, "run", "--domain", "text", "--method", "hf", "--loss", "infonce", "--seeds", "0",
                   "--results", str(tmp_path))  # a refusal: in this process (the others show the command's exit)
    assert out.returncode != 0
    assert "hf_model_dir" in out.stderr and "Traceback" not in out.stderr


def test_cli_hf_never_runs_a_model_folders_own_code(tmp_path):
    """A model folder whose config names code of its own (``auto_map``): transformers asked on the terminal whether
    to run it, and a "y" (here piped in) ran the folder's module. It is refused, one line, and nothing of it runs."""
    model, ran = tmp_path / "model", tmp_path / "ran"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "mine", "auto_map": {
        "AutoConfig": "mine.MyConfig", "AutoModel": "mine.MyModel"}}))
    tokenizer = {"auto_map": {"AutoTokenizer": ["mine.MyTokenizer", None]}}
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    (model / "mine.py").write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    out = _run(tmp_path / "results", "--method", "hf", "--loss", "infonce", "--set", f"hf_model_dir={model}",
               *EVALUATION, stdin="y\n")
    assert out.returncode != 0 and not ran.exists(), out.stderr
    assert f"could not load a Hugging Face model from {model}" in out.stderr and "Traceback" not in out.stderr
    assert "Do you wish to run the custom code" not in out.stdout + out.stderr
