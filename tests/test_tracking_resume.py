"""Live tracking: a resumed run that has nothing left to train, when a resumed run's trackers open (and that
opening them counts in none of its timings), and run ids that are not plain names."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from test_plugins import _harness
from test_tracking import _scalars, _spec

from domains.errors import UserError
from harness.run import stopping, tracking
from harness.run.stopping import EXIT_STOPPED


def test_a_resumed_run_with_nothing_left_to_train_keeps_its_curve_and_logs_the_summary_at_its_last_step(tmp_path):
    first = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=False, work_dir=tmp_path)
    for step in range(1, 5):
        first.log(step, {"loss": float(step)})
    first.close()  # trained to the end (its last checkpoint), then killed in the evaluation
    resumed = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=True, work_dir=tmp_path)
    # nothing left to train: no step logged, only the evaluation's metrics
    resumed.close(tracking.FINISHED, {"accuracy": 90.0})
    logged = _scalars(tmp_path / "tb" / "r-s0")
    assert logged["loss"] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]  # not purged from step 0
    assert logged["final/accuracy"] == [(4, 90.0)]  # at the end of training, not at step 0


def test_a_resumed_run_that_trains_still_purges_from_where_it_goes_on(tmp_path):
    first = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=False, work_dir=tmp_path)
    for step in range(1, 5):
        first.log(step, {"loss": 1.0})
    first.close()
    resumed = tracking.TensorBoardTracker(tmp_path, "r-s0", _spec(), resume=True, work_dir=tmp_path)
    resumed.log(3, {"loss": 2.0})
    resumed.close(tracking.FINISHED, {"accuracy": 90.0})
    logged = _scalars(tmp_path / "tb" / "r-s0")
    assert logged["loss"] == [(1, 1.0), (2, 1.0), (3, 2.0)] and logged["final/accuracy"] == [(3, 90.0)]


SLOW_S = 2.0  # each opening of the trackers: far longer than the tiny run's own work, even on a loaded machine


def test_opening_the_trackers_counts_in_no_timing_of_a_resumed_run(tmp_path, monkeypatch):
    """A resumed run opens its log and trackers as its domain restores the checkpoint, within the timed
    pretraining: their opening (seconds for W&B) counted in its pretrain_s and total_s, and a fresh attempt's,
    before its training, in the elapsed seconds its checkpoint passes on (earlier_s). None counts it now, as a fresh
    run's timings never did. Each opening here sleeps SLOW_S; the tiny run's work takes a fraction of it."""
    from harness.cli import main

    real, opened = tracking.open_trackers, []

    def slow(names, results, run_id, spec, resume, *args, **kw):
        time.sleep(SLOW_S)
        opened.append(resume)
        return real(names, results, run_id, spec, resume, *args, **kw)

    args = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=3", "--quiet",
            "--tracker", "none", "--results"]
    # This interpreter's first training (its imports, torch's first steps) takes seconds on a loaded machine: done
    # first, elsewhere, so that the timings below are the tiny run's own work.
    assert main([*args, str(tmp_path / "warm-up")]) == 0
    args.append(str(tmp_path))
    monkeypatch.setattr(tracking, "open_trackers", slow)
    # the first attempt stops at its first checkpoint, as SIGTERM would stop it
    monkeypatch.setattr(stopping, "stop_reason",
                        lambda: "a test's stop" if list(tmp_path.glob(".work/*/checkpoint.pt")) else None)
    assert main(args) == EXIT_STOPPED
    monkeypatch.setattr(stopping, "stop_reason", lambda: None)
    assert main([*args, "--resume"]) == 0
    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert opened == [False, True] and record["resumed"] and record["info"]["start_epoch"] == 1
    timings = record["timings"]
    assert 0 < timings["earlier_s"] < timings["pretrain_s"] < timings["total_s"] < SLOW_S, timings


PLUGIN = '''import domains, tiny_domain


@domains.register
class Unrestored(tiny_domain.TinyDomain):
    """The tiny domain, less its resume: it never calls restore_checkpoint, so each attempt trains from the start."""

    name = "unrestored"

    def pretrain(self, spec, ctx, data):
        ctx.restore_checkpoint = lambda *args, **kw: None
        if not ctx.resume:  # the first attempt stops at its first checkpoint, as SIGTERM would stop it
            ctx.stop_reason = lambda: "a test's stop" if ctx.checkpoint_path.exists() else None
        return super().pretrain(spec, ctx, data)
'''


def test_a_resumed_run_whose_domain_restores_no_checkpoint_tracks_its_training_live(tmp_path):
    """A resumed run's trackers opened only as its domain restored the checkpoint: a plugin's domain that never
    calls restore_checkpoint held its log until the run ended, and its trackers missed all it trained. They open
    at its first progress loop now (or log_scalars), and TensorBoard holds the resumed attempt's curve."""
    (tmp_path / "unrestored_plugin.py").write_text(PLUGIN)
    results = tmp_path / "results"
    args = ["run", "--domain", "unrestored", "--loss", "infonce", "--seeds", "0", "--set", "epochs=3", "--quiet",
            "--results", str(results)]
    stopped = _harness(tmp_path, *args, names="tiny_domain,unrestored_plugin")
    assert stopped.returncode == EXIT_STOPPED, stopped.stderr
    out = _harness(tmp_path, *args, "--resume", names="tiny_domain,unrestored_plugin")
    assert out.returncode == 0, out.stderr
    [record] = [json.loads(p.read_text()) for p in results.glob("*.json")]
    assert record["resumed"] and [p["epoch"] for p in record["curve"]] == [1, 2, 3]
    logged = _scalars(results / "tb" / record["run_id"])
    assert logged["loss"] == [(p["epoch"], pytest.approx(p["loss"])) for p in record["curve"]]


@pytest.mark.parametrize("run_id", ["../victim", "a/../../victim", "..", "", "x\ny", "/abs", "a\\b"])
def test_a_run_id_that_is_not_one_plain_name_is_refused_and_clears_nothing(tmp_path, run_id):
    results, victim = tmp_path / "results", tmp_path / "results" / "victim"
    victim.mkdir(parents=True)
    (victim / "keep.txt").write_text("a user's file")
    with pytest.raises(UserError, match="must be one plain file name"):
        tracking.TensorBoardTracker(results, run_id, _spec(), resume=False, work_dir=tmp_path)
    with pytest.raises(UserError, match="must be one plain file name"):
        tracking.open_trackers(["tensorboard"], results, run_id, _spec(), False, tmp_path, announce=False)
    assert (victim / "keep.txt").read_text() == "a user's file"


def _texts(folder) -> dict[str, list[tuple[int, str]]]:
    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
    }


def test_each_tensorboard_run_says_what_it_is_so_a_sweeps_grid_points_can_be_told_apart(tmp_path):
    # In TensorBoard a run is its folder's name, the run id: its hash alone told loss.alpha=0.1 from 0.5.
    for rid, alpha in (("pucl-aaaa-s0", 0.1), ("pucl-bbbb-s0", 0.5)):
        spec = dataclasses.replace(_spec(), loss="pucl", loss_params={"alpha": alpha, "mode": "a|b"})
        tracker = tracking.TensorBoardTracker(tmp_path, rid, spec, resume=False, work_dir=tmp_path)
        tracker.log(1, {"loss": 1.0})
        tracker.close(tracking.FINISHED, {"accuracy": 90.0})
        [(step, text)] = _texts(tmp_path / "tb" / rid)[f"{tracking.IDENTITY}/text_summary"]
        assert step == 0 and f"| loss.alpha | {alpha} |" in text and "| loss | pucl |" in text
        assert "| loss.mode | a\\|b |" in text  # a pipe would split the table's cell
    resumed = tracking.TensorBoardTracker(tmp_path, "pucl-aaaa-s0", _spec(), resume=True, work_dir=tmp_path)
    resumed.log(1, {"loss": 2.0})
    resumed.close(tracking.FINISHED, {"accuracy": 91.0})
    assert len(_texts(tmp_path / "tb" / "pucl-aaaa-s0")[f"{tracking.IDENTITY}/text_summary"]) == 1


def test_a_missing_tensorboard_is_one_line_that_says_it_is_the_default_and_how_to_go_without(monkeypatch):
    import torch.utils

    monkeypatch.delattr(torch.utils, "tensorboard", raising=False)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the package were not installed
    with pytest.raises(UserError) as caught:
        tracking.check(tracking.resolve(None))  # no --tracker given: the default
    message = str(caught.value)
    assert "\n" not in message and "(--tracker tensorboard, the default)" in message
    assert "pip install tensorboard" in message and "--tracker none" in message
    tracking.check(tracking.resolve(["none"]))  # tracking off: nothing to import


def test_the_printed_tensorboard_command_pastes_into_a_shell_for_a_folder_with_a_space(tmp_path):
    results = tmp_path / "my results"
    tracker = tracking.TensorBoardTracker(results, "r-s0", _spec(), resume=False, work_dir=tmp_path)
    tracker.close()
    assert shlex.split(tracker.hint) == ["tensorboard", "--logdir", str(results / "tb")]
