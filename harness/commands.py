"""``harness run``: turn the parsed arguments into a RunRequest, execute it, print one line per run."""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

from domains.base import RunStopped
from harness import config as cfg
from harness import stopping, tracking
from harness.runner import Outcome, RunRequest, execute


def request_from_args(args: argparse.Namespace) -> RunRequest:
    return RunRequest(
        domain=args.domain, loss=args.loss, method=args.method, dataset=args.dataset,
        seeds=cfg.parse_seeds(args.seeds) if args.seeds else None, preset=args.preset,
        sets=cfg.parse_assignments(args.sets), device=args.device, data_root=args.data_root,
        results=args.results, resume=args.resume, force=args.force, quiet=args.quiet,
        trackers=tracking.resolve(args.trackers),
    )


def summary_line(outcome: Outcome) -> str:
    """One line per run: status, run id, primary metric, time, record path."""
    record = outcome.record
    if outcome.status in ("completed", "skipped") and record is not None and record.metrics:
        primary = record.primary_metric
        took = record.timings.get("total_s", 0.0)
        what = "exists" if outcome.status == "skipped" else f"{took:.1f}s"
        value = _fmt(record.metrics[primary])
        return f"[{outcome.status}] {outcome.run_id}: {primary}={value} ({what}) -> {outcome.path}"
    if outcome.status == "busy":
        return f"[busy] {outcome.run_id}: {outcome.error}; skipped"
    return f"[{outcome.status}] {outcome.run_id}: {outcome.error} -> {outcome.path}"


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else str(value)


def invocation() -> list[str]:
    """How this process was started, for the commands it prints: ``harness`` (the installed script), or
    ``python3 -m harness`` when run as a module, as on a machine that runs the project from source."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "harness.__main__":
        return [Path(sys.executable).name, "-m", "harness"]
    return ["harness"]


def resume_command(argv: list[str]) -> str:
    """The command that continues an interrupted ``harness run``, ``sweep`` or ``bench``: the same arguments with
    ``--resume``, without ``--force`` (which would redo the seeds that completed before the interruption), started
    the way this process was (:func:`invocation`)."""
    args = [a for a in argv if a != "--force"]
    return shlex.join([*invocation(), *args, *([] if "--resume" in args else ["--resume"])])


def _print_outcome(outcome: Outcome) -> None:
    print(summary_line(outcome), flush=True)
    record = outcome.record
    if outcome.status in ("completed", "skipped") and record:
        metrics = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(record.metrics.items()))
        print(f"  seed {record.seed}: {metrics}")
        print(f"    reproduce: {shlex.join(record.command)}", flush=True)


def time_limit(args: argparse.Namespace) -> float | None:
    """``--time-limit`` in seconds (None without one); UserError for a value that is no duration."""
    return stopping.parse_duration(args.time_limit) if args.time_limit else None


def cmd_run(args: argparse.Namespace) -> int:
    """Print each seed as it finishes; exit 0, 1 (a run failed), 2 (user error), 75 (``stopping.EXIT_STOPPED``:
    stopped at a checkpoint by SIGTERM, SIGUSR1 or --time-limit) or 130 (interrupted by Ctrl-C at once)."""
    request, limit = request_from_args(args), time_limit(args)
    try:
        with stopping.graceful(stopping.STOP_SIGNALS, limit):
            outcomes = execute(request, on_outcome=_print_outcome)
    except KeyboardInterrupt:
        # The interrupted seed's checkpoint is in <results>/.work/; completed seeds have their records.
        print(f"interrupted; continue with: {resume_command(args.argv)}", file=sys.stderr)
        return 130
    except RunStopped as stop:
        print(f"stopped ({stop}) at a checkpoint; continue with: {resume_command(args.argv)}", file=sys.stderr)
        return stopping.EXIT_STOPPED
    done = [o.record for o in outcomes if o.status in ("completed", "skipped") and o.record]
    if len(done) > 1:
        primary = done[0].primary_metric
        values = [r.metrics[primary] for r in done]
        print(f"{primary}: {statistics.mean(values):.4g} ± {statistics.stdev(values):.4g} over {len(values)} seeds")
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        print(f"error: {failed[0].error} (log: {failed[0].path.with_suffix('.log')})", file=sys.stderr)
        return 2 if failed[0].user_error else 1
    return 0
