"""The vision pretraining loop as CUDA graphs, checked without a GPU.

What a graph replays is the step's kernels, none of its Python: so a graph-safe step reads no device value
on the host and does the same work at every step (the same ops with the same host arguments), whatever its
batch and random draws. Both are checked here on the path an accelerator takes (the loss core's dense
positives, queued checks, the augmentation's choices made on the device), by a dispatch mode around the
steps that :class:`domains.graphed.ReplayBackend` replays in the real loop. The loop under that stand-in
must give the eager loop's losses and weights, across learning-rate changes (each a recapture); the record
says what ran.
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import domains
import losses
from domains.base import RunSpec, runtime_fields
from domains.context import RunContext
from domains.graphed import ReplayBackend
from domains.vision import augment as aug
from domains.vision import train
from domains.vision.biased import Biased
from domains.vision.cmc import CMC
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.data import HALF_STATS
from domains.vision.images import ImageSet, VisionData
from domains.vision.moco import MoCo
from domains.vision.simclr import SimCLR

VISION = domains.get("vision")
# aten ops that read a tensor's value on the host: on a GPU each waits for the device, and capture refuses it
HOST_READS = {"aten._local_scalar_dense", "aten.nonzero", "aten.item", "aten.is_nonzero", "aten.equal",
              "aten.masked_select"}
SIZE = 16  # image side: the networks run on any size, small is fast
CPU = torch.device("cpu")


def _data(n: int, seed: int = 0) -> VisionData:
    """Random images with random class and bias labels, one set for every role (the bench's stand-in)."""
    g = torch.Generator().manual_seed(seed)
    images = ImageSet(torch.randint(0, 256, (n, 3, SIZE, SIZE), dtype=torch.uint8, generator=g),
                      torch.randint(0, 4, (n,), generator=g), torch.randint(0, 4, (n,), generator=g))
    return VisionData("random", images, images, images, 4, SIZE, *HALF_STATS)


def _setting(name: str, **overrides) -> tuple[VisionConfig, type, losses.Loss]:
    """(config, method class, loss) of a small run of ``name``; ``biased`` is the paper-biased preset."""
    common = {"batch_size": 16, "epochs": 1, "knn_every": 0, "num_workers": 0, "proj_dim": 16}
    if name == "biased":
        cfg = replace(VisionConfig(), **{**PRESETS["paper-biased"].overrides, **common, **overrides})
        return resolved(cfg, "biased", "biased-digits"), Biased, losses.get("eps_supinfonce", epsilon=0.5)
    extra = {"moco": {"num_negatives": 32}, "cmc": {"num_negatives": 8}}.get(name, {})
    cfg = replace(VisionConfig(), **{"arch": "small", **common, **extra, **overrides})
    return resolved(cfg, name, "digits"), {"simclr": SimCLR, "moco": MoCo, "cmc": CMC}[name], losses.get("infonce")


def _run(name: str, data: VisionData, tmp_path, backend=None, device=CPU, **overrides):
    cfg, cls, loss = _setting(name, **overrides)
    torch.manual_seed(0)
    method = cls(cfg, train.data_info(data), loss, name == "biased").to(device)
    ctx = RunContext(seed=0, device=device, data_root=tmp_path, work_dir=tmp_path / "work", quiet=True)
    return train.pretrain(method, data.to(device), cfg, ctx, device, desc=name, graph_backend=backend)


class HostReads(TorchDispatchMode):
    """Records every op (name and host arguments) and the host-reading ones; ``paused`` leaves ops out."""

    def __init__(self):
        super().__init__()
        self.trace: list[tuple] = []
        self.reads: list[str] = []
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket._qualified_op_name.replace("::", ".")
        if not self.paused:
            self.trace.append((str(func), *(_host(a) for a in (*args, *(kwargs or {}).values()))))
            if name in HOST_READS:
                self.reads.append(name)
        return func(*args, **(kwargs or {}))


def _host(arg):
    """What a graph freezes of an argument: a tensor's shape and dtype, any other value itself."""
    if isinstance(arg, torch.Tensor):
        return "tensor", tuple(arg.shape), arg.dtype
    if isinstance(arg, (list, tuple)):
        return tuple(_host(a) for a in arg)
    if isinstance(arg, float) and math.isnan(arg):
        return "nan"  # a NaN constant (the loss core's queued check) is the same value each time; nan != nan
    if arg is None or isinstance(arg, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format)):
        return arg
    return type(arg).__name__  # a handle (the profiler's record of optimizer.step): not a value of the step


class SpyingReplay(ReplayBackend):
    """Runs each replayed step (the captured function alone) under :class:`HostReads`: one trace a replay."""

    def __init__(self):
        super().__init__()
        self.spies: list[HostReads] = []

    def capture(self, fn):
        def spied():
            spy = HostReads()
            self.spies.append(spy)
            with spy:
                return fn()

        return super().capture(spied)


@pytest.fixture
def accelerator_path(monkeypatch):
    """The choices the loss core and the augmentation make on an accelerator, taken on the CPU."""
    monkeypatch.setattr(losses._core, "PAIRS_FROM_MASK_ON", frozenset())
    for module in ("losses.checks", "losses._core", "losses.scores"):
        monkeypatch.setattr(sys.modules[module], "reads_values_now", lambda t: False)
    monkeypatch.setattr(aug, "SUBSETS_ON", frozenset())


@pytest.fixture
def adam_left_out(monkeypatch):
    """Adam's step on the CPU reads its step count on the host; on CUDA the loop makes it capturable (which
    PyTorch refuses on the CPU; domains.graphed's tests check make_capturable), so its ops are left out."""
    spies: list[HostReads] = []
    step = torch.optim.Adam.step

    def paused(self, *args, **kwargs):
        modes = [m for m in spies if not m.paused]
        for m in modes:
            m.paused = True
        try:
            return step(self, *args, **kwargs)
        finally:
            for m in modes:
                m.paused = False

    monkeypatch.setattr(torch.optim.Adam, "step", paused)
    return spies


@pytest.mark.parametrize("name,overrides", [
    ("simclr", {}), ("biased", {}), ("moco", {}), ("cmc", {}), ("cmc", {"num_negatives": 4096}),
], ids=["simclr", "biased-paper", "moco", "cmc", "cmc-every-row"])
def test_replayed_steps_read_nothing_on_the_host_and_repeat_the_same_work(
        name, overrides, accelerator_path, adam_left_out, tmp_path, monkeypatch):
    backend = SpyingReplay()
    monkeypatch.setattr(backend, "spies", adam_left_out)  # the Adam pause reaches the spies
    result = _run(name, _data(96), tmp_path, backend, **overrides)  # 6 steps: 3 warm-up, then 3 replays
    assert result.info["cuda_graph"]["replays"] == 3 == len(backend.spies)
    for spy in backend.spies:
        assert spy.reads == [], f"{name}: host reads in a replayed step"
    first = backend.spies[0].trace
    assert len(first) > 100  # the step's forward, backward and optimizer ops were seen
    for spy in backend.spies[1:]:
        assert spy.trace == first, f"{name}: a replay did other work than the captured step"


def test_a_host_choice_in_the_step_is_caught(accelerator_path, adam_left_out, tmp_path, monkeypatch):
    """The trace check fails on what a graph would freeze: a jitter order drawn on the host (the old code)."""
    def host_order(x, strength=aug.JITTER, p=aug.JITTER_P):
        u = torch.rand(5, x.shape[0], device=x.device)
        out = x
        for row, op in enumerate(torch.randperm(4).tolist()):
            out = aug.JITTER_OPS[op](out, u[row], strength[op])
        return aug._choose(u[4], p, out, x)

    monkeypatch.setattr(aug, "color_jitter", host_order)
    backend = SpyingReplay()
    monkeypatch.setattr(backend, "spies", adam_left_out)
    _run("simclr", _data(96), tmp_path, backend)
    assert any(spy.trace != backend.spies[0].trace for spy in backend.spies[1:])


def _params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in (*model.parameters(), *model.buffers())]


@pytest.mark.parametrize("name,overrides,captures", [
    # the paper-biased step schedule over 3 epochs: lr x0.1 after epochs 1 and 2, so 3 captures
    ("biased", {"epochs": 3}, 3),
    ("simclr", {"epochs": 3, "lr_decay": "cosine"}, 3),
])
def test_the_graphed_loop_trains_exactly_as_the_eager_loop(name, overrides, captures, tmp_path):
    data = _data(64)  # 4 steps an epoch
    eager = _run(name, data, tmp_path / "eager", cuda_graph=False, **overrides)
    backend = ReplayBackend()
    graphed = _run(name, data, tmp_path / "graphed", backend, **overrides)
    assert [p["loss"] for p in graphed.curve] == [p["loss"] for p in eager.curve]
    assert [p["lr"] for p in graphed.curve] == [p["lr"] for p in eager.curve]
    if name == "biased":
        assert [p["online_top1"] for p in graphed.curve] == [p["online_top1"] for p in eager.curve]
    for a, b in zip(_params(graphed.model), _params(eager.model), strict=True):
        assert torch.equal(a, b)
    # 12 steps: 3 warm-up, 9 replays; a capture per learning rate
    assert graphed.info["cuda_graph"] == {"replays": 9, "fell_back": False, "skipped": None}
    assert backend.captures == captures  # one a learning rate: the schedule changed it twice
    assert eager.info["cuda_graph"] == {"replays": 0, "fell_back": False, "skipped": "cuda_graph=false"}


def test_a_failed_capture_warns_and_trains_as_the_eager_loop(tmp_path):
    data = _data(64)
    eager = _run("biased", data, tmp_path / "eager", cuda_graph=False, epochs=2)
    refused = ReplayBackend(fail=RuntimeError("operation not permitted when stream is capturing"))
    with pytest.warns(RuntimeWarning, match="capture of the training step failed .*running it eagerly"):
        fallback = _run("biased", data, tmp_path / "fallback", refused, epochs=2)
    assert [p["loss"] for p in fallback.curve] == [p["loss"] for p in eager.curve]
    assert fallback.info["cuda_graph"] == {"replays": 0, "fell_back": True, "skipped": None}


def test_an_estimated_prior_keeps_the_step_eager(tmp_path):
    cfg, _, _ = _setting("simclr")
    data = _data(48)
    method = SimCLR(cfg, train.data_info(data), losses.get("dcl", tau_plus="auto"), False)
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path / "w", quiet=True)
    result = train.pretrain(method, data, cfg, ctx, torch.device("cpu"), desc="prior", graph_backend=ReplayBackend())
    assert result.info["cuda_graph"]["replays"] == 0
    assert "estimated class prior" in result.info["cuda_graph"]["skipped"]


def _spec(**cfg) -> RunSpec:
    config = replace(VisionConfig(), **{"epochs": 1, "knn_every": 0, "batch_size": 256, "proj_dim": 16, **cfg})
    return RunSpec("vision", "simclr", "digits", "infonce", {}, None, 0, config)


@pytest.mark.parametrize("setting,skipped", [({}, "not on CUDA (cpu)"), ({"cuda_graph": False}, "cuda_graph=false")])
def test_the_record_says_whether_steps_were_graphed(setting, skipped, tmp_path):
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path / "w", quiet=True)
    spec = _spec(**setting)
    result = VISION.pretrain(spec, ctx, VISION.prepare(spec, ctx).data)
    assert result.info["cuda_graph"] == {"replays": 0, "fell_back": False, "skipped": skipped}


def test_cuda_graph_is_a_runtime_setting_like_compile():
    assert {"compile", "cuda_graph"} <= runtime_fields(VisionConfig)
    assert VisionConfig().cuda_graph is True


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["biased", "simclr", "moco", "cmc"])
def test_cuda_graphs_capture_and_train_as_the_eager_loop_on_cuda(cuda, name, tmp_path):
    """Real capture: no fallback, and without random augmentation the eager loop's losses (both draw nothing
    else; cuDNN's float differences stay small over 12 steps)."""
    overrides = {"epochs": 3, **({} if name == "biased" else {"lr_decay": "step", "lr": 1e-2})}
    data = _data(64)
    eager = _run(name, data, tmp_path / "eager", device=cuda, cuda_graph=False, augment="none", **overrides)
    graphed = _run(name, data, tmp_path / "graphed", device=cuda, augment="none", **overrides)
    assert graphed.info["cuda_graph"] == {"replays": 9, "fell_back": False, "skipped": None}
    assert [p["loss"] for p in graphed.curve] == pytest.approx([p["loss"] for p in eager.curve], rel=1e-3, abs=1e-4)
    augmented = _run(name, data, tmp_path / "augmented", device=cuda, **overrides)  # draws replayed on the device
    assert augmented.info["cuda_graph"]["replays"] == 9 and not augmented.info["cuda_graph"]["fell_back"]
    assert all(torch.isfinite(torch.tensor(p["loss"])) for p in augmented.curve)


@pytest.mark.gpu
def test_cuda_graphs_with_compile_and_bf16_on_cuda(cuda, tmp_path):
    result = _run("simclr", _data(64), tmp_path, device=cuda, epochs=2, compile=True, bf16=True)
    assert result.info["compiled"] and result.info["cuda_graph"]["replays"] == 5
    assert not result.info["cuda_graph"]["fell_back"]
