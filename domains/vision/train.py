"""The pretraining loop shared by every method: the method's optimizer with an optional step or
cosine schedule, bf16 autocast on CUDA (the losses upcast to float32), DistributedDataParallel under
torchrun, the kNN monitor for the learning curve, and a checkpoint after every epoch that ``--resume``
continues from.

Speed on a GPU: the network in channels_last (what bf16 convolutions and BatchNorm run fastest in),
cuDNN's autotuner, the fused optimizer implementation (foreach on the CPU), the data on the device (an
in-memory set lives there: a step's images, labels and bias labels are gathered there from its rows'
indices, and the epoch's order is copied there once), no host-device synchronisation inside an epoch (the
loss is summed on the device), with ``cuda_graph=true`` (the default) the whole step (forward, backward,
optimizer steps) replayed from a CUDA graph (:mod:`domains.graphed`; one process, a method whose step is
graph-safe; a new learning rate recaptures it; a failed capture warns and trains eagerly), and, with
``compile=true``, ``torch.compile`` on the method's networks, its loss and the augmentation's pixel functions; if
compiling fails the run warns and trains eagerly. Both together: the compiled kernels are what the graph
captures, after its warm-up steps compiled them.

A curve point's ``seconds`` is the epoch's training steps alone; ``monitor_seconds`` what its kNN monitor and
the method's own monitor (the biased track's online classifier on the test set) took after them.
"""

from __future__ import annotations

import copy
import functools
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch import Tensor, nn
from typing_extensions import NotRequired

from domains.base import PretrainResult
from domains.checkpoint_extras import CheckpointExtras, SameClassCounts
from domains.context import RunContext, bar_refresh_s, rng_state, set_rng_state
from domains.errors import UserError
from domains.graphed import Backend, GraphedStep, learning_rates, make_capturable
from domains.vision import augment as aug
from domains.vision.config import VisionConfig
from domains.vision.evaluate import extract, knn_top1
from domains.vision.images import ImageSet, VisionData, batches, chunks
from domains.vision.method import Batch, DataInfo, Method
from losses.distributed import is_distributed
from losses.prior import SameClassShare

T = TypeVar("T")


def world() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside torchrun."""
    if is_distributed():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def setup_device(device: torch.device) -> torch.device:
    """Under torchrun (WORLD_SIZE > 1) join the process group and use this rank's GPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return device
    cuda = device.type == "cuda" and torch.cuda.is_available()
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return torch.device("cuda", local)
    return device


def make_scheduler(opt: torch.optim.Optimizer, cfg: VisionConfig):
    if cfg.lr_decay == "step":  # Barbano et al.: x0.1 at 1/3 and 2/3 of the epochs (26 and 53 of 80)
        return torch.optim.lr_scheduler.MultiStepLR(opt, [cfg.epochs // 3, 2 * cfg.epochs // 3], 0.1)
    if cfg.lr_decay == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, cfg.epochs)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)


def data_info(data: VisionData) -> DataInfo:
    return DataInfo(len(data.pretrain), data.pretrain.labels, data.num_classes, data.image_size, data.mean, data.std)


def accelerate(method: Method, device: torch.device) -> None:
    """channels_last weights on CUDA (each convolution then runs in NHWC, also on a plain NCHW input)
    and cuDNN's autotuner: the shapes of a run never change."""
    if device.type == "cuda":
        method.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True


FUSED = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def multi_tensor(opt: torch.optim.Optimizer, device: torch.device) -> None:
    """Switch ``opt`` (the method builds it) to the fused implementation on CUDA, foreach elsewhere.
    Both are flags of each parameter group that ``step`` reads, so this holds before the first step."""
    for group in opt.param_groups:
        if device.type == "cuda" and isinstance(opt, FUSED) and "fused" in group:
            group["fused"], group["foreach"] = True, False
        elif "foreach" in group and not group.get("fused"):
            group["foreach"] = True


def compile_parts(method: Method) -> list[nn.Module]:
    """``torch.compile`` each network of the method (its children with parameters) in place, so that
    state_dict keys and checkpoints stay those of the eager modules, and its core loss (``Loss.compile``: not
    one with an estimated prior); the returned parts for :func:`uncompile`."""
    parts = [m for m in method.children() if next(m.parameters(), None) is not None]
    for m in parts:
        if m._compiled_call_impl is None:  # a part compiled by an earlier call keeps its compiled code
            m.compile()
    if method.loss is not None and not method.loss.compiled:
        method.loss.compile()
    return parts


def uncompile(method: Method, parts: list[nn.Module]) -> None:
    for m in parts:
        m._compiled_call_impl = None  # what nn.Module.compile sets; None is the eager call
    if method.loss is not None:
        method.loss.uncompile()
    aug.set_compiled(False)


def first_compiled_step(step: Callable[[], Tensor], method: Method, parts: list[nn.Module],
                        ctx: RunContext) -> Tensor:
    """The first step with compiled parts, where compilation happens; if it fails, warn, restore what
    the step may have changed (buffers, banks, queues, random state) and take it eagerly."""
    saved, rng = copy.deepcopy(method.state_dict()), rng_state()
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - compilation fails with many types (tracing, backend, codegen)
        uncompile(method, parts)
        method.load_state_dict(saved)
        set_rng_state(rng)
        loss = step()  # an error that is not the compiler's comes back here, and propagates
        first_line = (str(exc).strip().splitlines() or [""])[0]
        message = f"torch.compile failed ({type(exc).__name__}: {first_line}); training eagerly"
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        ctx.log(message)
        return loss


def graphs_skipped(method: Method, cfg: VisionConfig, world_size: int) -> str | None:
    """Why the training step runs eagerly whatever the device, or None where it may be a CUDA graph."""
    if not cfg.cuda_graph:
        return "cuda_graph=false"
    if world_size > 1:  # DDP's gradient all-reduce runs from autograd hooks, outside what is captured here
        return "DistributedDataParallel"
    return method.graph_unsafe()


def step_inputs(pre: ImageSet, order: Tensor, batch_size: int, device: torch.device,
                num_workers: int) -> Iterator[tuple[Tensor, ...]]:
    """The inputs of each step of an epoch (full batches only): the rows' indices on ``device``, copied there
    once with the epoch's order, and, for a set that is not on ``device`` (a folder, a set too large for it),
    the images of those rows."""
    if isinstance(pre.images, Tensor) and pre.images.device.type == device.type:
        yield from ((idx,) for idx in chunks(order.to(device), batch_size, drop_last=True))
        return
    for idx, images in batches(pre, order, batch_size, drop_last=True, num_workers=num_workers):
        yield idx.to(device, non_blocking=True), images.to(device, non_blocking=True)


# A long epoch (CIFAR-10, Biased-MNIST on a CPU: minutes) shows a bar over its steps after this many seconds, so
# that the epoch bar standing at 0% does not look like a hang; short epochs (the digits: about a second) show none.
STEP_BAR_AFTER_S = 5.0


def epoch_steps(inputs: Iterator[T], steps: int, epoch: int, quiet: bool) -> Iterator[T]:
    """``inputs`` with a bar over the epoch's ``steps``, shown only once the epoch has taken STEP_BAR_AFTER_S."""
    from tqdm.auto import tqdm

    yield from tqdm(inputs, desc=f"epoch {epoch + 1}", total=steps, unit="step", leave=False, disable=quiet,
                    delay=STEP_BAR_AFTER_S, mininterval=bar_refresh_s())


def monitor(method: Method, data: VisionData, cfg: VisionConfig, device: torch.device, epoch: int) -> dict:
    """The learning curve's monitors after ``epoch`` (counted from 1): the kNN accuracy when due, and the
    method's own (each reads its result on the host, so the time they take is theirs)."""
    out = {}
    if cfg.knn_every and (epoch % cfg.knn_every == 0 or epoch == cfg.epochs):
        feats = [extract(method, s, device, num_workers=cfg.num_workers) for s in (data.train, data.test)]
        out["knn_top1"] = knn_top1(feats[0], data.train.labels.to(device), feats[1],
                                   data.test.labels.to(device), data.num_classes, cfg.knn_k, cfg.knn_temperature)
    out.update(method.monitor(data.test, device))
    return out


class VisionExtras(CheckpointExtras):
    """What :func:`pretrain` reads back from its checkpoint."""

    epoch: int
    curve: list[dict[str, Any]]
    seen: int
    train_time: float
    # None where the loss saw no in-batch negatives or the set is not labelled throughout; absent from a
    # checkpoint written before it was counted
    same_class: NotRequired[SameClassCounts | None]


def pretrain(method: Method, data: VisionData, cfg: VisionConfig, ctx: RunContext, device: torch.device,
             desc: str, graph_backend: Backend | None = None) -> PretrainResult:
    """Train ``method`` (already on ``device``) for ``cfg.epochs`` epochs, resuming from a checkpoint.
    ``graph_backend``: for tests, what stands in for CUDA graphs (:class:`domains.graphed.ReplayBackend`)."""
    previous = aug.set_compiled(False)
    try:
        return _pretrain(method, data, cfg, ctx, device, desc, graph_backend)
    finally:
        aug.set_compiled(previous)


def _pretrain(method: Method, data: VisionData, cfg: VisionConfig, ctx: RunContext, device: torch.device,
              desc: str, graph_backend: Backend | None) -> PretrainResult:
    rank, size = world()
    accelerate(method, device)
    parts = compile_parts(method) if cfg.compile else []
    aug.set_compiled(cfg.compile)
    model = method
    if size > 1:
        ids = [device.index] if device.type == "cuda" else None
        # Banks and queues are kept in step by the methods; broadcasting them every step would be waste.
        model = torch.nn.parallel.DistributedDataParallel(method, device_ids=ids, broadcast_buffers=False)
    opt = method.optimizer()
    multi_tensor(opt, device)
    sched = make_scheduler(opt, cfg)
    start, curve, seen, train_time = 0, [], 0, 0.0
    # Every rank restores rank 0's checkpoint.
    training = {"method": method, "optimizer": opt, "scheduler": sched, "loss": method.loss}
    # The share of same-class negatives the loss saw (the prior page's τ+): on sets labelled throughout, where
    # the negatives are the batch's other images; under torchrun, this rank's batches.
    same_class = SameClassShare() if method.in_batch_negatives and bool((data.pretrain.labels >= 0).all()) else None
    state = ctx.restore_checkpoint(training, counters={"epoch": cfg.epochs}, extras=VisionExtras)
    if state is not None:
        start, curve, seen, train_time = state["epoch"], state["curve"], state["seen"], state["train_time"]
        if same_class is not None and state.get("same_class"):
            same_class.load_state_dict(state["same_class"])
        ctx.log(f"resumed from epoch {start}")
    local_batch = cfg.batch_size // size
    pre = data.pretrain
    if len(pre) // size < local_batch:
        raise UserError(f"batch_size {cfg.batch_size} is larger than the {len(pre)} pretraining images")
    labels, bias = pre.labels.to(device), None if pre.bias is None else pre.bias.to(device)
    # No autocast cache: every weight is used once per step, and a cache kept across a capture is unsafe.
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda",
                    cache_enabled=False)

    def step(idx: Tensor, *streamed: Tensor) -> Tensor:
        """One step on the pretraining rows ``idx``: their images are gathered here, on the device, unless
        ``streamed`` brings them (a set that is not on the device)."""
        images = streamed[0] if streamed else pre.images[idx]
        batch = Batch(idx, images, labels[idx], None if bias is None else bias[idx])
        with torch.autocast(**autocast):
            loss = model(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()  # the post-hooks step the method's inner optimizers
        return loss.detach()

    optimizers = [opt, *method.inner_optimizers()]
    skipped = graphs_skipped(method, cfg, size)
    graphed = GraphedStep(step, device, enabled=skipped is None, key=lambda: learning_rates(*optimizers),
                          log=ctx.log, backend=graph_backend)
    graphs_requested = graphed.active
    for o in optimizers:  # after the restore, whose groups may say otherwise (a checkpoint of the other kind)
        make_capturable(o, graphed.active and device.type == "cuda")
    method.train()
    for epoch in ctx.progress(range(start, cfg.epochs), desc=desc, total=cfg.epochs, initial=start, unit="epoch"):
        order = torch.randperm(len(pre), generator=torch.Generator().manual_seed(ctx.seed * 1_000_003 + epoch))
        if size > 1:
            order = order[: len(order) // size * size][rank::size]
        t0, total, steps = time.perf_counter(), torch.zeros((), device=device), 0
        for inputs in epoch_steps(step_inputs(pre, order, local_batch, device, cfg.num_workers),
                                  len(order) // local_batch, epoch, ctx.quiet or rank != 0):
            if cfg.compile and steps == 0 and epoch == start:
                loss = first_compiled_step(functools.partial(graphed, *inputs), method, parts, ctx)
            else:
                loss = graphed(*inputs)
            total += loss  # queued on the device: a graph's static output is read before the next replay
            steps += 1
            if epoch == 0 and steps == 1:  # the initial weights' loss, read once: not finite is no divergence
                ctx.check_loss(float(loss), 1)
        if same_class is not None:  # the epoch's batches counted at once, outside the steps (and their graph)
            used = order[: steps * local_batch].to(device)
            same_class.add_batches(labels[used].view(steps, local_batch))
        mean_loss = float(total) / steps  # float() waits for the device: the epoch's time is honest
        elapsed = time.perf_counter() - t0
        seen, train_time = seen + steps * local_batch * size, train_time + elapsed
        sched.step()
        point = {"epoch": epoch + 1, "loss": mean_loss, "seconds": elapsed, "lr": opt.param_groups[0]["lr"]}
        point.update(method.loss.refresh_prior(epoch + 1))  # an estimated class prior, when one is due
        if rank == 0:
            tic = time.perf_counter()
            monitored = monitor(method, data, cfg, device, epoch + 1)
            if monitored:
                point.update(monitored, monitor_seconds=time.perf_counter() - tic)
        curve.append(point)
        ctx.log_scalars((epoch + 1) * steps, {**point, "images_per_s": steps * local_batch * size / elapsed})
        ctx.log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()))
        if rank == 0:
            ctx.save_checkpoint(training, epoch=epoch + 1, curve=curve, seen=seen, train_time=train_time,
                                same_class=same_class and same_class.state_dict())
    n_params = sum(p.numel() for p in method.parameters() if p.requires_grad)
    if skipped is None and not graphs_requested:
        skipped = f"not on CUDA ({device.type})"
    return PretrainResult(
        model=method, curve=curve,
        throughput={"images_per_s": seen / train_time if train_time else 0.0},
        info={"epochs_run": len(curve), "world_size": size, "trainable_parameters": n_params,
              "arch": cfg.arch, "temperature": cfg.temperature, "augment": cfg.augment,
              "compiled": bool(parts) and parts[0]._compiled_call_impl is not None,
              "loss_compiled": method.loss is not None and method.loss.compiled,
              # what ran: steps replayed from a graph in this process, a capture that failed (then eager)
              "cuda_graph": {"replays": graphed.replays, "fell_back": graphs_requested and not graphed.active,
                             "skipped": skipped},
              "prior": method.loss.prior_summary(),
              "negative_same_class_fraction": same_class and same_class.value()},
    )
