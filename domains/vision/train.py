"""The pretraining loop shared by every method: the method's optimizer with an optional step or
cosine schedule, bf16 autocast on CUDA (the losses upcast to float32), DistributedDataParallel under
torchrun, the kNN monitor for the learning curve, and a checkpoint after every epoch that ``--resume``
continues from.

Speed on a GPU: the network in channels_last (what bf16 convolutions and BatchNorm run fastest in),
cuDNN's autotuner, the fused optimizer implementation (foreach on the CPU), batches indexed where the
images are (in-memory sets live on the device: no copy per step), no host-device synchronisation inside
an epoch (the loss is summed on the device), and, with ``compile=true``, ``torch.compile`` on the
method's networks and the augmentation's pixel functions; if compiling fails the run warns and trains
eagerly.
"""

from __future__ import annotations

import copy
import functools
import os
import time
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

from domains.base import PretrainResult, RunContext, UserError, rng_state, set_rng_state
from domains.vision import augment as aug
from domains.vision.config import VisionConfig
from domains.vision.data import VisionData, batches
from domains.vision.evaluate import extract, knn_top1
from domains.vision.method import Batch, DataInfo, Method
from losses.distributed import is_distributed
from losses.prior import SameClassShare


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
    state_dict keys and checkpoints stay those of the eager modules; the returned parts for
    :func:`uncompile`."""
    parts = [m for m in method.children() if next(m.parameters(), None) is not None]
    for m in parts:
        if m._compiled_call_impl is None:  # a part compiled by an earlier call keeps its compiled code
            m.compile()
    return parts


def uncompile(parts: list[nn.Module]) -> None:
    for m in parts:
        m._compiled_call_impl = None  # what nn.Module.compile sets; None is the eager call
    aug.set_compiled(False)


def first_compiled_step(step: Callable[[], Tensor], method: Method, parts: list[nn.Module],
                        ctx: RunContext) -> Tensor:
    """The first step with compiled parts, where compilation happens; if it fails, warn, restore what
    the step may have changed (buffers, banks, queues, random state) and take it eagerly."""
    saved, rng = copy.deepcopy(method.state_dict()), rng_state()
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - compilation fails with many types (tracing, backend, codegen)
        uncompile(parts)
        method.load_state_dict(saved)
        set_rng_state(rng)
        loss = step()  # an error that is not the compiler's comes back here, and propagates
        first_line = (str(exc).strip().splitlines() or [""])[0]
        message = f"torch.compile failed ({type(exc).__name__}: {first_line}); training eagerly"
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        ctx.log(message)
        return loss


def pretrain(method: Method, data: VisionData, cfg: VisionConfig, ctx: RunContext, device: torch.device,
             desc: str) -> PretrainResult:
    """Train ``method`` (already on ``device``) for ``cfg.epochs`` epochs, resuming from a checkpoint."""
    previous = aug.set_compiled(False)
    try:
        return _pretrain(method, data, cfg, ctx, device, desc)
    finally:
        aug.set_compiled(previous)


def _pretrain(method: Method, data: VisionData, cfg: VisionConfig, ctx: RunContext, device: torch.device,
              desc: str) -> PretrainResult:
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
    state = ctx.restore_checkpoint(training)
    if state is not None:
        start, curve, seen, train_time = state["epoch"], state["curve"], state["seen"], state["train_time"]
        if same_class is not None and state.get("same_class"):
            same_class.load_state_dict(state["same_class"])
        ctx.log(f"resumed from epoch {start}")
    local_batch = cfg.batch_size // size
    pre = data.pretrain
    if len(pre) // size < local_batch:
        raise UserError(f"batch_size {cfg.batch_size} is larger than the {len(pre)} pretraining images")
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=cfg.bf16 and device.type == "cuda")

    def step(batch: Batch) -> Tensor:
        with torch.autocast(**autocast):
            loss = model(batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.detach()

    method.train()
    for epoch in ctx.progress(range(start, cfg.epochs), desc=desc, total=cfg.epochs - start):
        order = torch.randperm(len(pre), generator=torch.Generator().manual_seed(ctx.seed * 1_000_003 + epoch))
        if size > 1:
            order = order[: len(order) // size * size][rank::size]
        t0, total, steps = time.perf_counter(), torch.zeros((), device=device), 0
        for idx, images in batches(pre, order, local_batch, drop_last=True, num_workers=cfg.num_workers):
            batch = Batch(idx.to(device, non_blocking=True), images.to(device, non_blocking=True),
                          pre.labels[idx].to(device, non_blocking=True),
                          None if pre.bias is None else pre.bias[idx].to(device, non_blocking=True))
            if cfg.compile and steps == 0 and epoch == start:
                loss = first_compiled_step(functools.partial(step, batch), method, parts, ctx)
            else:
                loss = step(batch)
            total += loss.float()
            steps += 1
            if same_class is not None:
                same_class.add_batch(batch.labels)
        mean_loss = float(total) / steps  # float() waits for the device: the epoch's time is honest
        elapsed = time.perf_counter() - t0
        seen, train_time = seen + steps * local_batch * size, train_time + elapsed
        sched.step()
        point = {"epoch": epoch + 1, "loss": mean_loss, "seconds": elapsed, "lr": opt.param_groups[0]["lr"]}
        point.update(method.loss.refresh_prior(epoch + 1))  # an estimated class prior, when one is due
        if rank == 0 and cfg.knn_every and ((epoch + 1) % cfg.knn_every == 0 or epoch + 1 == cfg.epochs):
            feats = [extract(method, s, device, num_workers=cfg.num_workers) for s in (data.train, data.test)]
            point["knn_top1"] = knn_top1(feats[0], data.train.labels.to(device), feats[1],
                                         data.test.labels.to(device), data.num_classes, cfg.knn_k, cfg.knn_temperature)
        if rank == 0:
            point.update(method.monitor(data.test, device))
        curve.append(point)
        ctx.log_scalars((epoch + 1) * steps, {**point, "images_per_s": steps * local_batch * size / elapsed})
        ctx.log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in point.items()))
        if rank == 0:
            ctx.save_checkpoint(training, epoch=epoch + 1, curve=curve, seen=seen, train_time=train_time,
                                same_class=same_class and same_class.state_dict())
    n_params = sum(p.numel() for p in method.parameters() if p.requires_grad)
    return PretrainResult(
        model=method, curve=curve,
        throughput={"images_per_s": seen / train_time if train_time else 0.0},
        info={"epochs_run": len(curve), "world_size": size, "trainable_parameters": n_params,
              "arch": cfg.arch, "temperature": cfg.temperature, "augment": cfg.augment,
              "compiled": bool(parts) and parts[0]._compiled_call_impl is not None,
              "prior": method.loss.prior_summary(),
              "negative_same_class_fraction": same_class and same_class.value()},
    )
