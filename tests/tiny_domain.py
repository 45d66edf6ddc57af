"""A tiny domain, registered only in the tests (``HARNESS_PLUGINS=tiny_domain`` with ``tests/`` on the path).

A linear encoder on a synthetic Gaussian mixture, pretrained for a few epochs with any unsupervised loss on
``pair_scores`` of two noisy views (or the domain's own objective ``ce``, supervised cross-entropy), and
evaluated by nearest-centroid accuracy (percent) on a held-out half. Seconds per run. It checkpoints every
epoch and can sleep per epoch (``sleep_s``) so a test can kill it mid-run; ``info["start_epoch"]`` says
where a run started, so resuming is observable. The env var TINY_HOLD_AT=<epoch>:<path> holds a run after that
epoch's checkpoint and log line until <path> exists, so a test signals a run that is provably at that point.
``fail=true`` (or the env var TINY_DOMAIN_FAIL) makes pretraining raise; the env var TINY_DOMAIN_DIVERGE makes
the accuracy NaN (a run that diverged).
Also the helpers that call the CLI in a subprocess with this domain plugged in.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import losses
from domains import register
from domains.base import (
    BenchPart,
    DatasetSpec,
    Domain,
    EvalResult,
    KeptModel,
    Prepared,
    Preset,
    PretrainResult,
    Reference,
    RunSpec,
    Supplies,
)
from domains.checkpoint_extras import CheckpointExtras
from domains.context import RunContext
from domains.errors import UserError
from domains.files import hash_jsonable
from harness.records import SCHEMA_VERSION
from harness.run import as_found, data_root_prefix


class TinyExtras(CheckpointExtras):
    """What the tiny domain's training reads back from its checkpoint."""

    epoch: int
    curve: list[dict[str, float]]


@dataclass
class TinyConfig:
    epochs: int = 3
    n_per_class: int = 40
    classes: int = 3
    dim_in: int = 8
    dim_out: int = 4
    lr: float = 0.05
    temperature: float = 0.5
    noise: float = 0.3
    sleep_s: float = 0.0
    fail: bool = False
    tag: str | None = None


def make_data(spec: RunSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed Gaussian mixture (the data does not depend on the run seed); ``blobs_hard`` has closer means."""
    c = spec.config
    rng = np.random.default_rng(0)
    spread = 3.0 if spec.dataset == "blobs" else 1.0
    centers = rng.normal(0.0, spread, size=(c.classes, c.dim_in))
    y = np.repeat(np.arange(c.classes), c.n_per_class)
    x = centers[y] + rng.normal(size=(len(y), c.dim_in))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


@register
class TinyDomain(Domain):
    name = "tiny"
    description = "a linear encoder on a Gaussian mixture (tests only)"
    config_class = TinyConfig
    methods = {"linear": "one linear layer", "linear2": "the same, under another name"}
    default_method = "linear"
    datasets = {"blobs": DatasetSpec("blobs", "3 well separated Gaussians", needs_download=False),
                "blobs_hard": DatasetSpec("blobs_hard", "3 overlapping Gaussians", needs_download=False),
                "absent": DatasetSpec("absent", "a dataset that is never on disk")}
    default_dataset = "blobs"
    # pair_scores with the labels where a loss needs them, and a classifier head for ce: every loss but jsd
    supplies = Supplies(positives={losses.VIEWS, losses.CLASSMATES, losses.CLASS}, labels=True)
    presets = {"quick": Preset("seconds", {}, seeds=(0, 1)), "paper": Preset("a bit longer", {"epochs": 5})}
    primary_metric = "accuracy"
    baseline_loss = "infonce"
    method_baselines = {"linear2": "supcon"}
    references = (Reference("Tiny et al. 2024, Table 1", "blobs", "Linear+InfoNCE", 90.0, 1.0),)
    leaderboard_metrics = ("n_test",)

    def setting_note(self, config: dict, method: str, dataset: str) -> str:
        return f"{config['epochs']} epochs"

    def validate(self, spec: RunSpec) -> None:
        if spec.method == "linear2" and spec.dataset == "blobs_hard":
            raise UserError("method linear2 does not support blobs_hard")

    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        if spec.dataset == "absent":
            raise UserError(f"dataset 'absent' not found; put it under {ctx.data_root / 'absent'}")
        return Prepared(make_data(spec), {"dataset": spec.dataset, "generator": "gaussian mixture, numpy seed 0"})

    def pretrain(self, spec: RunSpec, ctx: RunContext, data: tuple[torch.Tensor, torch.Tensor]) -> PretrainResult:
        c = spec.config
        x, y = data
        encoder = torch.nn.Linear(c.dim_in, c.dim_out)
        head = torch.nn.Linear(c.dim_out, c.classes)
        opt = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=c.lr)
        loss_fn = None if spec.loss == "ce" else spec.make_loss()
        training = {"encoder": encoder, "head": head, "opt": opt, "loss": loss_fn}
        start, curve = 0, []
        state = ctx.restore_checkpoint(training, counters={"epoch": c.epochs}, extras=TinyExtras)
        if state is not None:
            start, curve = state["epoch"], state["curve"]
        gen = torch.Generator().manual_seed(ctx.seed)
        t0 = time.perf_counter()
        for epoch in ctx.progress(range(start, c.epochs), desc="epochs", total=c.epochs, initial=start):
            if c.fail or os.environ.get("TINY_DOMAIN_FAIL"):
                raise RuntimeError("planted failure")
            v1 = x + c.noise * torch.randn(x.shape, generator=gen)
            v2 = x + c.noise * torch.randn(x.shape, generator=gen)
            if loss_fn is None:
                loss = torch.nn.functional.cross_entropy(head(encoder(v1)), y)
            else:
                labels = y if losses.spec(spec.loss).needs_labels else None
                loss = loss_fn(losses.pair_scores(encoder(v1), encoder(v2), c.temperature, labels=labels))
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append({"epoch": epoch + 1, "loss": loss.item()})
            ctx.log_scalars(epoch + 1, curve[-1])
            ctx.save_checkpoint(training, epoch=epoch + 1, curve=curve)
            ctx.log(f"epoch {epoch + 1}: loss {loss.item():.4f}")
            _hold(epoch + 1)
            time.sleep(c.sleep_s)
        took = max(time.perf_counter() - t0, 1e-9)
        return PretrainResult(encoder, curve, {"samples_per_s": len(x) * (c.epochs - start) / took},
                              {"start_epoch": start})

    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext,
                 data: tuple[torch.Tensor, torch.Tensor]) -> EvalResult:
        x, y = data
        with torch.no_grad():
            z = pretrained.model(x)
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(ctx.seed))
        train, test = perm[: len(y) // 2], perm[len(y) // 2:]
        centroids = torch.stack([z[train][y[train] == k].mean(0) for k in range(spec.config.classes)])
        pred = torch.cdist(z[test], centroids).argmin(1)
        accuracy = 100.0 * float((pred == y[test]).float().mean())
        if os.environ.get("TINY_DOMAIN_DIVERGE"):  # a run that completes with a non-finite metric, as a diverged one
            accuracy = math.nan
        return EvalResult({"accuracy": accuracy, "n_test": float(len(test))}, {"per_class_n": [40, 40, 40]})

    def trained_modules(self, spec: RunSpec, pretrained: PretrainResult) -> KeptModel:
        return KeptModel({"encoder": pretrained.model})

    def build_modules(self, spec: RunSpec, build: dict) -> dict[str, torch.nn.Module]:
        return {"encoder": torch.nn.Linear(spec.config.dim_in, spec.config.dim_out)}

    def benchmark(self, device: torch.device, data_root, quick: bool) -> list[BenchPart]:
        """A part per batch size; each row names the process that measured it (``pid``). For the tests that stop
        a benchmark midway: each part sleeps TINY_BENCH_SLEEP seconds, after the part named TINY_BENCH_SIGTERM
        the process sends itself SIGTERM, and the part named TINY_BENCH_FAIL raises."""
        return [BenchPart(f"B={n}", lambda n=n: self._bench_rows(n, device))
                for n in ((64, 256) if quick else (64, 256, 1024))]

    @staticmethod
    def _bench_rows(n: int, device: torch.device) -> list[dict]:
        time.sleep(float(os.environ.get("TINY_BENCH_SLEEP", "0")))
        if os.environ.get("TINY_BENCH_FAIL") == f"B={n}":
            raise RuntimeError(f"a planted failure of part B={n}")
        z = torch.randn(n, 16, device=device)
        t0 = time.perf_counter()
        losses.get("infonce")(losses.pair_scores(z, z + 0.1, 0.5))
        if os.environ.get("TINY_BENCH_SIGTERM") == f"B={n}":
            os.kill(os.getpid(), signal.SIGTERM)
        return [{"batch": n, "device": str(device), "ms": 1000 * (time.perf_counter() - t0), "pid": os.getpid()}]


def _hold(epoch: int) -> None:
    """Where TINY_HOLD_AT=<epoch>:<path> names this epoch, wait for <path>: a test that saw the epoch's log line
    signals the run here and then creates <path>, so the run meets the signal at this epoch's boundary however
    slowly either process is scheduled (a test that fails first leaves no run waiting past HOLD_S)."""
    at, _, path = os.environ.get("TINY_HOLD_AT", "").partition(":")
    if not at or int(at) != epoch:
        return
    deadline = time.monotonic() + HOLD_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"TINY_HOLD_AT: {path} did not appear in {HOLD_S} s")
        time.sleep(0.02)


HOLD_S = 300.0
REPO = Path(__file__).resolve().parent.parent


def harness_env() -> dict[str, str]:
    """The environment for a ``python -m harness`` subprocess that knows the tiny domain."""
    env = dict(os.environ, HARNESS_PLUGINS="tiny_domain", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests"), str(REPO), env.get("PYTHONPATH")]))
    return env


def subprocess_data_root(data_root: str | Path | None = None) -> str:
    """How a printed command of a harness subprocess (in REPO, with this environment) starts: with the data root
    (``data_root``, its ``--data-root``; else ``$HARNESS_DATA_ROOT``, relative to REPO) where it is not the
    built-in one (harness.run.data_root_prefix), as in CI (HARNESS_DATA_ROOT=../shared/data), else nothing."""
    value = data_root or os.environ.get("HARNESS_DATA_ROOT")
    return data_root_prefix(str(REPO / Path(value).expanduser()) if value else None)


# How the resume hints of a ``python -m harness`` subprocess start (harness.run.invocation).
AS_MODULE = f"{shlex.quote(as_found(sys.executable))} -m harness"  # what a subprocess of this interpreter prints
# ... after the data root and the plugins of :func:`harness_env` (harness.run.plugins_prefix)
RESUMES_WITH = f"{subprocess_data_root()}HARNESS_PLUGINS=tiny_domain {AS_MODULE}"


def resume_args(hint: str) -> list[str]:
    """The arguments of the ``continue with: [HARNESS_DATA_ROOT=...] HARNESS_PLUGINS=... python -m harness ...``
    command a subprocess printed (with the data root and the plugins of its environment, which :func:`harness`
    gives again), for :func:`harness`."""
    assert f"continue with: {subprocess_data_root()}HARNESS_PLUGINS=" in hint and f" {AS_MODULE} " in hint \
        and hint.endswith(" --resume"), hint
    return hint.split(f" {AS_MODULE} ", 1)[1].split()


def harness(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run the ``harness`` CLI in a subprocess (cwd = repo root), capturing its output; ``env``: variables set
    besides :func:`harness_env`'s."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env={**harness_env(), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def killed_mid_run(argv: list[str], results: Path, seed: int) -> Path:
    """The checkpoint that ``harness *argv`` (a tiny run of seed ``seed`` into ``results``, with epochs slow enough
    to catch: ``sleep_s``), killed after its second epoch, leaves in ``results/.work/<run id>/``."""
    results.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "harness", *argv],
                            cwd=REPO, env=harness_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def logged() -> int:  # an earlier run's log is appended to
        return "".join(p.read_text() for p in results.glob("*.log")).count("epoch 2:")

    earlier, deadline = logged(), time.time() + 120
    while time.time() < deadline and logged() == earlier:
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    [checkpoint] = (results / ".work").glob(f"*-s{seed}/checkpoint.pt")
    return checkpoint


def synthetic_record(loss: str, seed: int, value: float, *, dataset: str = "blobs", method: str = "linear",
                     loss_params: dict | None = None, version: str = "0.1.0", config: dict | None = None,
                     domain: str = "tiny", status: str = "completed", higher_is_better: bool = True,
                     baseline_loss: str = "infonce", preset: str = "quick", metric: str = "accuracy",
                     software: dict | None = None, overrides: dict | None = None,
                     finished_at: str = "2026-01-01T00:00:00+00:00") -> dict:
    """A hand-written record of the current schema (harness.records.RunRecord); what the leaderboard, report and
    compare read is set from the arguments, the rest is filler."""
    params = loss_params or {}
    tag = "-".join(f"{k}{v}" for k, v in sorted(params.items()))
    config = config or {"epochs": 3}
    failed = {} if status == "completed" else {"error": "RuntimeError: planted failure"}
    code = hash_jsonable([config, software])[:6]
    return {
        "schema": SCHEMA_VERSION,
        "run_id": f"{domain}-{dataset}-{method}-{loss}{tag}-{version}-{code}-s{seed}",
        "status": status, **failed, "domain": domain, "dataset": dataset, "method": method, "loss": loss,
        "loss_params": params, "seed": seed, "preset": preset, "overrides": overrides or {}, "config": config,
        "runtime": {},
        "config_hash": hash_jsonable(config), "primary_metric": metric, "higher_is_better": higher_is_better,
        "baseline_loss": baseline_loss, "metrics": {metric: value} if status == "completed" else {},
        "details": {}, "curve": [], "timings": {}, "throughput": {}, "info": {}, "hardware": {},
        "software": {"contrastive_harness": version, **(software or {})}, "data_fingerprint": {"dataset": dataset},
        "command": ["harness", "run", "--domain", domain, "--loss", loss], "resumed": False,
        "started_at": "2026-01-01T00:00:00+00:00", "finished_at": finished_at,
    }


def write_records(results: Path, records: list[dict]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    for record in records:
        (results / f"{record['run_id']}.json").write_text(json.dumps(record))
