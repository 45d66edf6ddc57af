"""``harness run``: turn the parsed arguments into a RunRequest, execute it, print one line per run.

The package is the run and what it needs, which ``harness sweep`` and ``harness bench`` share: its configuration
(:mod:`.config`: preset, overrides, loss hyper-parameters), its execution seed by seed (:mod:`.runner`), live
tracking (:mod:`.tracking`), graceful stops (:mod:`.stopping`) and what a run shows (:mod:`.output`).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import shlex
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path

import domains
from domains.base import counted
from domains.errors import RunStopped
from harness.machine import omp_threads
from harness.numbers import fmt, spread
from harness.records import RunRecord
from harness.run import config as cfg
from harness.run import stopping, tracking
from harness.run.runner import Outcome, RunRequest, builtin_data_root, default_data_root, execute, plan


def request_from_args(args: argparse.Namespace) -> RunRequest:
    return RunRequest(
        domain=args.domain, loss=args.loss, method=args.method, dataset=args.dataset,
        seeds=cfg.parse_seeds(args.seeds) if args.seeds is not None else None, preset=args.preset,
        sets=cfg.parse_assignments(args.sets, once=True), device=args.device, data_root=args.data_root,
        results=args.results, resume=args.resume, force=args.force, quiet=args.quiet,
        trackers=tracking.resolve(args.trackers), save_model=args.save_model,
    )


def summary_line(outcome: Outcome) -> str:
    """One line per run: status, run id, primary metric, time, record path."""
    record = outcome.record
    if outcome.status in ("completed", "skipped") and record is not None and record.metrics:
        primary = record.primary_metric
        took = record.timings.get("total_s", 0.0)
        what = "exists" if outcome.status == "skipped" else f"{took:.1f}s"
        value = metric_text(record.metrics[primary])
        return f"[{outcome.status}] {outcome.run_id}: {primary}={value} ({what}) -> {outcome.path}"
    if outcome.status == "busy":
        return f"[busy] {outcome.run_id}: {outcome.error}; not run here"
    return f"[{outcome.status}] {outcome.run_id}: {outcome.error} -> {outcome.path}"


def metric_text(value: object) -> str:
    """A run's metric on a line of its own (a seed's, a sweep job's) to the decimals the pages and the run's summary
    print it with (:func:`fmt`): ``95.20`` beside the summary's ``95.20 ± 1.68``, not ``95.2``; a count kept as a
    whole number (``n_test=3775``) as it is."""
    if value is None:  # how a record holds a NaN or infinite metric
        return "null (non-finite)"
    if isinstance(value, int):
        return str(value)
    return fmt(value) if isinstance(value, float) else str(value)


def invocation() -> list[str]:
    """How this process was started, for the commands it prints: ``harness`` (the installed script), or
    ``python3 -m harness`` when run as a module, as on a machine that runs the project from source; each as
    :func:`as_found` names it, so that the printed command runs this installation where the venv is not activated."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "harness.__main__":
        return [as_found(sys.executable), "-m", "harness"]
    script = sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "harness" else ""
    return [as_found(script) if script else "harness"]


def as_found(program: str) -> str:
    """``program``'s bare name where the shell's PATH finds this very file under it (an activated venv), else its
    absolute path: ``.venv/bin/python`` is not the ``python`` a shell runs outside the venv, which lacks the
    project's packages. Links are not followed: a venv's python links to the system's, yet is not it."""
    name = Path(program).name
    found = shutil.which(name)
    return name if found and os.path.abspath(found) == os.path.abspath(program) else os.path.abspath(program)


def resume_command(argv: list[str], data_root: str | None = None) -> str:
    """The command that continues an interrupted ``harness run``, ``sweep`` or ``bench``: the same arguments with
    ``--resume``, started the way this process was (:func:`invocation`). A ``--force`` stays: ``--force
    --resume`` goes on with the forced rerun, redoing only the seeds it had not redone yet
    (:func:`harness.run.runner.force_mark`). It starts with the data root (``data_root``: ``--data-root``;
    :func:`data_root_prefix`) and this process's plugins (:func:`plugins_prefix`): in a new shell, the command
    without them reads other data, or names an unknown loss or domain."""
    return data_root_prefix(data_root) + plugins_prefix() + \
        shlex.join([*invocation(), *argv, *([] if "--resume" in argv else ["--resume"])])


def plugins_prefix(modules: Iterable[str] | None = None) -> str:
    """What a printed command starts with so that it runs pasted in a new shell: ``HARNESS_PLUGINS=a,b `` naming
    the plugin ``modules`` (by default those that ``HARNESS_PLUGINS`` names in this process), or nothing without
    any. Every command the harness prints for a user to run again starts with it, after the data root
    (:func:`data_root_prefix`): :func:`resume_command`, :func:`reproduce_line`, a sweep's ``--dry-run`` jobs."""
    named = ",".join(dict.fromkeys(domains.plugin_modules() if modules is None else modules))
    return f"HARNESS_PLUGINS={shlex.quote(named)} " if named else ""


def data_root_prefix(cli_value: str | None) -> str:
    """What a printed command starts with so that it reads the same data pasted in a new shell:
    ``HARNESS_DATA_ROOT=<absolute path> `` where the data root (``--data-root``, else ``$HARNESS_DATA_ROOT``) is
    not the built-in one, else nothing. The record's command carries neither: the data root is no part of a
    run's identity (its data's fingerprint is)."""
    root = default_data_root(cli_value).resolve()
    return "" if root == builtin_data_root().resolve() else f"HARNESS_DATA_ROOT={shlex.quote(str(root))} "


def _print_outcome(outcome: Outcome, data_root: str | None = None) -> None:
    print(summary_line(outcome), flush=True)
    record = outcome.record
    if outcome.status in ("completed", "skipped") and record:
        metrics = ", ".join(f"{k}={metric_text(v)}" for k, v in sorted(record.metrics.items()))
        print(f"  seed {record.seed}: {metrics}")
        print(f"    reproduce: {reproduce_line(record, data_root)}", flush=True)
    if outcome.model:
        print(f"  {outcome.model}", flush=True)
    if outcome.note:
        print(f"  note: {outcome.note}", flush=True)


def reproduce_line(record: RunRecord, data_root: str | None = None) -> str:
    """The shell line that reruns a record's run, read from the data root ``data_root`` (``--data-root``, None:
    :func:`default_data_root`'s): its command, after the data root where it is not the built-in one
    (:func:`data_root_prefix`: one's own data is not found without it) and ``HARNESS_PLUGINS`` naming the plugins
    that provided its domain or loss (``software.plugins``), without which the command names an unknown one."""
    return data_root_prefix(data_root) + plugins_prefix(record.software.get("plugins") or {}) + \
        shlex.join(record.command)


def time_limit(args: argparse.Namespace) -> float | None:
    """``--time-limit`` in seconds (None without one); UserError for a value that is no duration."""
    return stopping.parse_duration(args.time_limit) if args.time_limit else None


def _metric_summary(done: list[RunRecord]) -> str:
    """The primary metric's mean ± std over the seeds where it is finite, as the pages print it (:func:`spread`),
    and how many are not (the record writer stores NaN and infinity as null)."""
    primary = done[0].primary_metric
    values = [r.metrics.get(primary) for r in done]
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return f"{primary}: non-finite on all {len(values)} seeds (null in the records)"
    stat = spread(finite)
    bad = len(values) - len(finite)
    if not bad:
        return f"{primary}: {stat} over {len(values)} seeds"
    return f"{primary}: {stat} over {len(finite)} of {len(values)} seeds; {bad} non-finite (null in the record)"


def cmd_run(args: argparse.Namespace) -> int:
    """Print each seed as it finishes; exit 0, 1 (a run failed), 2 (user error), 75 (``stopping.EXIT_STOPPED``:
    stopped at a checkpoint by SIGTERM, SIGUSR1 or --time-limit, or a seed busy in another process: not done yet)
    or 130 (interrupted by Ctrl-C at once)."""
    omp_threads()  # a bad OMP_NUM_THREADS is refused, as by a sweep, not warned of by OpenMP and run on every core
    request, limit = request_from_args(args), time_limit(args)
    try:
        with stopping.graceful(stopping.STOP_SIGNALS, limit):
            outcomes = execute(request, on_outcome=functools.partial(_print_outcome, data_root=request.data_root))
    except KeyboardInterrupt:
        # The interrupted seed's checkpoint is in <results>/.work/; completed seeds have their records.
        print(f"interrupted; continue with: {resume_command(args.argv, args.data_root)}", file=sys.stderr)
        return 130
    except RunStopped as stop:
        print(f"stopped ({stop}) at a checkpoint; continue with: {resume_command(args.argv, args.data_root)}",
              file=sys.stderr)
        return stopping.EXIT_STOPPED
    done = [o.record for o in outcomes if o.status in ("completed", "skipped") and o.record]
    if len(done) > 1:
        print(_metric_summary(done))
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        # A run stops at its first failed seed (a diverged config would fail the next ones alike): say which not ran.
        left = [spec.seed for spec in plan(request).specs][len(outcomes):]
        unrun = f"; seed(s) {','.join(map(str, left))} not run: a run stops at its first failed seed" if left else ""
        print(f"error: {failed[0].error} (log: {failed[0].path.with_suffix('.log')}){unrun}", file=sys.stderr)
        return 2 if failed[0].user_error else 1
    busy = sum(o.status == "busy" for o in outcomes)
    if busy:
        # Not done yet: a script running `harness run && harness leaderboard` must not publish without them.
        print(f"not finished: {counted(busy, 'seed')} busy in another process; once it is done, continue "
              f"with: {resume_command(args.argv, args.data_root)}", file=sys.stderr)
        return stopping.EXIT_STOPPED
    return 0
