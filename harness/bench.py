"""``harness bench losses|<domain>|all``: speed benchmarks, printed as a table and saved as JSON.

``losses`` calls ``losses.benchmark.run_benchmark(batch_sizes, dim, device)``; a domain name calls that
domain's ``benchmark(device, data_root, quick)``; ``all`` runs ``losses`` and then every domain (or those
named in ``--targets``). Each target's rows go to ``<out>/<target>-<device>.json`` (atomically), with the
hardware, software (git commit), date and the command that reproduces them; ``harness leaderboard`` renders
those files into ``leaderboards/bench.md`` (harness/pages/bench.py).

Exit status of ``all``: 0 when every target wrote its file; 3 when some target was skipped because its
extra, its data or its benchmark is missing (a ``UserError``, one line each) and none failed; 1 when some
target failed with an unexpected error (its traceback is printed, the other targets still run).
"""

from __future__ import annotations

import argparse
import importlib
import platform
import traceback
from pathlib import Path
from typing import Any

import torch

import domains
from domains.base import UserError
from harness.records import hardware_info, utc_now, write_json_atomic
from harness.runner import default_data_root, resolve_device
from harness.tables import text
from harness.version import software_info

# The batch sizes: on a GPU the loss core is timed where the 2B x 2B matrices dominate.
DEFAULT_BATCH_SIZES = {"cuda": "512,4096,16384", "cpu": "256,512,1024"}
SKIPPED_EXIT = 3


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows of flat dicts as an aligned text table (columns in first-seen order)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    return text(columns, cells, right=[all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns])


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cpu_name() -> str:
    """The CPU model (``platform.processor()`` is empty on most Linux systems, so /proc/cpuinfo first)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device) -> dict[str, Any]:
    """What a figure depends on besides the code: the run records' hardware fields plus the CPU model and cuDNN."""
    hardware = hardware_info(device)
    hardware["cpu"] = cpu_name()
    hardware["cudnn"] = torch.backends.cudnn.version() if device.type == "cuda" else None
    return {"hardware": hardware, "software": software_info(), "date": utc_now()}


def batch_sizes(text: str | None, device: torch.device) -> list[int]:
    text = text or DEFAULT_BATCH_SIZES.get(device.type, DEFAULT_BATCH_SIZES["cpu"])
    try:
        sizes = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UserError(f"--batch-sizes expects comma-separated integers, got '{text}'") from None
    if not sizes or min(sizes) < 2:
        raise UserError(f"--batch-sizes needs batch sizes of at least 2, got '{text}'")
    return sizes


def bench_one(target: str, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """Run one target's benchmark, print its table, write its JSON file and return its rows."""
    command = ["harness", "bench", target, "--device", device.type]
    if target == "losses":
        try:
            benchmark = importlib.import_module("losses.benchmark")
        except ImportError as exc:
            raise UserError(f"the loss benchmark is not available ({exc})") from None
        sizes = batch_sizes(args.batch_sizes, device)
        command += ["--batch-sizes", ",".join(map(str, sizes)), "--dim", str(args.dim)]
        rows = benchmark.run_benchmark(sizes, args.dim, str(device))
    else:
        command += ["--quick"] if args.quick else []
        rows = domains.get(target).benchmark(device, default_data_root(args.data_root), args.quick)
    print(format_table(rows))
    path = Path(args.out) / f"{target}-{device.type}.json"
    # The file's keys are written sorted, so the rows' column order is kept beside them for the page.
    columns = list(dict.fromkeys(key for row in rows for key in row))
    write_json_atomic(path, {"name": target, "device": str(device), "quick": target != "losses" and args.quick,
                             "command": command, **environment(device), "columns": columns, "rows": rows})
    print(f"wrote {path}")
    return rows


def all_targets(names: str | None) -> list[str]:
    known = ["losses", *domains.available()]
    if not names:
        return known
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        raise UserError(f"--targets: unknown target(s) {', '.join(unknown) or '(none given)'}; "
                        f"available: {', '.join(known)}")
    return list(dict.fromkeys(chosen))


def bench_all(args: argparse.Namespace, device: torch.device) -> int:
    """Every target in turn; a missing extra or dataset skips that target only (see the module docstring)."""
    written: list[str] = []
    skipped: dict[str, str] = {}
    failed: list[str] = []
    for target in all_targets(args.targets):
        print(f"== bench {target} on {device}", flush=True)
        try:
            rows = bench_one(target, args, device)
        except (UserError, ImportError) as exc:
            skipped[target] = " ".join(str(exc).split())
            print(f"skipped {target}: {skipped[target]}", flush=True)
            continue
        except Exception:  # one broken benchmark must not cost the others' GPU time
            failed.append(target)
            traceback.print_exc()
            print(f"failed {target} (traceback above)", flush=True)
            continue
        written.append(target)
        # A domain that benchmarks several datasets reports a missing one as a row with a "skipped" reason.
        for row in rows:
            if "skipped" in row:
                part = f"{target}/{row.get('dataset', '?')}"
                skipped[part] = " ".join(str(row["skipped"]).split())
                print(f"skipped {part}: {skipped[part]}", flush=True)
    print(f"bench all: written {', '.join(written) or 'none'}; skipped {', '.join(skipped) or 'none'}; "
          f"failed {', '.join(failed) or 'none'}")
    return 1 if failed else SKIPPED_EXIT if skipped else 0


def cmd_bench(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    if args.target == "all":
        return bench_all(args, device)
    if args.targets:
        raise UserError("--targets only goes with 'harness bench all'")
    bench_one(args.target, args, device)
    return 0
