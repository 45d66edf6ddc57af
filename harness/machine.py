"""The machine a run ran on, as its record and a benchmark's note it: the device, the CPU and the libraries."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from domains.errors import UserError


def cpu_name() -> str:
    """The CPU model (``platform.processor()`` is empty on most Linux systems, so /proc/cpuinfo first)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware_info(device: torch.device) -> dict[str, Any]:
    """The machine and libraries a run ran on. A seed reruns bit for bit only on the same ones: the thread count
    orders float reductions, and the CPU's instruction set picks PyTorch's kernels (``cpu_capability``: rerun
    with other kernels, the regression suite's graph seeds moved like fresh seeds)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
    return {
        "device": str(device), "device_name": name, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "platform": platform.platform(),
    }


def omp_threads() -> int | None:
    """The thread count ``OMP_NUM_THREADS`` sets (its first, where OpenMP's list gives one per nesting level), None
    where it is unset; UserError where it is no count: OpenMP only warns of it, and torch then takes every core."""
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if not given:
        return None
    first = given.split(",")[0].strip()
    if not first.isdigit() or int(first) < 1:
        raise UserError(f"OMP_NUM_THREADS='{given}' is not a number of threads (1 or more): set it to one, or unset "
                        "it to let torch choose")
    return int(first)
