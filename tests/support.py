"""Helpers shared by several test files: a region where any host-device synchronisation raises, a run
context that dies right after its first checkpoint (to test resuming), a checkpoint extra tampered with and the
error that gives, a tiny TU-format dataset, the Ctrl-C a terminal gives a child process, the records of local runs that
another executor's sweep must equal, the packages' run-code digest computed here, and the wait for a subprocess to
reach a point."""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from domains.context import RunContext
from harness.run_code import run_files


@contextmanager
def no_sync() -> Iterator[None]:
    """Any host-device synchronisation inside raises (CUDA only); the previous mode is restored after."""
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


# How long a test waits for a subprocess to reach a point (an epoch logged, a checkpoint saved): a loaded CI machine
# (two test workers on two cores, each starting subprocesses) has taken over a minute to get a run to its epoch 2.
WAIT_S = 300.0


def wait_for(what: str, reached: Callable[[], bool], timeout: float = WAIT_S) -> None:
    """Poll ``reached`` until it holds; fail, naming ``what``, where it does not within ``timeout`` seconds. A wait
    that went on regardless sent its signal (or kill) before the point the test meant, and the test then failed
    further on, on a symptom of that."""
    deadline = time.monotonic() + timeout
    while not reached():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.05)


def default_sigint() -> None:
    """A ``preexec_fn`` for a child that a test stops with SIGINT. A job started in the background by a
    non-interactive shell (CI, `cmd &`) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt:
    give the child the disposition a terminal gives it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def tamper_extra(checkpoint: Path, name: str, value: object) -> None:
    """Give the extra ``name`` of the checkpoint file ``checkpoint`` the value ``value`` (a tampered file)."""
    state = torch.load(checkpoint, weights_only=False)
    state["extra"][name] = value
    torch.save(state, checkpoint)


def mistyped_extra(name: str) -> str:
    """The clean error (a pattern) for a checkpoint whose extra ``name`` has the wrong type."""
    return rf"checkpoint.pt cannot be read \(its {name}\b.* wrong type .*: it is damaged or not a checkpoint the " \
        r"harness wrote\); rerun without --resume to start over$"


class Killed(Exception):
    """Stands for a process killed right after it saved a checkpoint."""


class KilledAfterCheckpoint(RunContext):
    def save_checkpoint(self, objects, **extra):
        super().save_checkpoint(objects, **extra)
        raise Killed


def toy_tu(root: Path, name: str = "TOY") -> Path:
    """A TU-format set of 24 graphs (triangles, label 0; 4-paths, label 1) under ``root/TU/name/raw``."""
    raw = root / "TU" / name / "raw"
    raw.mkdir(parents=True)
    edges, indicator, labels, node = [], [], [], 1
    for g in range(24):
        n = 3 if g % 2 == 0 else 4
        ids = list(range(node, node + n))
        pairs = [(ids[i], ids[(i + 1) % n]) for i in range(n if n == 3 else n - 1)]
        edges += [p for a, b in pairs for p in ((a, b), (b, a))]
        indicator += [g + 1] * n
        labels.append(g % 2)
        node += n
    (raw / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (raw / f"{name}_graph_indicator.txt").write_text("".join(f"{g}\n" for g in indicator))
    (raw / f"{name}_graph_labels.txt").write_text("".join(f"{y}\n" for y in labels))
    return raw


def record_metrics(results: Path) -> dict[str, tuple]:
    """Each record of ``results`` by run id: its status, metrics and loss curve (what two executors must agree on)."""
    import json

    records = [json.loads(p.read_text()) for p in results.glob("*.json")]
    return {r["run_id"]: (r["status"], r["metrics"], [c["loss"] for c in r["curve"]]) for r in records}


def local_records(results: Path, losses: list[str], *args: str) -> dict[str, tuple]:
    """:func:`record_metrics` of ``harness run --domain tiny --loss LOSS *args`` for each of ``losses``, run in this
    process into ``results``: what a sweep of those runs on another executor must write (a local sweep's jobs run
    exactly these), without a local sweep's interpreters (its own, a probe and a pool of workers)."""
    import tiny_domain  # noqa: F401  (registers the tiny domain in this process; not at the top: most users need not)

    from harness.cli import main

    for loss in losses:
        code = main(["run", "--domain", "tiny", "--loss", loss, *args, "--results", str(results), "--quiet",
                     "--tracker", "none"])
        assert code == 0, f"harness run --loss {loss} {' '.join(args)} exited {code}"
    return record_metrics(results)


def run_code_digest(root: Path) -> str:
    """sha256 over the relative path and bytes of each file of ``run_files(root)`` (tested in test_run_code.py), in
    path order, as harness.version's package digest is meant to be; the files under ``root`` are read afresh."""
    run_files.cache_clear()  # the files under root may have changed since
    digest = hashlib.sha256()
    for path in run_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def git_repo(path: Path) -> Callable[..., str]:
    """A new git repository at ``path`` (the test skips where git is missing) and a runner of git commands in it
    that returns their output, stripped."""
    if shutil.which("git") is None:
        pytest.skip("no git")
    path.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(path)]

    def run(*args: str) -> str:
        return subprocess.run([*git, *args], check=True, capture_output=True, text=True).stdout.strip()

    run("init", "-q")
    return run


def page_decimals(value: float) -> str:
    """A metric as the pages print it: 4 decimals below 1, 2 from 1 to 1000, 1 above."""
    return f"{value:.4f}" if abs(value) < 1 else f"{value:.2f}" if abs(value) < 1000 else f"{value:.1f}"
