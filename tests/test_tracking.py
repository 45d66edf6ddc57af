"""Live tracking (``--tracker``): what a run logs as it trains, read back through each library's own reader
(TensorBoard's EventAccumulator, MLflow's client on its file store, W&B's record protobuf in the offline run's
``.wandb`` file), against the run's record."""

from __future__ import annotations

import importlib.util
import io
import json
import signal
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pytest
import tiny_domain
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_faults import _start, _wait_for_epoch
from tiny_domain import harness, resume_args

from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from domains.rl.update_stats import means_since
from harness.cli import main
from harness.run import tracking
from harness.run.stopping import EXIT_STOPPED


def _record(results: Path) -> dict:
    [path] = sorted(results.glob("*.json"))
    return json.loads(path.read_text())


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard log folder as (step, value) pairs, through TensorBoard's own reader."""
    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _tiny(results: Path, *args: str):
    out = harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(results), *args)
    assert out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """One tiny run with the default tracker, read by several tests: its results folder, output and record."""
    results = tmp_path_factory.mktemp("default")
    out = _tiny(results)
    return results, out, _record(results)


def test_tensorboard_is_on_by_default_and_holds_the_curve_and_the_metrics(default_run):
    results, out, record = default_run
    rid = record["run_id"]
    assert record["info"]["tracking"] == {"tensorboard": f"tb/{rid}"}
    assert out.stderr.count("tracking: ") == 1
    assert f"tracking: tensorboard --logdir {results / 'tb'}\n" in out.stderr
    logged = _scalars(results / "tb" / rid)
    assert logged["loss"] == [(p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]
    assert logged["final/accuracy"] == [(3, pytest.approx(record["metrics"]["accuracy"]))]


def test_trackers_change_neither_the_run_id_nor_the_record_otherwise(tmp_path, default_run, run_main):
    _, _, on = default_run
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results",
                   str(tmp_path / "none"), "--tracker", "none")
    assert out.returncode == 0, out.stderr
    off = _record(tmp_path / "none")
    assert on["run_id"] == off["run_id"] and on["curve"] == off["curve"] and on["metrics"] == off["metrics"]
    assert "tracking" not in off["info"] and "tracking: " not in out.stderr
    assert not (tmp_path / "none" / "tb").exists()


def test_a_real_domain_logs_its_step_losses_and_class_prior_estimates(tmp_path, run_main):
    out = run_main(main, "run", "--domain", "graph", "--loss", "dcl", "--set", "loss.tau_plus=auto", "--set",
                   "epochs=1", "--seeds", "0", "--results", str(tmp_path), "--quiet")
    assert out.returncode == 0, out.stderr
    record = _record(tmp_path)
    logged = _scalars(tmp_path / record["info"]["tracking"]["tensorboard"])
    [point] = record["curve"]
    steps = [step for step, _ in logged["step_loss"]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 1  # one value per optimizer step
    mean = np.mean([value for _, value in logged["step_loss"]])
    # the epoch's loss is the mean over its graphs (a smaller last batch weighs less): close to the steps' mean
    assert mean == pytest.approx(point["loss"], rel=0.05)
    for key in ("loss", "prior", "prior_raw", "graphs_per_s"):
        assert logged[key] == [(steps[-1], pytest.approx(point[key], rel=1e-6))], key
    assert logged["lr"] == [(steps[-1], pytest.approx(record["config"]["lr"]))]


def _spec() -> RunSpec:
    return RunSpec(domain="tiny", method="linear", dataset="blobs", loss="infonce", loss_params={}, preset="quick",
                   seed=0, config=tiny_domain.TinyConfig())


def test_a_resumed_run_keeps_one_value_per_step_and_a_fresh_start_clears_the_log(tmp_path):
    first = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=False, work_dir=tmp_path)
    for step in range(1, 5):
        first.log(step, {"loss": 1.0})
    first.close()  # interrupted after step 4; its checkpoint was at step 2
    resumed = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=True, work_dir=tmp_path)
    for step in range(3, 6):
        resumed.log(step, {"loss": 2.0})
    resumed.close()
    assert _scalars(tmp_path / "tb" / "r-s0")["loss"] == [(1, 1.0), (2, 1.0), (3, 2.0), (4, 2.0), (5, 2.0)]
    fresh = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=False, work_dir=tmp_path)
    fresh.log(1, {"loss": 3.0})
    fresh.close()
    assert _scalars(tmp_path / "tb" / "r-s0")["loss"] == [(1, 3.0)]


def test_curl_logs_each_episodes_mean_update_statistics_once():
    recent = {"critic_loss": [torch.tensor(1.0), torch.tensor(3.0), torch.tensor(5.0)], "alpha": [torch.tensor(2.0)]}
    assert means_since(recent, {}) == {"critic_loss": 3.0, "alpha": 2.0}
    assert means_since(recent, {"critic_loss": 1, "alpha": 1}) == {"critic_loss": 4.0}
    assert means_since(recent, {"critic_loss": 3, "alpha": 1}) == {}


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[int, dict[str, float]]] = []

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.calls.append((step, scalars))


def test_log_scalars_passes_numbers_on_leaves_the_rest_out_and_refuses_tensors(tmp_path):
    recorder = _Recorder()
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, trackers=[recorder])
    ctx.log_scalars(7, {"loss": 1, "lr": np.float32(0.5), "returns": [1.0], "train_return": None, "amp": True,
                        "arch": "resnet18"})
    ctx.log_scalars(8, {"train_return": None})  # nothing left to log: no call
    assert recorder.calls == [(7, {"loss": 1.0, "lr": 0.5})]
    with pytest.raises(TypeError, match="'loss' is a tensor"):
        ctx.log_scalars(9, {"loss": torch.tensor(1.0)})
    RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path).log_scalars(1, {"a": 1})


def test_tracker_choices_and_a_missing_library(tmp_path, monkeypatch, run_main):
    assert tracking.resolve(None) == ["tensorboard"]
    assert tracking.resolve(["none"]) == []
    assert tracking.resolve(["mlflow", "tensorboard", "mlflow"]) == ["mlflow", "tensorboard"]
    with pytest.raises(UserError, match="cannot be combined"):
        tracking.resolve(["none", "wandb"])
    # A W&B that cannot be imported: one error line naming the install command, before anything is written.
    fake = tmp_path / "fake"
    (fake / "wandb").mkdir(parents=True)
    (fake / "wandb" / "__init__.py").write_text("raise ImportError('planted: no wandb here')\n")
    monkeypatch.syspath_prepend(str(fake))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)  # else a W&B imported earlier here is reused
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results",
                   str(tmp_path / "results"), "--tracker", "wandb")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "error: this needs the Python package 'wandb' (planted: no wandb here); install it with: "
        "pip install 'contrastive-harness[wandb]'"]
    assert not (tmp_path / "results").exists()


def test_a_sweep_logs_each_job(tmp_path, run_main, monkeypatch):
    """The sweep through ``main`` in this process (its command's subprocess tests are test_harness_sweep_outcomes'):
    its jobs run in the worker it spawns, which loads the tiny domain as a plugin."""
    monkeypatch.setenv("HARNESS_PLUGINS", "tiny_domain")
    out = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce,dcl", "--seeds", "0", "--results",
                   str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"tracking: tensorboard --logdir {tmp_path / 'tb'}" in out.stdout
    for path in tmp_path.glob("*.json"):
        record = json.loads(path.read_text())
        logged = _scalars(tmp_path / record["info"]["tracking"]["tensorboard"])
        assert [v for _, v in logged["loss"]] == pytest.approx([p["loss"] for p in record["curve"]])


def _wandb_records(path: Path) -> list:
    """The records of an offline run's ``.wandb`` file, parsed by wandb's own protobuf (``Record``). The file is
    a LevelDB-style log (wandb no longer ships a Python reader for it): a 7-byte header, then 32 KiB blocks of
    chunks, each a 7-byte header (checksum, length, type: 1 whole, 2 first, 3 middle, 4 last) and its bytes."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32 * 1024
    assert data[:4] == b":W&B"
    pos, part, records = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or (length == 0 and kind == 0):  # the zero padding at a block's end
            pos += left
            continue
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(part)
            records.append(record)
            part = b""
    return records


def _items(items) -> dict:
    """The key/value items of a W&B record (config, history row, summary update) as a dict; a key may come as a
    path (``nested_key``)."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def _installed(*names: str) -> list[str]:
    """Those of the tracker libraries ``names`` that are installed (a test of one skips where it is not)."""
    return [name for name in names if importlib.util.find_spec(name) is not None]


def _tracker_args(names: list[str]) -> list[str]:
    """``--tracker`` once for each of ``names``."""
    return [arg for name in names for arg in ("--tracker", name)]


@contextmanager
def _tracker_env() -> Iterator[None]:
    """W&B offline, and MLflow on the file store under the results folder (MLflow 3 reads it only when allowed)."""
    with pytest.MonkeyPatch.context() as env:
        env.delenv("WANDB_MODE", raising=False)
        env.delenv("MLFLOW_TRACKING_URI", raising=False)
        env.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        yield


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, dict]:
    """One tiny run logged by TensorBoard, W&B and MLflow at once (those installed), read by the test of each:
    its results folder, output and record."""
    results = tmp_path_factory.mktemp("tracked")
    with _tracker_env():
        out = _tiny(results, *_tracker_args(["tensorboard", *_installed("wandb", "mlflow")]))
    return results, out, _record(results)


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (the [wandb] extra)")
def test_wandb_writes_an_offline_run_with_the_curve_and_the_metrics(tracked_run):
    results, out, record = tracked_run
    folder = results / record["info"]["tracking"]["wandb"]
    assert f"tracking: wandb sync {folder}" in out.stderr
    assert "WARNING" not in out.stderr  # wandb's "URL not available in offline run" showed without -v (session 33)
    [log] = folder.glob("run-*.wandb")
    found = _wandb_records(log)
    kinds = [r.WhichOneof("record_type") for r in found]
    [run] = [r.run for r in found if r.HasField("run")]
    assert run.display_name == record["run_id"]
    config = _items(run.config.update)
    assert config["seed"] == 0 and config["loss"] == "infonce" and config["epochs"] == 3
    history = [_items(r.history.item) for r in found if r.HasField("history")]
    assert [(row["_step"], row["loss"]) for row in history] == [
        (p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]
    summary = {k: v for r in found if r.HasField("summary") for k, v in _items(r.summary.update).items()}
    assert summary["final/accuracy"] == pytest.approx(record["metrics"]["accuracy"])
    assert "exit" in kinds and [r.exit.exit_code for r in found if r.HasField("exit")] == [0]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed (the [mlflow] extra)")
def test_mlflow_file_store_holds_the_curve_the_params_and_the_metrics(tmp_path, monkeypatch, tracked_run, run_main):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads its file store only with this set
    results, out, record = tracked_run
    assert set(record["info"]["tracking"]) == {"mlflow", "tensorboard", *_installed("wandb")}
    uri = f"file:{results / 'mlruns'}"
    assert f"tracking: mlflow ui --backend-store-uri {uri}" in out.stderr
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    [run] = client.search_runs([client.get_experiment_by_name("contrastive-harness").experiment_id])
    assert run.info.run_name == record["run_id"] and run.info.status == "FINISHED"
    assert record["info"]["tracking"]["mlflow"] == f"mlruns/{run.info.experiment_id}/{run.info.run_id}"
    assert run.data.params["seed"] == "0" and run.data.params["epochs"] == "3"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]
    assert run.data.metrics["final/accuracy"] == pytest.approx(record["metrics"]["accuracy"])
    failed = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "fail=true",
                      "--results", str(tmp_path), "--tracker", "mlflow")
    assert failed.returncode == 1
    assert _mlflow_statuses(tmp_path) == ["FAILED"]



@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed (the [mlflow] extra)")
def test_a_log_that_cannot_be_written_is_one_error_and_leaves_no_tracker_run_running(tmp_path, monkeypatch,
                                                                                       default_run, run_main):
    """The trackers open before the log: where the log cannot then be opened (a folder in its place), the run
    stops with one error line naming it, and the MLflow run that opened ends FAILED, not RUNNING for ever."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    record = tmp_path / f"{default_run[2]['run_id']}.json"  # the tracker is not in the run id (a test above)
    log = record.with_suffix(".log")
    log.mkdir()
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(tmp_path),
                   "--tracker", "mlflow")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"error: cannot write the run's log {log}: Is a directory"
    assert not record.exists()
    assert _mlflow_statuses(tmp_path) == ["FAILED"]


def _stopped(results: Path, trackers: list[str]) -> str:
    """A tiny run of 6 epochs, stopped by SIGTERM after epoch 2 (at a checkpoint, exit 75): its stderr."""
    # The run holds after epoch 2 till `release` exists: SIGTERM reaches it there however it is scheduled.
    release = results.parent / f"{results.name}-release"
    proc = _start(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=6",
                   "--results", str(results), *_tracker_args(trackers)], hold=(2, release))
    _wait_for_epoch(results, 2)
    proc.send_signal(signal.SIGTERM)
    release.touch()
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_STOPPED, stderr
    return stderr


def _mlflow_statuses(results: Path) -> list[str]:
    """The statuses of the runs in the harness's MLflow experiment of ``results`` (its file store), sorted."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{results / 'mlruns'}")
    runs = client.search_runs([client.get_experiment_by_name("contrastive-harness").experiment_id])
    return sorted(r.info.status for r in runs)


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> tuple[Path, dict, int, str, list[str]]:
    """One tiny run logged by W&B and MLflow at once (those installed), read by the test of each: :func:`_stopped`
    (SIGTERM), then resumed with the command it printed (``--tracker`` included), through ``main`` in this process
    (the resume of a subprocess is test_faults'). Its results folder, record, the epoch the first attempt stopped at,
    the resumed run's stderr, and the MLflow statuses between the attempts."""
    trackers = _installed("wandb", "mlflow")
    if not trackers:
        pytest.skip("neither wandb nor mlflow is installed")
    results = tmp_path_factory.mktemp("resumed")
    with _tracker_env():
        stderr = _stopped(results, trackers)
        between = _mlflow_statuses(results) if "mlflow" in trackers else []
        hint = stderr.strip().splitlines()[-1]
        said = io.StringIO()
        # not run_main: a fixture of each test, this one is of the module's
        with redirect_stderr(said), redirect_stdout(io.StringIO()):
            code = main(resume_args(hint))
    assert code == 0, said.getvalue()
    record = _record(results)
    assert record["resumed"] and record["info"]["start_epoch"] == 2
    return results, record, record["info"]["start_epoch"], said.getvalue(), between


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (the [wandb] extra)")
def test_a_resumed_run_goes_on_in_the_same_wandb_run_one_value_a_step(resumed_run):
    results, record, stopped, stderr, _ = resumed_run
    logs = sorted((results / "wandb").glob("offline-run-*/run-*.wandb"), key=lambda p: p.stat().st_mtime)
    assert len(logs) == 2  # one offline folder per attempt
    attempts = [_wandb_records(log) for log in logs]
    ids = {r.run.run_id for found in attempts for r in found if r.HasField("run")}
    assert len(ids) == 1  # the resumed attempt reopened the interrupted attempt's W&B run
    assert f"tracking: wandb sync {results / 'wandb'}/offline-run-*-{ids.pop()}*" in stderr
    steps = [[_items(r.history.item)["_step"] for r in found if r.HasField("history")] for found in attempts]
    assert steps == [list(range(1, stopped + 1)), list(range(stopped + 1, 7))]
    history = [_items(r.history.item) for found in attempts for r in found if r.HasField("history")]
    assert [(row["_step"], row["loss"]) for row in history] == [
        (p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]
    # the stopped attempt ends as W&B's preempted run, with the harness's exit status; not failed (exit code 1)
    assert [[r.exit.exit_code for r in found if r.HasField("exit")] for found in attempts] == [[EXIT_STOPPED], [0]]
    assert [any(r.HasField("preempting") for r in found) for found in attempts] == [True, False]
    summary = {k: v for r in attempts[1] if r.HasField("summary") for k, v in _items(r.summary.update).items()}
    assert summary["final/accuracy"] == pytest.approx(record["metrics"]["accuracy"])


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed (the [mlflow] extra)")
def test_a_resumed_run_goes_on_in_the_same_mlflow_run_one_value_a_step(monkeypatch, resumed_run):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    results, record, _, _, between = resumed_run
    assert between == ["KILLED"]
    client = MlflowClient(tracking_uri=f"file:{results / 'mlruns'}")
    [run] = client.search_runs([client.get_experiment_by_name("contrastive-harness").experiment_id])
    assert run.info.run_name == record["run_id"] and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "final/accuracy")] == [
        (6, pytest.approx(record["metrics"]["accuracy"]))]


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed (the [mlflow] extra)")
def test_mlflow_marks_a_run_stopped_by_ctrl_c_killed_not_failed(tmp_path, monkeypatch, run_main):
    """Ctrl-C ends a run at once, with its checkpoint kept for --resume, as a stop signal does at a checkpoint
    (the resumed test above): MLflow's status for a run stopped on purpose is KILLED; FAILED is a failure's. In this
    process, the KeyboardInterrupt a Ctrl-C raises right after the second checkpoint (the signal's way to it, exit
    130, is test_faults.test_ctrl_c_exits_130_with_the_resume_command_and_the_command_finishes_the_run's)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    save = RunContext.save_checkpoint

    def interrupted(self, objects, **extra):
        save(self, objects, **extra)
        if extra["epoch"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunContext, "save_checkpoint", interrupted)
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=6",
                   "--results", str(tmp_path), "--tracker", "mlflow")
    assert out.returncode == 130 and "interrupted; continue with: " in out.stderr, out.stderr
    assert _mlflow_statuses(tmp_path) == ["KILLED"]


def _crashed_then_resumed(kind: type, results: Path, work: Path) -> None:
    """An attempt that logged steps 1-4 and ended without a summary (its checkpoint was at step 2), then a resumed
    one that logs steps 3-5 and finishes."""
    first = kind(results, "r-s0", _spec(), False, work)
    for step in range(1, 5):
        first.log(step, {"loss": 1.0})
    first.close()
    resumed = kind(results, "r-s0", _spec(), True, work)
    for step in range(3, 6):
        resumed.log(step, {"loss": 2.0})
    resumed.close(tracking.FINISHED, {"accuracy": 0.5})


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow is not installed (the [mlflow] extra)")
def test_mlflow_keeps_the_steps_an_interrupted_attempt_logged_and_a_fresh_start_opens_a_new_run(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    work = tmp_path / "work"
    work.mkdir()
    _crashed_then_resumed(tracking.MlflowTracker, tmp_path, work)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
    experiment = client.get_experiment_by_name("contrastive-harness").experiment_id
    [run] = client.search_runs([experiment])
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [
        (1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 2.0)]
    assert run.data.metrics["final/accuracy"] == 0.5 and run.info.status == "FINISHED"
    tracking.MlflowTracker(tmp_path, "r-s0", _spec(), False, work).close()  # not resumed: a run of its own
    assert len(client.search_runs([experiment])) == 2


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb is not installed (the [wandb] extra)")
def test_wandb_logs_only_the_steps_after_the_interrupted_attempts_last(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    work = tmp_path / "work"
    work.mkdir()
    _crashed_then_resumed(tracking.WandbTracker, tmp_path, work)
    logs = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"), key=lambda p: p.stat().st_mtime)
    rows = [[(_items(r.history.item)["_step"], _items(r.history.item)["loss"]) for r in _wandb_records(log)
             if r.HasField("history")] for log in logs]
    assert rows == [[(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0)], [(5, 2.0)]]


@pytest.mark.parametrize("name, folder", [("tensorboard", "tb"), ("wandb", "wandb"), ("mlflow", "mlruns")])
def test_a_tracker_folder_that_is_a_symbolic_link_is_refused_before_training(tmp_path, monkeypatch, run_main, name,
                                                                             folder):
    """A linked wandb/ or mlruns/ was written through (to wherever it pointed), where tb/ was refused: each is
    refused, the run not trained (no record) and nothing written where the link points."""
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    elsewhere, results = tmp_path / "elsewhere", tmp_path / "results"
    elsewhere.mkdir()
    results.mkdir()
    (results / folder).symlink_to(elsewhere)
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--results", str(results),
                   "--tracker", name)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"{results / folder} is a symbolic link" in out.stderr
    assert list(elsewhere.iterdir()) == [] and not list(results.glob("*.json"))
