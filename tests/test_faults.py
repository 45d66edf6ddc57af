"""Fault injection: kills, interrupts, concurrent writers, damaged records and data, unwritable folders and
failed writes. Each case checks that nothing was lost and that the message names the problem. Most run the
CLI in a subprocess on the tiny test domain (seconds); the data cases use a small TU-format set written here.
Kill -9 and its exact resume: test_stop.py, beside SIGTERM's, with which it shares the uninterrupted run."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
import torch
from support import default_sigint, toy_tu, wait_for
from tiny_domain import (
    REPO,
    RESUMES_WITH,
    TinyExtras,
    harness,
    harness_env,
    resume_args,
    synthetic_record,
    write_records,
)

from domains.context import RunContext
from domains.errors import NonFiniteLossError, UserError
from harness import records
from harness.cli import main
from harness.run.stopping import EXIT_STOPPED

TINY = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--quiet"]
STABLE = ("started_at", "finished_at", "timings", "throughput", "resumed", "info", "hardware")


def _records(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]


def _same_result(a: dict, b: dict) -> None:
    """Equal but for what says when, where and how fast it ran."""
    assert {k: v for k, v in a.items() if k not in STABLE} == {k: v for k, v in b.items() if k not in STABLE}


def _start(args: list[str], hold: tuple[int, Path] | None = None) -> subprocess.Popen:
    """``harness ARGS`` in a subprocess; ``hold=(EPOCH, PATH)``: its runs hold after EPOCH till PATH exists (the tiny
    domain's TINY_HOLD_AT), so that a test signals a run that is provably there, then creates PATH."""
    env = harness_env() if hold is None else {**harness_env(), "TINY_HOLD_AT": f"{hold[0]}:{hold[1]}"}
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)


def _wait_for_epoch(results: Path, epoch: int) -> None:
    """Until a run's log in ``results`` says it ended ``epoch``."""
    wait_for(f"a log in {results} to reach epoch {epoch}",
             lambda: f"epoch {epoch}:" in "".join(p.read_text() for p in results.glob("*.log")))


# --- runs: kill -9, Ctrl-C, concurrent writers ---------------------------------------------------------------

def test_ctrl_c_exits_130_with_the_resume_command_and_the_command_finishes_the_run(tmp_path):
    args = [*TINY[:-2], "0,1", "--quiet", "--set", "epochs=8", "--set", "sleep_s=0.3", "--results", str(tmp_path)]
    proc = _start([*args, "--force"])
    _wait_for_epoch(tmp_path, 2)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    hint = stderr.strip().splitlines()[-1]
    assert hint.startswith(f"interrupted; continue with: {RESUMES_WITH} run ") and hint.endswith("--resume")
    assert "--force" in hint  # with --resume it goes on with the forced rerun, keeping the seeds it redid
    [log] = tmp_path.glob("*-s0.log")  # the log beside the record says how it ended (it stopped mid-run)
    assert f"interrupted (Ctrl-C); its checkpoint is {tmp_path / '.work'}" in log.read_text().splitlines()[-1]
    out = harness(*resume_args(hint))
    assert out.returncode == 0, out.stderr
    assert sorted(r["seed"] for r in _records(tmp_path)) == [0, 1]


def test_concurrent_writers_of_the_same_run_leave_one_complete_record(tmp_path):
    procs = [_start([*TINY, "--set", "epochs=3", "--set", "sleep_s=0.2", "--results", str(tmp_path)])
             for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    # a writer that found the run busy in another process is not done: it exits 75
    assert all(p.returncode == (EXIT_STOPPED if "[busy]" in out else 0) for p, (out, _) in zip(procs, outs)), outs
    [record] = _records(tmp_path)
    assert record["status"] == "completed"
    statuses = sorted(line.split("]")[0][1:] for out, _ in outs for line in out.splitlines() if line.startswith("["))
    assert statuses.count("completed") == 1 and set(statuses) <= {"completed", "busy", "skipped"}
    assert not [p for p in tmp_path.rglob("*.tmp")]


# --- records: truncated, corrupted, failed writes, permissions ------------------------------------------------

def _board(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    results, out = tmp_path / "results", tmp_path / "board"
    write_records(results, [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl") for s in range(2)])
    assert main(["leaderboard", "--results", str(results), "--out", str(out)]) == 0
    return results, out, {p.name: p.read_text() for p in out.iterdir() if p.is_file()}


@pytest.mark.parametrize("damage", ["truncated", "not json", "not a record", "nested too deep", "a huge integer"])
def test_a_damaged_record_is_named_and_the_pages_are_untouched(tmp_path, run_main, damage):
    """In this process (``main``, what the command calls); the next test runs the command itself once."""
    results, out, pages = _board(tmp_path)
    victim = sorted(results.glob("*.json"))[0]
    text = victim.read_text()
    victim.write_text({"truncated": text[: len(text) // 2], "not json": "\x00\x01garbage",
                       "not a record": "[1, 2, 3]", "nested too deep": "[" * 100_000,
                       "a huge integer": re.sub(r'"seed": \d+', '"seed": ' + "9" * 5000, text)}[damage])
    for command in ("leaderboard", "report"):
        proc = run_main(main, command, "--results", str(results), "--out", str(out))
        assert proc.returncode == 2 and victim.name in proc.stderr and "cannot be read" in proc.stderr
    proc = run_main(main, "compare", "--baseline", str(results), "--candidate", str(results))
    assert proc.returncode == 2 and victim.name in proc.stderr
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == pages


def test_a_mistyped_results_folder_writes_and_deletes_nothing(tmp_path, run_main):
    results, out, pages = _board(tmp_path)
    mistyped = ("--results", str(tmp_path / "reslts"), "--out", str(out))
    for proc in (harness("leaderboard", *mistyped), run_main(main, "report", *mistyped)):  # the command, then main
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: results folder '{tmp_path / 'reslts'}' does not exist")
    (tmp_path / "empty").mkdir()
    assert run_main(main, "leaderboard", "--results", str(tmp_path / "empty"), "--out", str(out)).returncode == 2
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == pages


@pytest.mark.parametrize("candidate", ["empty", "other"])
def test_compare_with_nothing_to_compare_fails(tmp_path, run_main, candidate):
    results, _, _ = _board(tmp_path)
    (tmp_path / "empty").mkdir()
    write_records(tmp_path / "other", [synthetic_record("infonce", s, 80.0, dataset="blobs_hard") for s in range(2)])
    proc = run_main(main, "compare", "--baseline", str(results), "--candidate", str(tmp_path / candidate))
    assert proc.returncode == 2 and "PASS" not in proc.stderr
    assert ("has no completed records" if candidate == "empty" else "no baseline group has a matching") in proc.stderr


def test_a_truncated_record_of_a_run_is_run_again_and_kept_aside(tmp_path, capsys):
    assert main([*TINY, "--results", str(tmp_path)]) == 0
    [path] = tmp_path.glob("*.json")
    before = json.loads(path.read_text())
    damaged = path.read_text()[:100]
    path.write_text(damaged)
    capsys.readouterr()
    assert main(["leaderboard", "--results", str(tmp_path), "--out", str(tmp_path / "pages")]) == 2
    advice = capsys.readouterr().err
    assert path.name in advice and "own harness run, run again, moves it aside" in advice  # what comes next does it
    assert main([*TINY, "--results", str(tmp_path)]) == 0
    [said] = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert said.startswith("warning: ") and said.endswith(f"moved it to {path.name}.damaged before the run writes "
                                                          "its record")
    _same_result(before, json.loads(path.read_text()))
    assert path.with_name(f"{path.name}.damaged").read_text() == damaged  # nothing written is lost


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    records.write_json_atomic(path, {"a": 1})

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        records.write_json_atomic(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left behind


def test_a_record_that_cannot_be_written_keeps_the_checkpoint_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    def full_disk(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(records, "write_json_atomic", full_disk)
    assert main([*TINY, "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cannot write the record" in err and "No space left on device" in err and "--resume" in err
    assert list((tmp_path / ".work").glob("*/checkpoint.pt"))


def test_an_unusable_results_folder_is_named_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("")
    proc = harness(*TINY, "--results", str(tmp_path / "file" / "results"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"error: --results {tmp_path}/file/results lies under the file {tmp_path}/file, not in a " \
                          "folder\n"


@pytest.mark.parametrize("command", [
    ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--quiet"],
    ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0"],
    ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--dry-run"],
])
def test_a_results_path_that_is_a_file_is_named_as_one(tmp_path, run_main, command):
    """Was mkdir's "...: File exists" (run), or a dry run that went on as if the folder could be written (sweep)."""
    (tmp_path / "file").write_text("kept\n")
    proc = run_main(main, *command, "--results", str(tmp_path / "file"))
    assert proc.returncode == 2 and proc.stderr == f"error: --results {tmp_path}/file is a file, not a folder\n"
    assert (tmp_path / "file").read_text() == "kept\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permissions")
def test_a_read_only_results_folder_is_named(tmp_path):
    tmp_path.joinpath("ro").mkdir(mode=0o555)
    proc = harness(*TINY, "--results", str(tmp_path / "ro"))
    assert proc.returncode == 2 and "ro" in proc.stderr


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_records_respect_the_umask(tmp_path, mask, mode):
    old = os.umask(mask)
    try:
        records.write_json_atomic(tmp_path / "r.json", {})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == mode


# --- checkpoints and training -------------------------------------------------------------------------------

class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_tampered_checkpoint_is_refused_and_a_real_one_loads(tmp_path):
    import numpy as np

    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=True)
    model = torch.nn.Linear(2, 1)
    extra = {"w": torch.ones(2), "rng": np.random.get_state(), "buffer": np.zeros((2, 3), np.uint8),
             "pcg": np.random.default_rng(0).bit_generator.state, "step": np.int64(3), "curve": [{"loss": 1.0}]}
    ctx.save_checkpoint({"model": model}, **extra)
    loaded = ctx.restore_checkpoint({"model": torch.nn.Linear(2, 1)})
    assert loaded["rng"][0] == "MT19937" and loaded["buffer"].dtype == np.uint8 and loaded["step"] == 3
    with pytest.raises(UserError, match="holds no head; rerun without --resume"):
        ctx.restore_checkpoint({"model": model, "head": torch.nn.Linear(1, 1)})
    torch.save({"evil": _Exploit()}, ctx.checkpoint_path)
    with pytest.raises(UserError, match=r"checkpoint.pt cannot be read \(UnpicklingError.*rerun without --resume"):
        ctx.restore_checkpoint({"model": model})
    torch.save({"model": model.state_dict()}, ctx.checkpoint_path)  # an older layout, or another program's file
    with pytest.raises(UserError, match="not a checkpoint of this version"):
        ctx.restore_checkpoint({"model": model})


def test_the_checkpoint_restores_the_objects_and_every_random_generator(tmp_path):
    import random

    import numpy as np

    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=True)
    assert ctx.restore_checkpoint({}) is None  # nothing saved yet: a fresh start
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    ctx.save_checkpoint({"model": model, "optimizer": opt, "loss": None}, epoch=2)

    def draws() -> tuple:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    expected = draws()
    torch.manual_seed(2)  # a new process: other weights, other random states
    random.seed(2)
    np.random.seed(2)
    fresh = torch.nn.Linear(3, 2)
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=0.1)
    assert ctx.restore_checkpoint({"model": fresh, "optimizer": fresh_opt}) == {"epoch": 2}
    assert draws() == expected
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values()))
    assert fresh_opt.state_dict()["state"][0]["step"] == 1
    assert RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path).restore_checkpoint(
        {"model": fresh}) is None  # not resuming: the checkpoint is ignored


def test_the_extras_then_the_objects_read_the_checkpoint_once(tmp_path, monkeypatch):
    """Text builds its model from the saved vocabulary (saved_extras), then restores it: one read of the file."""
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=True)
    model = torch.nn.Linear(3, 2)
    ctx.save_checkpoint({"model": model}, vocabulary="a b c")
    reads = []
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: reads.append(1) or load(*a, **k))
    assert ctx.saved_extras() == {"vocabulary": "a b c"}
    fresh = torch.nn.Linear(3, 2)
    assert ctx.restore_checkpoint({"model": fresh}) == {"vocabulary": "a b c"}
    assert len(reads) == 1 and torch.equal(fresh.weight, model.weight)
    assert ctx.restore_checkpoint({"model": fresh}) == {"vocabulary": "a b c"} and len(reads) == 2  # not kept


def _tamper(ctx: RunContext, change) -> None:
    state = torch.load(ctx.checkpoint_path, weights_only=False)
    change(state)
    torch.save(state, ctx.checkpoint_path)


_TAMPERS = {
    "elapsed_s a string": lambda s: s.update(elapsed_s="abc"),
    "elapsed_s infinite": lambda s: s.update(elapsed_s=float("inf")),
    "objects a list": lambda s: s.update(objects=["model", "optimizer"]),
    "an object's state a list": lambda s: s["objects"].update(model=[1, 2]),
    "extra None": lambda s: s.update(extra=None),
    "rng missing a generator": lambda s: s.update(rng={"python": 5}),
    "rng of the wrong kind": lambda s: s["rng"].update(python=5),
    "torch rng of the wrong size": lambda s: s["rng"].update(torch=torch.zeros(3, dtype=torch.uint8)),
    "a weight of the wrong shape": lambda s: s["objects"]["model"].update(weight=torch.zeros(3)),
    "an optimizer state of the wrong layout": lambda s: s["objects"]["optimizer"].update(param_groups=5),
    "epoch beyond the total": lambda s: s["extra"].update(epoch=10**6),
    "epoch negative": lambda s: s["extra"].update(epoch=-5),
    "epoch a string": lambda s: s["extra"].update(epoch="x"),
    "epoch a bool": lambda s: s["extra"].update(epoch=True),
    "epoch missing": lambda s: s["extra"].pop("epoch"),
    "curve a dict": lambda s: s["extra"].update(curve={"epoch": 1}),
    "a curve point a number": lambda s: s["extra"].update(curve=[1.5]),
    "a curve value a string": lambda s: s["extra"].update(curve=[{"loss": "0.5"}]),
    "curve missing": lambda s: s["extra"].pop("curve"),
}


@pytest.mark.parametrize("tamper", list(_TAMPERS))
def test_a_checkpoint_of_the_right_run_with_a_tampered_state_is_the_clean_error(tmp_path, tamper):
    """The right keys and run key, but a state that does not fit: the 'cannot be read' error, never a raw one."""
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    ctx.save_checkpoint({"model": model, "optimizer": opt}, epoch=2, curve=[{"epoch": 1, "loss": 0.5}])
    restore = functools.partial(ctx.restore_checkpoint, {"model": model, "optimizer": opt}, counters={"epoch": 30},
                                extras=TinyExtras)
    assert restore()["epoch"] == 2
    _tamper(ctx, _TAMPERS[tamper])
    with pytest.raises(UserError, match=r"checkpoint.pt cannot be read \(.*: it is damaged .*rerun without --resume "
                                        r"to start over$"):
        restore()


def test_the_extras_read_before_the_objects_are_checked_as_restoring_checks_them(tmp_path):
    """What a run builds its objects from (text's tokenizer) is read before the restore: of the wrong type, it is
    the same clean error there, not a traceback where the domain uses it."""
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path, resume=True)
    ctx.save_checkpoint({}, epoch=2, curve={"epoch": 1})
    assert ctx.saved_extras() == {"epoch": 2, "curve": {"epoch": 1}}  # nothing declared: nothing checked
    with pytest.raises(UserError, match=r"cannot be read \(its curve has the wrong type \(input should be a valid "
                                        r"list, got dict\): it is damaged"):
        ctx.saved_extras(TinyExtras)


@pytest.mark.parametrize("tamper", ["a weight of the wrong shape", "epoch beyond the total", "rng of the wrong kind",
                                    "a curve point a number"])
def test_resuming_from_a_tampered_checkpoint_is_one_clean_error_line(tmp_path, monkeypatch, capsys, tamper):
    def full_disk(path: Path, data: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:  # a finished run whose record could not be written keeps its checkpoint
        patch.setattr(records, "write_json_atomic", full_disk)
        assert main([*TINY, "--results", str(tmp_path)]) == 2
    [path] = (tmp_path / ".work").glob("*/checkpoint.pt")
    state = torch.load(path, weights_only=False)
    {"a weight of the wrong shape": lambda: state["objects"]["encoder"].update(weight=torch.zeros(3)),
     "epoch beyond the total": lambda: state["extra"].update(epoch=10**6),
     "rng of the wrong kind": lambda: state["rng"].update(python=5),
     "a curve point a number": lambda: state["extra"].update(curve=[1.5])}[tamper]()
    torch.save(state, path)
    capsys.readouterr()
    assert main([*TINY, "--results", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err
    clean = rf"the checkpoint {re.escape(str(path))} cannot be read \([^\n]*: it is damaged or not a checkpoint " \
            r"the harness wrote\); rerun without --resume to start over"
    assert re.fullmatch(rf"error: {clean}\n", err), err  # the message alone, no exception type
    assert not _records(tmp_path) and path.exists()  # a refused --resume: no failed record, the checkpoint kept

def test_a_non_finite_loss_stops_at_once_naming_step_and_value(tmp_path):
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path)
    ctx.check_loss(1.5, 1)
    with pytest.raises(NonFiniteLossError, match=r"the loss is inf at training step 7: .*lower learning rate"):
        ctx.check_loss(float("inf"), 7)
    # at step 1 nothing was updated: no divergence, and no learning rate to blame
    with pytest.raises(UserError, match=r"step 1, on the initial weights before any update: not a divergence") as err:
        ctx.check_loss(float("nan"), 1)
    assert not isinstance(err.value, NonFiniteLossError)
    # a first loss read later than step 1 (rl's first contrastive update) says what its step is
    with pytest.raises(UserError, match=r"the loss is nan at the first update \(step 40\): not a divergence") as err:
        ctx.check_loss(float("nan"), 40, first="at the first update (step 40)")
    assert not isinstance(err.value, NonFiniteLossError)
    ctx.check_loss(2.0, 40, first="at the first update (step 40)")


# Each domain's smallest run: rl's is a tiny CURL (episodes of 10 agent steps, updates from the 6th on).
_SMALL_RUN = {"graph": ["epochs=1"], "text": ["epochs=1"], "vision": ["epochs=1"],
              "rl": ["num_env_steps=2000", "action_repeat=100", "seed_agent_steps=5", "eval_freq=1000",
                     "eval_episodes=1", "checkpoint_freq=0", "image_size=24", "crop_size=20", "hidden_dim=16",
                     "feature_dim=8", "num_filters=4", "batch_size=4"]}


def _run_plugin_loss(tmp_path: Path, domain: str, loss: str, body: str, *options: str) -> subprocess.CompletedProcess:
    """The CLI's run of ``domain`` (with ``options``) on the plugin loss ``loss``, which returns ``body`` (of
    ``scores``)."""
    (tmp_path / f"{loss}.py").write_text(
        "import itertools\n\nfrom losses import register_loss\n\ncalls = itertools.count(1)\n\n\n"
        f"@register_loss({loss!r}, paper='-', summary='-')\n"
        f"def {loss}(scores):\n    return {body}\n")
    env = {**harness_env(), "HARNESS_PLUGINS": loss}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    args = ["run", "--domain", domain, "--loss", loss, "--seeds", "0", "--quiet", "--tracker", "none",
            *(arg for value in _SMALL_RUN[domain] for arg in ("--set", value)), "--results", str(tmp_path / "results"),
            *options]
    return subprocess.run([sys.executable, "-m", "harness", *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


# graph: each step; text: every log_every steps; vision: once an epoch; rl: never on the host but at the first update
@pytest.mark.parametrize("domain", ["graph", "text", "vision", "rl"])
def test_a_loss_that_is_nan_from_the_start_fails_as_no_divergence(tmp_path, request, domain):
    """A user's loss that returns NaN (a bug in its kernel) was reported as training that diverged ("try a lower
    learning rate"), and its record counted on the pages as a non-finite seed (rl's too, from the second update's
    non-finite scores, until its first contrastive loss was read)."""
    if domain == "rl":
        request.getfixturevalue("rendering")
    out = _run_plugin_loss(tmp_path, domain, "nan_nce", "scores.logits.sum() * float('nan')")
    # rl's first loss read is at its first contrastive update (agent step 5 here: updates from the 6th agent step
    # on, counted from 0), after the critic's step of that update: not of the initial weights
    first = ("at the first contrastive update (agent step 5), after 1 critic step (its loss finite)"
             if domain == "rl" else "at training step 1, on the initial weights before any update")
    assert out.returncode == 2 and f"the loss is nan {first}: not a divergence" in out.stderr, out.stderr
    assert "lower learning rate" not in out.stderr
    [record] = _records(tmp_path / "results")
    assert record["status"] == "failed" and not records.RunRecord.model_validate(record).diverged


def test_an_rl_loss_that_is_nan_at_its_first_update_after_a_non_finite_critic_loss_is_a_divergence(tmp_path,
                                                                                                   rendering):
    """At rl's first contrastive update the critic has already stepped (the same update's critic step first): a
    non-finite critic loss there is training that diverged, not the contrastive loss's own fault. The plugin makes
    the critic loss the update reports NaN (as a blown-up critic step would) and its own loss NaN."""
    body = "scores.logits.sum() * float('nan')\n\n\n" \
           "import domains.rl.curl as _curl  # noqa: E402\n_critic = _curl.CurlSac.update_critic\n" \
           "_curl.CurlSac.update_critic = lambda self, *a: _critic(self, *a) * float('nan')"
    out = _run_plugin_loss(tmp_path, "rl", "nan_critic", body, "--device", "cpu")
    assert out.returncode == 2, out.stderr
    assert "the critic loss is nan at agent step 5 (the first contrastive update): training diverged" in out.stderr, \
        out.stderr
    assert "not a divergence" not in out.stderr
    [record] = _records(tmp_path / "results")
    assert record["status"] == "failed" and records.RunRecord.model_validate(record).diverged


def test_an_rl_loss_that_turns_nan_after_its_first_update_is_a_divergence(tmp_path, rendering):
    """Only the first update's loss is read on the host: a NaN from the third on is training that diverged, found
    from the scores of the update after it, and counted on the pages as a non-finite seed. On the CPU, where the
    loss core checks the scores at once (on a GPU its check is queued: a device-side assertion, losses.checks)."""
    out = _run_plugin_loss(tmp_path, "rl", "late_nan",
                           "scores.logits.logsumexp(1).mean() * (1.0 if next(calls) < 3 else float('nan'))",
                           "--device", "cpu")
    assert out.returncode == 2 and "training diverged" in out.stderr, out.stderr
    [record] = _records(tmp_path / "results")
    assert record["status"] == "failed" and records.RunRecord.model_validate(record).diverged


# --- data: mistyped, missing, corrupted, changed --------------------------------------------------------------

def _graph_run(tmp_path: Path, dataset: str, *extra: str, **sets: object) -> list[str]:
    """``sets`` replace the small defaults: a --set key given twice is refused."""
    sets = {"epochs": 1, "svm_folds": 3, "svm_inner_folds": 2, "hidden": 8, **sets}
    return ["run", "--domain", "graph", "--dataset", dataset, "--loss", "jsd", "--seeds", "0", "--quiet",
            *(arg for key, value in sets.items() for arg in ("--set", f"{key}={value}")),
            "--data-root", str(tmp_path / "data"), "--results", str(tmp_path / "results"), *extra]


@pytest.fixture
def graph_cache(tmp_path, monkeypatch):
    pytest.importorskip("torch_geometric")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))


def test_a_mistyped_tu_name_suggests_the_name_without_a_download(tmp_path, graph_cache, monkeypatch, capsys):
    import torch_geometric.datasets

    def no_network(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(torch_geometric.datasets, "TUDataset", no_network)
    assert main(_graph_run(tmp_path, "MUTAGG")) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown dataset 'MUTAGG'; did you mean 'MUTAG'?")
    assert not (tmp_path / "results").exists()  # no record, no folder


def test_a_mistyped_tu_name_through_the_cli(tmp_path):
    proc = harness(*_graph_run(tmp_path, "PROTEINZ"))
    assert proc.returncode == 2 and "unknown dataset 'PROTEINZ'; did you mean 'PROTEINS'?" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 or "Warning" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_missing_data_root_names_where_the_files_go(tmp_path, graph_cache, capsys):
    assert main(_graph_run(tmp_path, "MUTAG", "--set", "download=false")) == 2
    err = capsys.readouterr().err
    assert "TU dataset 'MUTAG' not found" in err and str(tmp_path / "data" / "TU" / "MUTAG" / "raw") in err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("damage, expected", [
    ("label", "TOY_graph_labels.txt, line 5: 'x' is not comma-separated integers"),
    ("truncated", "files with one line per graph disagree (lines: TOY_graph_labels.txt 12"),
])
def test_corrupted_tu_files_are_named(tmp_path, graph_cache, capsys, damage, expected):
    raw = toy_tu(tmp_path / "data")
    labels = raw / "TOY_graph_labels.txt"
    lines = labels.read_text().splitlines(keepends=True)
    labels.write_text("".join(lines[:4] + ["x\n"] + lines[5:]) if damage == "label" else "".join(lines[:12]))
    assert main(_graph_run(tmp_path, "TOY")) == 2
    assert expected in capsys.readouterr().err


def test_changed_data_is_a_new_run_and_resume_does_not_reuse_the_old_one(tmp_path, graph_cache):
    raw = toy_tu(tmp_path / "data")
    assert main(_graph_run(tmp_path, "TOY")) == 0
    [first] = _records(tmp_path / "results")
    labels = raw / "TOY_graph_labels.txt"
    labels.write_text("".join(f"{1 - int(y)}\n" for y in labels.read_text().split()))  # relabelled files
    assert main(_graph_run(tmp_path, "TOY", "--resume")) == 0
    ids = sorted(r["run_id"] for r in _records(tmp_path / "results"))
    assert len(ids) == 2 and first["run_id"] in ids
    assert len({r["data_fingerprint"]["sha256"] for r in _records(tmp_path / "results")}) == 2


def test_values_that_would_fail_after_training_are_refused_before_it(tmp_path, graph_cache, capsys):
    toy_tu(tmp_path / "data")
    assert main(_graph_run(tmp_path, "TOY", svm_folds=1000)) == 2
    err = capsys.readouterr().err
    assert "svm_folds=1000" in err and "largest class has 12 graphs" in err
    # refused when the data is prepared, as a missing dataset is: before the run starts, so no record
    assert _records(tmp_path / "results") == []


def test_a_diverging_run_stops_with_a_failed_record_that_says_so(tmp_path, graph_cache, capsys):
    toy_tu(tmp_path / "data")
    assert main(_graph_run(tmp_path, "TOY", lr="1e8", epochs=5, batch_size=4)) == 2
    err = capsys.readouterr().err
    assert "the loss is nan at training step" in err and "lower learning rate (now --set lr=1e+08)" in err
    [record] = _records(tmp_path / "results")
    assert record["status"] == "failed" and "training diverged" in record["error"]


# --- values that would fail late: refused before any work, in one line, exit 2 ---------------------------------

@pytest.mark.parametrize("args, message", [
    (["--set", "lr=1e309"], "--set lr=1e309: must be a finite number"),  # overflows to inf: diverges at once
    (["--set", "temperature=inf"], "--set temperature=inf: must be a finite number"),  # completes as null
    (["--set", "lr=nan"], "--set lr=nan: must be a finite number"),
    (["--set", "loss.tau_plus=inf"], "tau_plus must be a finite number in [0, 1) or auto, got inf"),
    (["--seeds", "4294967296"], "--seeds 4294967296: a seed must be at most 4294967295"),  # numpy's seed limit
    (["--seeds", "0,5-4294967300"], "--seeds 5-4294967300: a seed must be at most 4294967295"),
    (["--seeds", "0-99999"], "--seeds range '0-99999' holds 100000 seeds"),
    (["--device", "meta"], "unknown --device 'meta'; this machine offers auto, cpu"),
    (["--device", "cuda:99"], "cuda:99"),
])
def test_values_that_would_fail_late_are_refused_up_front(tmp_path, capsys, args, message):
    assert main(["run", "--domain", "tiny", "--loss", "dcl", "--quiet", *args, "--results", str(tmp_path / "r")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line
    assert not (tmp_path / "r").exists()  # nothing ran, nothing was written


def test_the_largest_seed_numpy_takes_runs(tmp_path):
    assert main([*TINY[:-2], "4294967295", "--set", "epochs=1", "--results", str(tmp_path)]) == 0
    assert [r["seed"] for r in _records(tmp_path)] == [4294967295]


def test_every_float_field_of_every_domain_is_finite_unless_it_says_otherwise():
    """``--set`` reads every float field (alone, optional or in a tuple) of every domain's config as finite; a
    field annotated ``allow_inf_nan=True`` takes inf."""
    import typing
    from typing import Annotated

    from pydantic import Field, ValidationError

    import domains
    from harness.run.config import _bare, config_fields, parse_value

    def floats(tp) -> bool:
        inner = _bare(tp)[0]
        return inner is float or any(floats(a) for a in typing.get_args(inner) if a is not Ellipsis)

    checked = 0
    for name in domains.available():
        for tp in config_fields(domains.get(name).config_class).values():
            if floats(tp):
                for text in ("inf", "-inf", "nan", "1e309"):
                    with pytest.raises(ValidationError, match="finite number"):
                        parse_value(text, tp)
                checked += 1
    assert checked >= 20  # lr, temperature, momentum ... of the five domains

    assert parse_value("inf", Annotated[float, Field(allow_inf_nan=True)]) == float("inf")


@pytest.mark.parametrize("command, out, message", [
    (["leaderboard"], "file", "is a file; leaderboard needs a folder"),
    (["report"], "file", "is a file; report needs a folder"),
    (["prior"], "file", "is a file; prior needs a folder"),
    (["bench", "losses"], "file", "is a file; bench needs a folder"),
    (["leaderboard"], "file/pages", "lies under the file"),
    (["compare", "--baseline", "RESULTS", "--candidate", "RESULTS"], "folder", "is a folder; compare needs a file"),
])
def test_an_out_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys, command, out, message):
    results, board, pages = _board(tmp_path)
    (tmp_path / "file").write_text("kept")
    (tmp_path / "folder").mkdir()
    command = [str(results) if part == "RESULTS" else part for part in command]
    own_results = command[0] not in ("compare", "bench")
    args = [*command, *(["--results", str(results)] if own_results else []), "--out", str(tmp_path / out)]
    capsys.readouterr()
    assert main(args) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --out '{tmp_path / out}' ") and message in line
    assert (tmp_path / "file").read_text() == "kept" and not any((tmp_path / "folder").iterdir())
    assert {p.name: p.read_text() for p in board.iterdir() if p.is_file()} == pages


def test_compare_with_a_folder_for_its_report_exits_2_not_1_the_code_of_a_regression(tmp_path):
    results, _, _ = _board(tmp_path)
    proc = harness("compare", "--baseline", str(results), "--candidate", str(results), "--out", str(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == f"error: --out '{tmp_path}' is a folder; compare needs a file, the markdown report\n"


def test_a_cuda_device_must_be_one_this_machine_has(monkeypatch):
    """CUDA stands in for two GPUs: cuda, cuda:0 and cuda:1 are devices; cuda:2, cuda:x and meta are named."""
    from harness.run.runner import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [str(resolve_device(n)) for n in ("auto", "cuda", "cuda:1", "cpu")] == ["cuda", "cuda", "cuda:1", "cpu"]
    with pytest.raises(UserError, match=r"--device cuda:2: this machine has 2 CUDA devices, cuda:0 to cuda:1"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match=r"--device cuda:1: this machine has 1 CUDA device, cuda:0$"):
        resolve_device("cuda:1")  # was "1 CUDA device(s), cuda:0 to cuda:0"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    for name in ("cuda:x", "meta", "cuda:", "xla"):
        with pytest.raises(UserError, match=f"unknown --device '{name}'; this machine offers auto, cpu, cuda, cuda:N"):
            resolve_device(name)
