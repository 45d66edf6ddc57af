"""The loss benchmark runs and returns well-formed rows (never gated on time: that is its report)."""

from __future__ import annotations

import math

import pytest
import torch

import losses
from losses import benchmark

KEYS = {"loss", "batch_size", "dim", "device", "threads", "repeats", "time_ms", "time_ratio", "cpu_ms", "cpu_ratio",
        "best_cpu_ms", "best_cpu_ratio", "peak_mib", "memory_ratio", "kernels", "views", "kernel_ratio", "compiled"}


def test_run_benchmark_rows():
    threads = torch.get_num_threads()
    rows = benchmark.run_benchmark(batch_sizes=(8, 12), dim=4, repeats=2, warmup=1, compile_at=())
    assert torch.get_num_threads() == threads  # restored
    expected = [benchmark.BASELINE, *benchmark.UNSUPERVISED, *benchmark.LABELLED]
    assert [r["loss"] for r in rows] == expected * 2
    for r in rows:
        assert set(r) == KEYS
        assert r["device"] == "cpu" and r["dim"] == 4 and r["threads"] == 1 and r["repeats"] == 2
        assert r["compiled"] is False
        for key in ("time_ms", "time_ratio", "peak_mib", "memory_ratio"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["loss"], key)
    for r in rows:
        if r["loss"] == benchmark.BASELINE:
            assert r["time_ratio"] == r["memory_ratio"] == r["kernel_ratio"] == 1.0


def test_compiled_rows_at_the_batch_sizes_asked(monkeypatch):
    """Each step again through torch.compile, its ratios to the compiled NT-Xent (aot_eager here: the rows, not
    the generated code, which the next test reads)."""
    monkeypatch.setattr(benchmark, "COMPILE_BACKEND", "aot_eager")
    rows = benchmark.run_benchmark(batch_sizes=(8, 12), dim=4, repeats=1, warmup=1, compile_at=(12, 512))
    expected = [benchmark.BASELINE, *benchmark.UNSUPERVISED, *benchmark.LABELLED]
    assert [(r["batch_size"], r["loss"], r["compiled"]) for r in rows] == [
        *((8, name, False) for name in expected), *((12, name, False) for name in expected),
        *((12, name, True) for name in expected)]
    for r in rows[-len(expected):]:
        assert set(r) == KEYS and r["views"] is None and r["kernels"] >= 2  # at least the matrix products
        if r["loss"] == benchmark.BASELINE:
            assert r["time_ratio"] == r["memory_ratio"] == r["kernel_ratio"] == 1.0


def test_a_step_that_does_not_compile_leaves_the_eager_rows(monkeypatch, capsys):
    """No compiled row at all then (a compiled target must not read a partial set), and a warning that says why."""
    def broken(step, **options):
        def fail(*args):
            raise RuntimeError("no compiler here")
        return fail

    monkeypatch.setattr(torch, "compile", broken)
    rows = benchmark.run_benchmark(batch_sizes=(8,), dim=4, repeats=1, warmup=1, compile_at=(8,))
    assert [r["compiled"] for r in rows] == [False] * 8
    err = capsys.readouterr().err
    assert "no compiled rows at B=8: nt_xent did not compile (RuntimeError: no compiler here)" in err


def test_compiling_fuses_a_step_into_a_few_kernels():
    """Inductor's C++ kernels on the CPU: the compiled step of NT-Xent and of DCL launches a small fraction of
    the kernels that their eager steps dispatch, the matrix products among them."""
    torch._dynamo.reset()
    z1, z2, y = torch.randn(32, 8), torch.randn(32, 8), torch.zeros(32, dtype=torch.long)
    steps = benchmark._steps()
    with benchmark.inductor_config.patch({"cpp.enable_kernel_profile": True}):
        for name in (benchmark.BASELINE, "dcl"):
            step = benchmark.compiled(steps[name])
            benchmark._run_step(step, z1, z2, y)  # compiles
            fused = benchmark.count_compiled_kernels(step, z1, z2, y)
            eager = benchmark.count_kernels(steps[name], z1, z2, y)[0]
            assert 3 <= fused < eager / 3, (name, fused, eager)


def test_the_operations_a_step_dispatches_do_not_depend_on_the_batch_size():
    # What lets run_benchmark count every row's eager kernels once, at KERNEL_COUNT_BATCH: a loss that took
    # another path at another batch size (a chunked product, a size check) would make its rows' counts wrong.
    steps = benchmark._steps()
    counted = {batch: {name: benchmark.count_kernels(step, *benchmark.inputs(batch, 16, 0, torch.device("cpu")))[2]
                       for name, step in steps.items()}
               for batch in (benchmark.KERNEL_COUNT_BATCH, 6, 700)}
    assert counted[6] == counted[benchmark.KERNEL_COUNT_BATCH] == counted[700]


def test_profiler_kernel_rule():
    """Views and allocations launch nothing; other aten operations, known or not, launch a kernel."""
    assert not benchmark._launches("aten::view") and not benchmark._launches("aten::t")
    assert not benchmark._launches("aten::empty_strided") and not benchmark._launches("cudaLaunchKernel")
    assert benchmark._launches("aten::mm") and benchmark._launches("aten::exp")
    assert benchmark._launches("aten::an_operation_this_torch_does_not_have")


def test_peak_memory_counts_the_step():
    z, y = torch.randn(64, 16), torch.zeros(64, dtype=torch.long)

    def step(a, b, labels):
        return benchmark.nt_xent(a, b, 0.5)

    small = benchmark.peak_memory(step, z, z, y)
    big = benchmark.peak_memory(step, z.repeat(4, 1), z.repeat(4, 1), y)
    # The step holds a few [2B, 2B] float32 matrices: 4x the batch is ~16x the memory.
    assert 3 * (128 * 128 * 4) <= small < 20 * (128 * 128 * 4)
    assert big > 8 * small


def test_the_baseline_is_nt_xent():
    z1, z2 = torch.randn(6, 5), torch.randn(6, 5)
    expected = losses.infonce(losses.pair_scores(z1, z2, 0.5)).item()
    assert benchmark.nt_xent(z1, z2, 0.5).item() == pytest.approx(expected, rel=1e-5)


def test_main_prints_the_table(capsys):
    assert benchmark.main(["--batch-sizes", "8", "--dim", "4", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "nt_xent" in out and "debiased_pos" in out and "peak MiB" in out and "kernels" in out
