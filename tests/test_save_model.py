"""``--save-model``: a run's trained networks kept in ``<results>/models/<run id>.pt`` (harness.run.model_file), through
the CLI as a user runs it, on the tiny domain and on graph's quick setting; read back with ``weights_only=True`` into
networks built afresh, they reproduce the run's own evaluation. The flag is outside the run's identity."""

from __future__ import annotations

import json
import re
import shutil
import signal
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from test_faults import _start, _wait_for_epoch
from tiny_domain import REPO, TinyDomain, harness, synthetic_record, write_records

from domains.base import PretrainResult
from domains.context import RunContext
from harness.cli import main
from harness.run.model_file import load_model
from harness.run.runner import RunRequest, plan, seed_everything
from harness.run.stopping import EXIT_STOPPED
from harness.suites import Setting
from harness.suites.__main__ import baseline_files
from harness.suites.pack import collect

TINY = ("--domain", "tiny", "--loss", "infonce", "--tracker", "none", "--quiet")


def _record(results: Path) -> dict:
    [path] = sorted(results.glob("*.json"))
    return json.loads(path.read_text())


def _tiny_accuracy(encoder: torch.nn.Module, seed: int, sets: dict[str, str] | None = None) -> float:
    """The tiny domain's own evaluation of ``encoder`` (what a run's record holds), in this process."""
    spec = plan(RunRequest(domain="tiny", loss="infonce", seeds=[seed], sets=sets or {})).specs[0]
    ctx = RunContext(seed=seed, device=torch.device("cpu"), data_root=Path(), work_dir=Path(), quiet=True)
    return TinyDomain().evaluate(spec, PretrainResult(encoder), ctx, tiny_domain.make_data(spec)).metrics["accuracy"]


def test_a_run_keeps_its_trained_encoder_under_the_same_identity(tmp_path, run_main):
    kept, plain = tmp_path / "kept", tmp_path / "plain"
    out = harness("run", *TINY, "--seeds", "1", "--results", str(kept), "--save-model")
    assert out.returncode == 0, out.stderr
    # the run without the flag in this process (``main``, what the command calls): its record is the same run's
    assert run_main(main, "run", *TINY, "--seeds", "1", "--results", str(plain)).returncode == 0
    record = _record(kept)
    # Not part of the run: the same run id, config hash and config as without the flag, and nothing else written.
    assert {k: _record(plain)[k] for k in ("run_id", "config_hash", "config", "runtime", "command")} == \
        {k: record[k] for k in ("run_id", "config_hash", "config", "runtime", "command")}
    assert not (plain / "models").exists()
    path = kept / "models" / f"{record['run_id']}.pt"
    assert f"  model -> {path}\n" in out.stdout
    assert [p.name for p in (kept / "models").iterdir()] == [path.name]  # no temporary file left beside it

    saved = torch.load(path, weights_only=True)
    assert {k: saved[k] for k in ("run_id", "domain", "method", "dataset", "loss", "loss_params", "seed",
                                  "config_hash", "config")} == {k: record[k] for k in (
        "run_id", "domain", "method", "dataset", "loss", "loss_params", "seed", "config_hash", "config")}
    state = saved["modules"]["encoder"]
    assert set(state) == {"weight", "bias"} and all(t.device.type == "cpu" for t in state.values())

    _, modules = load_model(path)
    encoder = modules["encoder"]
    assert all(torch.equal(encoder.state_dict()[k], state[k]) for k in state)
    seed_everything(1)  # the encoder the run started from: the saved one is the trained one, not it
    initial = torch.nn.Linear(record["config"]["dim_in"], record["config"]["dim_out"])
    assert not torch.equal(initial.weight, encoder.weight)
    assert _tiny_accuracy(encoder, 1) == record["metrics"]["accuracy"]


def test_a_skipped_run_says_it_saves_no_model_and_force_saves_it(tmp_path, run_main):
    """In this process (``main``, what the command calls): the command itself is the first test's."""
    run = ("run", *TINY, "--seeds", "0", "--results", str(tmp_path))
    assert run_main(main, *run).returncode == 0
    rid = _record(tmp_path)["run_id"]
    path = tmp_path / "models" / f"{rid}.pt"
    out = run_main(main, *run, "--save-model")
    assert out.returncode == 0, out.stderr
    assert f"[skipped] {rid}" in out.stdout and "no model saved: the run was skipped" in out.stdout
    assert "--force" in out.stdout and not path.exists()
    assert run_main(main, *run, "--save-model", "--force").returncode == 0
    assert path.is_file()
    out = run_main(main, *run, "--save-model")
    assert f"  model: {path} (saved by an earlier run of it)" in out.stdout
    # A forced rerun without the flag replaces the record, not the model: it says the model is the earlier run's.
    out = run_main(main, *run, "--force")
    assert out.returncode == 0 and f"{path} holds the model of the earlier run this one replaces" in out.stderr
    assert path.is_file()


def test_a_resumed_run_saves_the_model_it_finishes_with(tmp_path):
    # Stopped by SIGTERM once epoch 2's checkpoint is written: a time limit could end a start slowed by a loaded
    # machine before the first checkpoint, and the rerun would then be no resume. The run holds after epoch 2 till
    # `release` exists, so the signal reaches it there however it is scheduled.
    args = (*TINY, "--seeds", "0", "--results", str(tmp_path), "--save-model", "--set", "epochs=6")
    release = tmp_path.parent / f"{tmp_path.name}-release"
    proc = _start(["run", *args], hold=(2, release))
    _wait_for_epoch(tmp_path, 2)
    proc.send_signal(signal.SIGTERM)
    release.touch()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
    out = harness("run", *args, "--resume")
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert record["resumed"] and record["info"]["start_epoch"] == 2
    _, modules = load_model(tmp_path / "models" / f"{record['run_id']}.pt")
    sets = {"epochs": "6"}
    assert _tiny_accuracy(modules["encoder"], 0, sets) == record["metrics"]["accuracy"]


def test_a_sweep_saves_its_jobs_models_and_counts_the_skipped_without_one(tmp_path, run_main):
    sweep = ("sweep", "--domains", "tiny", "--losses", "infonce", "--results", str(tmp_path), "--tracker", "none")
    # seed 0's record, as the sweep's job would write it (the same run), without a sweep's processes
    assert run_main(main, "run", *TINY, "--seeds", "0", "--results", str(tmp_path)).returncode == 0
    dry = run_main(main, *sweep, "--seeds", "0,1", "--save-model", "--dry-run")  # prints the jobs, starts none
    assert dry.returncode == 0 and " --save-model " in dry.stdout.strip().splitlines()[-1]
    out = harness(*sweep, "--seeds", "0,1", "--save-model")
    assert out.returncode == 0, out.stderr
    assert "--save-model: 1 of the skipped runs has no saved model; rerun it with --force" in out.stdout
    [saved] = sorted((tmp_path / "models").glob("*.pt"))
    assert saved.name.endswith("-s1.pt") and f"  model -> {saved}" in out.stdout
    assert torch.load(saved, weights_only=True)["seed"] == 1


def test_a_method_that_trains_nothing_says_so_and_the_run_goes_on(tmp_path, run_main):
    out = run_main(main, "run", "--domain", "text", "--method", "bow", "--seeds", "0", "--results", str(tmp_path),
                   "--tracker", "none", "--quiet", "--save-model")
    assert out.returncode == 0, out.stderr
    assert "  no model saved: method 'bow' of domain 'text' trains no network to keep" in out.stdout
    assert _record(tmp_path)["status"] == "completed" and not (tmp_path / "models").exists()


def test_the_commands_that_read_a_results_folder_read_past_its_models(tmp_path, run_main):
    results = tmp_path / "results"
    assert run_main(main, "run", *TINY, "--seeds", "0,1", "--results", str(results), "--save-model").returncode == 0
    assert len(list((results / "models").glob("*.pt"))) == 2
    shutil.copytree(results, tmp_path / "copy")
    page = run_main(main, "leaderboard", "--results", str(results), "--out", str(tmp_path / "pages"))
    assert page.returncode == 0, page.stderr
    gate = run_main(main, "compare", "--baseline", str(results), "--candidate", str(tmp_path / "copy"))
    assert gate.returncode == 0, gate.stdout + gate.stderr
    # The regression suite's update replaces a folder of records only: the models folder is the runs' own.
    suite = [Setting("tiny", "linear", "blobs", "infonce", "quick", (0, 1))]
    assert {p.suffix for p in baseline_files(results, suite)} == {".json", ".log"}
    # tools/campaign pack takes a stage's records and logs, never its models.
    stage = tmp_path / "stage"
    write_records(stage / "leaderboards" / "results", [synthetic_record("infonce", 0, 90.0)])
    shutil.copytree(results / "models", stage / "leaderboards" / "results" / "models")
    members, _ = collect(stage, tmp_path / "repo", checkpoints=True)
    assert [m.kind for m in members] == ["record"]


README_SNIPPET = re.compile(r"\*\*Keeping the trained model\.\*\*.*?```python\n(.*?)```", re.S)


def test_the_readme_snippet_loads_a_graph_run_that_evaluates_as_recorded(tmp_path, run_main):
    """Graph's quick setting, one epoch: the README's lines rebuild its encoder, whose graph embeddings give the
    SVM accuracy of the record. The run in this process (``main``, what the command calls): --save-model through
    the command is the first test's, and torch_geometric's imports are paid once."""
    pytest.importorskip("torch_geometric")
    from domains.graph import GraphDomain
    from domains.graph.infograph import Pretrained
    from domains.graph.models import InfoGraph

    out = run_main(main, "run", "--domain", "graph", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                   "--results", str(tmp_path), "--tracker", "none", "--quiet", "--save-model")
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    snippet = README_SNIPPET.search((REPO / "README.md").read_text()).group(1)
    placeholder = "leaderboards/results/models/<run id>.pt"
    assert placeholder in snippet
    scope: dict = {}
    exec(snippet.replace(placeholder, str(tmp_path / "models" / f"{record['run_id']}.pt")), scope)  # noqa: S102
    saved, modules = scope["saved"], scope["modules"]
    assert sorted(modules) == ["encoder", "global_head", "local_head"] and saved["config"] == record["config"]

    request = RunRequest(domain="graph", loss="infonce", seeds=[0], sets={"epochs": "1"})
    spec = plan(request).specs[0]
    seed_everything(0)  # the network the run started from
    model = InfoGraph(saved["build"]["num_features"], spec.config.hidden, spec.config.layers)
    assert not torch.equal(model.encoder.convs[0].nn[0].weight, modules["encoder"].convs[0].nn[0].weight)
    model.encoder = modules["encoder"]
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, quiet=True)
    domain = GraphDomain()
    data = domain.prepare(spec, ctx).data
    metrics = domain.evaluate(spec, PretrainResult(Pretrained(model, data)), ctx, data).metrics
    assert metrics["accuracy"] == record["metrics"]["accuracy"]


def _vision(method: str, dataset: str, loss: str):
    from domains.vision import METHODS
    from domains.vision import config as vcfg
    from domains.vision.method import DataInfo

    spec = plan(RunRequest(domain="vision", method=method, dataset=dataset, loss=loss, seeds=[0])).specs[0]
    info = DataInfo(6, torch.arange(6) % 2, 2, 16, (0.4, 0.5, 0.6), (0.2, 0.25, 0.3))
    network = METHODS[method](vcfg.resolved(spec.config, method, dataset), info, spec.make_loss(),
                              spec.make_loss().spec.needs_labels)
    images = torch.rand(2, 3 if method != "cmc" else 1, 16, 16)
    return spec, network, lambda kept: kept["encoder" if method != "cmc" else "enc_l"](images)


def _rl(method: str, dataset: str, loss: str):
    from types import SimpleNamespace

    from domains.rl.curl import CurlSac

    spec = plan(RunRequest(domain="rl", loss=loss, seeds=[0])).specs[0]
    agent = CurlSac(spec.config, 2, spec.config.lr, spec.make_loss(), torch.device("cpu"))
    obs = torch.randint(0, 255, (2, 3 * spec.config.frame_stack, spec.config.crop_size, spec.config.crop_size))
    return spec, SimpleNamespace(agent=agent), lambda kept: kept["actor"](obs.float())[0]


def _text(method: str, dataset: str, loss: str):
    from domains.text.models import QuickThoughtEncoder, build_model
    from domains.text.tokenize import train_tokenizer

    spec = plan(RunRequest(domain="text", method=method, loss=loss, seeds=[0], sets={"word_vectors": ""})).specs[0]
    sentences = ["a cat sat on the mat", "the dog ran far away", "birds sing in the early morning"]
    tokenizer = train_tokenizer(sentences, "wordpiece" if method.endswith("bert") else "word", 100, spec.config.max_len)
    model, _ = build_model(method, spec.config, tokenizer)
    ids, lengths = tokenizer.batch(sentences)
    return (spec, QuickThoughtEncoder(model, tokenizer, torch.device("cpu"), 8, truncate=True),
            lambda kept: torch.cat([kept["f"](ids, lengths), kept["g"](ids, lengths)], dim=1))


@pytest.mark.parametrize("make, method, dataset, loss", [
    (_vision, "simclr", "digits", "infonce"), (_vision, "moco", "digits", "dcl"), (_vision, "cmc", "digits", "infonce"),
    (_vision, "biased", "biased-digits", "supcon"), (_vision, "biased", "biased-digits", "ce"),
    (_rl, "curl", "cartpole-swingup", "infonce"),
    (_text, "quickthought", "synthetic-topics", "infonce"), (_text, "quickthought-bert", "synthetic-topics", "infonce"),
])
def test_each_domain_rebuilds_the_networks_it_keeps(make, method, dataset, loss):
    """What a domain keeps of the networks its training builds loads strictly into what it builds afresh from the
    config and the kept ``build`` values, and computes the same representation."""
    pytest.importorskip({_vision: "torchvision", _rl: "torch", _text: "tokenizers"}[make])
    import domains

    spec, trained, represent = make(method, dataset, loss)
    domain = domains.get(spec.domain)
    kept = domain.trained_modules(spec, PretrainResult(trained))
    fresh = domain.build_modules(spec, kept.build)
    assert sorted(fresh) == sorted(kept.modules)
    for name, module in fresh.items():
        module.load_state_dict(kept.modules[name].state_dict(), strict=True)
    for networks in (kept.modules, fresh):
        for module in networks.values():
            module.eval()
    with torch.no_grad():
        assert torch.equal(represent(kept.modules), represent(fresh))


def test_a_model_that_cannot_be_written_leaves_the_checkpoint_and_resume_saves_it(tmp_path, run_main):
    """In this process (``main``, what the command calls): the command's refusals in one line are test_faults'."""
    (tmp_path / "models").write_text("a file where the models folder goes\n")
    args = (*TINY, "--seeds", "0", "--results", str(tmp_path), "--save-model")
    out = run_main(main, "run", *args)
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert line.startswith(f"error: cannot write the model {tmp_path / 'models' / 'tiny-'}") and "--resume" in line
    assert not list(tmp_path.glob("*.json")) and list((tmp_path / ".work").glob("*/checkpoint.pt"))
    (tmp_path / "models").unlink()
    out = run_main(main, "run", *args, "--resume")
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    assert record["resumed"] and (tmp_path / "models" / f"{record['run_id']}.pt").is_file()
