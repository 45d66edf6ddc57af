"""``harness bench losses|<domain>``: speed benchmarks, printed as a table and saved as JSON.

``losses`` calls ``losses.benchmark.run_benchmark(batch_sizes, dim, device)``; a domain name calls that
domain's ``benchmark(device, data_root, quick)``. Rows go to ``<out>/<name>-<device>.json`` (atomically).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from domains import get
from domains.base import UserError
from harness.records import hardware_info, write_json_atomic
from harness.runner import default_data_root, resolve_device


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows of flat dicts as an aligned text table (columns in first-seen order)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    numeric = [all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns]
    lines += ["  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(r, widths, numeric)) for r in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_bench(args: argparse.Namespace) -> int:
    device = resolve_device(args.device)
    if args.target == "losses":
        try:
            benchmark = importlib.import_module("losses.benchmark")
        except ImportError as exc:
            raise UserError(f"the loss benchmark is not available ({exc})") from None
        try:
            sizes = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
        except ValueError:
            raise UserError(f"--batch-sizes expects comma-separated integers, got '{args.batch_sizes}'") from None
        rows = benchmark.run_benchmark(sizes, args.dim, str(device))
    else:
        rows = get(args.target).benchmark(device, default_data_root(args.data_root), args.quick)
    print(format_table(rows))
    path = Path(args.out) / f"{args.target}-{device.type}.json"
    write_json_atomic(path, {"name": args.target, "device": str(device), "hardware": hardware_info(device),
                             "rows": rows})
    print(f"wrote {path}")
    return 0
