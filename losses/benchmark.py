"""Speed and peak memory of the losses against a plain NT-Xent (issue 2's benchmark).

Each measured step is what a SimCLR training step pays for its loss: from raw embeddings ``z1, z2``
of shape ``[B, d]`` that require grad, the constructor (``pair_scores``: normalisation, the
``2B x 2B`` similarity matrix, the masks), the loss, and the backward pass to ``z1, z2``. The
baseline is NT-Xent written the usual way (``F.normalize``, one matmul, ``F.cross_entropy`` over the
other ``2B - 1`` rows). ``unbiased`` gets class labels (10 classes), the others none.

Time: the median over ``repeats`` steps (after ``warmup`` steps) of the wall time, and of the CPU
time of the process (``time.process_time``: on a shared machine it leaves out the time the process
waits for a core), and the best (minimum) CPU time, the least disturbed estimate of the step's own
cost (on CUDA only the wall time means something). The losses are timed in turns (one step of
each, then again) so that a change in machine load hits them all alike.

Peak memory: the largest amount of memory the step holds above what was live when it began. On
CUDA that is ``torch.cuda.max_memory_allocated`` minus the allocation before the step. On the CPU,
where PyTorch keeps no such counter, one extra step runs under ``torch.profiler`` with
``profile_memory=True``: every allocation and free of the step is recorded with its size and time,
and the peak is the maximum of their running sum. That counts every tensor the step allocates
(intermediates, autograd buffers, gradients), including the scratch memory of the kernels.

Kernels: at B = 512 a step on a GPU is bound by kernel launches, not by arithmetic (an H100 spends a few
microseconds per launch, about what the whole [1024, 1024] matrix costs), so the number of kernels a step
launches is what the issue's wall-time target depends on, and it can be counted on any machine. A
``TorchDispatchMode`` counts the aten operations one step (forward and backward) dispatches on the
accelerator's path, taken on the CPU (``losses._core.accelerator_path``: no ``nonzero``, no CPU-only
kernels, value checks queued as on a GPU), after one step that builds the layout's constants, once per loss at
B = :data:`KERNEL_COUNT_BATCH` whatever the row's B: the operations a step dispatches do not depend on B (a test
checks), and a CPU step at the GPU's B = 16384 takes seconds (the part ran out of an H100 call's time). They are
split into ``kernels`` and ``views``: the operations that launch no kernel, those whose result is a view
of an input (``OpOverload.is_view``: view, t, detach, expand, slice, as_strided, permute, unsqueeze,
select, alias, unbind, ...) and those that only allocate or wrap a Python number (:data:`NO_LAUNCH`).
``kernel_ratio`` is the loss's kernels over NT-Xent's. It is a proxy: an aten operation may launch more
than one kernel (a matrix product's backward, a reduction in two passes), and a launch costs less than
the time between two launches of Python. The evidence that it tracks the GPU's wall time at B = 512:
before this count was made, the H100's time ratios to NT-Xent (infonce 2.06, dcl 3.19, hcl 3.29, pucl
3.35, debiased_pos 2.88, jsd 1.56, unbiased 2.43) followed the ratios of operations dispatched (2.1,
3.5, 3.75, 3.5, 2.96, 1.64, 2.4).

Compiled rows (``compiled: true``, at the batch sizes of ``compile_at``, by default the target's B = 512): the
same steps, NT-Xent's included, through ``torch.compile(fullgraph=True, dynamic=False)``, which fuses a step's
elementwise work and reductions into a few generated kernels (C++ on the CPU, Triton on CUDA). Their ratios are
to the compiled NT-Xent. Their ``kernels`` come from the profiler, since a generated kernel dispatches no aten
operation: on CUDA the kernels the device ran; on the CPU the generated kernels (``cpp_fused_*``) and the aten
operations still called that launch one and call no other that does (the matrix products, the autograd engine's
gradient seed and accumulation). Compiling takes seconds a step (C++ or Triton code is generated and built), so
the compiled rows stay at the one batch size the targets read. Compiled, the masks given by index lists still
write the exponential matrix whole before its sum (a scatter cannot fuse into the reduction); HCL's second scale
reads that masked matrix (``_RowReductions``), so its product fuses into its sum and HCL holds no more than DCL
(1.06x the compiled NT-Xent at B = 512; 1.5x when each scale had its own scatter). Masking with the
constructors' bool matrices instead fused the scatter away too (every loss 0.72x) but, measured on this
project's CPU at B = 512, made the steps 1.4-1.5x slower.

    python -m losses.benchmark --batch-sizes 256 512 1024 --threads 1
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
import torch._dynamo
import torch._inductor.config as inductor_config
import torch.nn.functional as F
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

import losses
from losses._core import accelerator_path

UNSUPERVISED = ("infonce", "dcl", "hcl", "pucl", "debiased_pos", "jsd")
LABELLED = ("unbiased",)
BASELINE = "nt_xent"
TEMPERATURE = 0.5
N_CLASSES = 10
TARGET = {"time_ratio": 1.3, "memory_ratio": 1.5, "batch_size": 512}
COMPILE_BACKEND = "inductor"  # what the compiled rows are compiled with (the tests' row checks use "aot_eager")

Step = Callable[[Tensor, Tensor, Tensor], Tensor]


def nt_xent(z1: Tensor, z2: Tensor, temperature: float) -> Tensor:
    """SimCLR's NT-Xent, the plain way: cross-entropy of each row against the other 2B - 1 rows."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = (z @ z.T / temperature).fill_diagonal_(float("-inf"))
    b = z1.shape[0]
    target = torch.cat([torch.arange(b, 2 * b, device=z.device), torch.arange(b, device=z.device)])
    return F.cross_entropy(sim, target)


def _steps() -> dict[str, Step]:
    steps: dict[str, Step] = {BASELINE: lambda z1, z2, y: nt_xent(z1, z2, TEMPERATURE)}
    for name in UNSUPERVISED + LABELLED:
        loss = losses.get(name)
        labelled = name in LABELLED
        steps[name] = (lambda z1, z2, y, loss=loss, labelled=labelled:
                       loss(losses.pair_scores(z1, z2, TEMPERATURE, labels=y if labelled else None)))
    return steps


def _run_step(step: Step, z1: Tensor, z2: Tensor, y: Tensor) -> None:
    a, b = z1.detach().requires_grad_(), z2.detach().requires_grad_()
    step(a, b, y).backward()


NO_LAUNCH = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "scalar_tensor"})
"""Operations that launch no kernel and return no view: allocations, and ``scalar_tensor``, the 0-dim host
tensor that carries a Python number into a kernel (``torch.where(m, x, 0.0)``)."""


class _OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if func.is_view or name in NO_LAUNCH:
            self.views += 1
        else:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


KERNEL_COUNT_BATCH = 64  # the batch size the eager rows' kernels are counted at (see the module docstring)


def inputs(batch: int, dim: int, seed: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
    """A step's ``z1, z2`` (a positive is its anchor plus noise) and ``y`` (N_CLASSES labels), the same for a seed."""
    gen = torch.Generator().manual_seed(seed + batch)
    z1 = torch.randn(batch, dim, generator=gen).to(device)
    z2 = z1 + 0.5 * torch.randn(batch, dim, generator=gen).to(device)
    return z1, z2, torch.randint(N_CLASSES, (batch,), generator=gen).to(device)


def count_kernels(step: Step, z1: Tensor, z2: Tensor, y: Tensor) -> tuple[int, int, dict[str, int]]:
    """Kernels and views one step dispatches on the accelerator's path, and the kernels by operation
    (see the module docstring), from CPU copies of the inputs."""
    z1, z2, y = z1.cpu(), z2.cpu(), y.cpu()
    with accelerator_path():
        _run_step(step, z1, z2, y)  # the first step of a layout builds its constants
        with _OpCounter() as counter:
            _run_step(step, z1, z2, y)
    return sum(counter.ops.values()), counter.views, dict(counter.ops)


def compiled(step: Step) -> Step:
    """``step`` through ``torch.compile``: one graph (the loss core traces without a break), static shapes."""
    return torch.compile(step, backend=COMPILE_BACKEND, fullgraph=True, dynamic=False)


def _launches(event_name: str) -> bool:
    """Whether a profiler event is an aten operation that launches a kernel: not a view, not an allocation (an
    operation this torch does not know counts as one)."""
    if not event_name.startswith("aten::"):
        return False
    name = event_name.removeprefix("aten::")
    if name in NO_LAUNCH:
        return False
    packet = getattr(torch.ops.aten, name, None)
    return packet is None or not all(getattr(packet, overload).is_view for overload in packet.overloads())


def count_compiled_kernels(step: Step, z1: Tensor, z2: Tensor, y: Tensor) -> int:
    """Kernels one step of a compiled ``step`` launches on ``z1``'s device, from the profiler (see the module
    docstring); the step must have run once (compiled) before."""
    from torch.profiler import ProfilerActivity, profile

    cuda = z1.device.type == "cuda"
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if cuda else [ProfilerActivity.CPU]
    with profile(activities=activities) as prof:
        _run_step(step, z1, z2, y)
        _sync(z1.device)
    events = prof.events()
    if cuda:
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset")))

    def kernel(name: str) -> bool:
        return "cpp_fused" in name or _launches(name)

    return sum(1 for e in events if kernel(e.name) and not any(kernel(c.name) for c in e.cpu_children))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_once(step: Step, z1: Tensor, z2: Tensor, y: Tensor) -> tuple[float, float]:
    """Wall time and CPU time of this process for one step, in seconds."""
    _sync(z1.device)
    wall, cpu = time.perf_counter(), time.process_time()
    _run_step(step, z1, z2, y)
    _sync(z1.device)
    return time.perf_counter() - wall, time.process_time() - cpu


def peak_memory(step: Step, z1: Tensor, z2: Tensor, y: Tensor) -> int:
    """Bytes the step holds at its peak above what was live before it (see the module docstring)."""
    if z1.device.type == "cuda":
        _sync(z1.device)
        torch.cuda.reset_peak_memory_stats(z1.device)
        before = torch.cuda.memory_allocated(z1.device)
        _run_step(step, z1, z2, y)
        _sync(z1.device)
        return torch.cuda.max_memory_allocated(z1.device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _run_step(step, z1, z2, y)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def run_benchmark(batch_sizes: Sequence[int] = (256, 512, 1024), dim: int = 128, device: str = "cpu",
                  repeats: int = 20, warmup: int = 3, threads: int | None = 1, seed: int = 0,
                  compile_at: Sequence[int] = (TARGET["batch_size"],)) -> list[dict]:
    """Time and peak memory of forward + backward for every loss and NT-Xent, one row per (B, loss, compiled).

    Each row: ``loss, batch_size, dim, device, threads, repeats, compiled, time_ms`` (median wall time),
    ``time_ratio`` (to NT-Xent at the same B, compiled alike), ``cpu_ms`` (median CPU time), ``cpu_ratio``,
    ``best_cpu_ms`` (minimum CPU time), ``best_cpu_ratio``, ``peak_mib``, ``memory_ratio``, ``kernels`` and
    ``views`` (eager rows: the aten operations of a step on the accelerator's path that launch a kernel and that
    do not, counted on the CPU whatever ``device``; compiled rows: the kernels counted by the profiler on
    ``device``, and no views), ``kernel_ratio``. Compiled rows at the batch sizes of ``batch_sizes`` that are in
    ``compile_at``. ``threads`` sets ``torch.set_num_threads`` for the run (restored after); None keeps the
    current setting."""
    dev = torch.device(device)
    previous_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        eager = _steps()
        small = inputs(KERNEL_COUNT_BATCH, dim, seed, torch.device("cpu"))
        eager_kernels = {name: count_kernels(step, *small)[:2] for name, step in eager.items()}
        rows = []
        for batch in batch_sizes:
            z1, z2, y = inputs(batch, dim, seed, dev)
            steps = {(name, False): step for name, step in eager.items()}
            if batch in compile_at:
                torch._dynamo.reset()  # a fresh compile per batch size, within dynamo's recompile limit
                steps |= {(name, True): compiled(step) for name, step in eager.items()}
            # Generated CPU kernels are seen by the profiler only when built with their own records.
            with inductor_config.patch({"cpp.enable_kernel_profile": True}):
                for _ in range(warmup):  # the first call of a compiled step compiles it
                    for key, step in list(steps.items()):
                        try:
                            _run_step(step, z1, z2, y)
                        except Exception as exc:  # noqa: BLE001 - compilers fail in many ways; the eager rows stay
                            if not key[1]:
                                raise
                            first_line = (str(exc).strip().splitlines() or [""])[0]
                            print(f"warning: no compiled rows at B={batch}: {key[0]} did not compile "
                                  f"({type(exc).__name__}: {first_line})", file=sys.stderr)
                            steps = {k: v for k, v in steps.items() if not k[1]}
                            break
            wall: dict[tuple[str, bool], list[float]] = {key: [] for key in steps}
            cpu: dict[tuple[str, bool], list[float]] = {key: [] for key in steps}
            for _ in range(repeats):
                for key, step in steps.items():
                    w, c = _time_once(step, z1, z2, y)
                    wall[key].append(w)
                    cpu[key].append(c)
            memory = {key: peak_memory(step, z1, z2, y) for key, step in steps.items()}
            kernels = {key: (count_compiled_kernels(step, z1, z2, y), None) if key[1] else eager_kernels[key[0]]
                       for key, step in steps.items()}
            for key in steps:
                name, is_compiled = key
                base = (BASELINE, is_compiled)
                time_s, cpu_s = statistics.median(wall[key]), statistics.median(cpu[key])
                rows.append({
                    "loss": name, "batch_size": batch, "dim": dim, "device": dev.type,
                    "threads": torch.get_num_threads(), "repeats": repeats, "compiled": is_compiled,
                    "time_ms": 1e3 * time_s, "time_ratio": time_s / statistics.median(wall[base]),
                    "cpu_ms": 1e3 * cpu_s, "cpu_ratio": cpu_s / statistics.median(cpu[base]),
                    "best_cpu_ms": 1e3 * min(cpu[key]), "best_cpu_ratio": min(cpu[key]) / min(cpu[base]),
                    "peak_mib": memory[key] / 2**20, "memory_ratio": memory[key] / memory[base],
                    "kernels": kernels[key][0], "views": kernels[key][1],
                    "kernel_ratio": kernels[key][0] / kernels[base][0],
                })
        return rows
    finally:
        torch.set_num_threads(previous_threads)


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width table; ratios past the issue's targets at B=512 are flagged."""
    lines = [f"{'B':>5}  {'loss':<13} {'compiled':>8} {'wall ms':>8} {'ratio':>6} {'cpu ms':>8} {'ratio':>6} "
             f"{'best cpu':>8} {'ratio':>6} {'peak MiB':>9} {'ratio':>6} {'kernels':>7} {'ratio':>6} {'views':>5}"]
    for r in rows:
        over = [what for what, limit in (("time", "time_ratio"), ("cpu", "time_ratio"), ("best_cpu", "time_ratio"),
                                         ("memory", "memory_ratio"), ("kernel", "time_ratio"))
                if r["batch_size"] == TARGET["batch_size"] and r[f"{what}_ratio"] > TARGET[limit]]
        views = "" if r["views"] is None else r["views"]
        lines.append(f"{r['batch_size']:>5}  {r['loss']:<13} {'yes' if r['compiled'] else 'no':>8} "
                     f"{r['time_ms']:>8.2f} {r['time_ratio']:>6.2f} "
                     f"{r['cpu_ms']:>8.2f} {r['cpu_ratio']:>6.2f} {r['best_cpu_ms']:>8.2f} {r['best_cpu_ratio']:>6.2f} "
                     f"{r['peak_mib']:>9.2f} {r['memory_ratio']:>6.2f} {r['kernels']:>7} {r['kernel_ratio']:>6.2f} "
                     f"{views:>5}" + (f"  over target: {', '.join(over)}" if over else ""))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m losses.benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for the run (default 1)")
    parser.add_argument("--compile-at", type=int, nargs="*", default=[TARGET["batch_size"]],
                        help="batch sizes that also get compiled rows (default %(default)s; none: no value)")
    args = parser.parse_args(argv)
    rows = run_benchmark(args.batch_sizes, args.dim, args.device, args.repeats, threads=args.threads,
                         compile_at=args.compile_at)
    print(f"forward + backward from raw [B, {args.dim}] embeddings (pair_scores, t={TEMPERATURE}) on "
          f"{rows[0]['device']} with {rows[0]['threads']} thread(s); medians of {args.repeats} steps; ratios to "
          f"NT-Xent (compiled rows: to the compiled NT-Xent). Target at B={TARGET['batch_size']}: time <= "
          f"{TARGET['time_ratio']}x, peak memory <= {TARGET['memory_ratio']}x. Kernels: launched by a step on the "
          f"accelerator's path, counted on the CPU (a proxy for the GPU's launch-bound time at "
          f"B={TARGET['batch_size']}); compiled rows: counted by the profiler.")
    print(format_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
