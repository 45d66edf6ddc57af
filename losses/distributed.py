"""Gathering candidates across ranks with their gradient, as solo-learn and lightly do.

``torch.distributed.all_gather`` cuts the graph; :class:`_GatherWithGrad` keeps it: its backward
sums every rank's gradient for this rank's slice (an all-reduce, which the gloo backend supports,
then the local slice). Rows may differ in number across ranks (graphs have different node counts):
they are padded to the largest, gathered, and trimmed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


class _GatherWithGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, sizes: list[int]) -> Tensor:  # type: ignore[override]
        rank = dist.get_rank()
        ctx.sizes, ctx.rank = sizes, rank
        padded = x.new_zeros((max(sizes),) + tuple(x.shape[1:]))
        padded[: x.shape[0]] = x
        parts = [torch.empty_like(padded) for _ in sizes]
        dist.all_gather(parts, padded.contiguous())
        return torch.cat([p[:n] for p, n in zip(parts, sizes)])

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        grad = grad.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        start = sum(ctx.sizes[: ctx.rank])
        return grad[start : start + ctx.sizes[ctx.rank]], None


def gather_with_grad(x: Tensor) -> tuple[Tensor, int]:
    """``x`` of every rank, concatenated in rank order, and the row offset of this rank's ``x``.
    Without an initialised process group of several ranks it is ``(x, 0)``."""
    if not is_distributed():
        return x, 0
    n = torch.tensor([x.shape[0]], device=x.device)
    sizes = [torch.zeros_like(n) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, n)
    sizes_list = [int(s.item()) for s in sizes]
    gathered = _GatherWithGrad.apply(x, sizes_list) if x.requires_grad else _gather_plain(x, sizes_list)
    return gathered, sum(sizes_list[: dist.get_rank()])


def _gather_plain(x: Tensor, sizes: list[int]) -> Tensor:
    with torch.no_grad():
        return _GatherWithGrad.forward(_Ctx(), x, sizes)


class _Ctx:
    """Stand-in for autograd's ctx when gathering tensors that need no gradient (labels)."""
