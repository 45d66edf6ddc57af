"""``harness bench losses|<domain>|all``: speed benchmarks, printed as a table and saved as JSON.

``losses`` calls ``losses.benchmark.run_benchmark(batch_sizes, dim, device)``; a domain name calls that
domain's ``benchmark(device, data_root, quick)``; ``all`` runs ``losses`` and then every domain (or those
named in ``--targets``). Each target's rows go to ``<out>/<target>-<device>.json`` (atomically), with the
hardware, software (git commit), date and the command that reproduces them; ``harness leaderboard`` renders
those files into ``leaderboards/bench.md`` (harness/pages/bench.py).

Exit status of ``all``: 0 when every target wrote its file; 3 when some target was skipped because its
extra, its data or its benchmark is missing (a ``UserError``, one line each) and none failed; 1 when some
target failed with an unexpected error (its traceback is printed, the other targets still run).

A benchmark is a list of parts (:class:`domains.base.BenchPart`; for ``losses``, one per batch size), and
its file is rewritten after each part, marked ``complete: false`` until the last, so that a benchmark killed
midway (a GPU machine's call that runs out of time) leaves the parts it measured. ``--resume`` keeps the parts
a file holds when the same code measured them on the same kind of machine with the same options, and measures
the rest (a complete file has nothing left: the target is skipped). ``--time-limit``, SIGTERM and SIGUSR1 stop
a benchmark between two parts: after the part under way, or before a part that would end past the limit, judged
by its own time when the file at ``--out`` measured it before on this kind of machine (any code), else by the
longest part so far. It then exits 75 (``stopping.EXIT_STOPPED``), and the same command with ``--resume`` goes
on; ``all`` starts no further target. A part that crashes (its traceback is printed) is left out of the file and
the target's other parts still run; the target counts as failed, and ``--resume`` measures that part again.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

import domains
from domains.base import BenchPart, did_you_mean
from domains.errors import UserError
from domains.files import refuse_link
from harness.machine import hardware_info
from harness.pages.bench import PART_KEY, TARGETS, figures, number
from harness.records import utc_now, write_json_atomic
from harness.run import resume_command, stopping, time_limit
from harness.run.output import output_settings
from harness.run.runner import default_data_root, resolve_device
from harness.tables import text
from harness.version import software_info, tree_digest

# The batch sizes: on a GPU the loss core is timed where the 2B x 2B matrices dominate.
DEFAULT_BATCH_SIZES = {"cuda": "512,4096,16384", "cpu": "256,512,1024"}
SKIPPED_EXIT = 3


def format_table(rows: list[dict[str, Any]]) -> str:
    """Rows of flat dicts as an aligned text table (columns in first-seen order), each value as bench.md prints it
    (:func:`harness.pages.bench.number`)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(key for row in rows for key in row))
    cells = [[number(row.get(c, "")) for c in columns] for row in rows]
    return text(columns, cells, right=[all(isinstance(row.get(c), (int, float)) for row in rows) for c in columns])


def environment(device: torch.device, domain: str | None = None) -> dict[str, Any]:
    """What a figure depends on besides the code: the run records' hardware fields plus the CPU model and cuDNN;
    and the code: every file of the packages (the benchmark's own modules are no run's), a plugin's included where
    ``domain`` is one."""
    hardware = hardware_info(device)
    hardware["cudnn"] = torch.backends.cudnn.version() if device.type == "cuda" else None
    return {"hardware": hardware, "software": software_info(domain, packages=tree_digest()), "date": utc_now()}


DEFAULT_DIM = 128  # the embedding size of the loss benchmark


def batch_sizes(text: str | None, device: torch.device) -> list[int]:
    text = text or DEFAULT_BATCH_SIZES.get(device.type, DEFAULT_BATCH_SIZES["cpu"])
    try:
        sizes = [int(b) for b in text.split(",") if b.strip()]
    except ValueError:
        raise UserError(f"--batch-sizes expects comma-separated integers, got '{text}'") from None
    if not sizes or min(sizes) < 2:
        raise UserError(f"--batch-sizes needs batch sizes of at least 2, got '{text}'")
    return sizes


def parts(target: str, args: argparse.Namespace, device: torch.device) -> tuple[list[str], list[BenchPart]]:
    """The command that reproduces ``target``'s benchmark, and its parts."""
    command = ["harness", "bench", target, "--device", device.type]
    if target == "losses":
        try:
            benchmark = importlib.import_module("losses.benchmark")
        except ImportError as exc:
            raise UserError(f"the loss benchmark is not available ({exc})") from None
        sizes = batch_sizes(args.batch_sizes, device)
        dim = DEFAULT_DIM if args.dim is None else args.dim
        command += ["--batch-sizes", ",".join(map(str, sizes)), "--dim", str(dim)]
        # One part per batch size: its rows' ratios are to NT-Xent at that size.
        return command, [BenchPart(f"B={b}", lambda b=b: benchmark.run_benchmark([b], dim, str(device)))
                         for b in sizes]
    command += ["--quick"] if args.quick else []
    return command, domains.get(target).benchmark(device, default_data_root(args.data_root), args.quick)


# What must match for --resume to keep a file's parts: the same options, code and kind of machine.
SAME_MACHINE = ("device", "device_name", "cpu", "cpu_count", "torch", "cuda", "cudnn", "python")


def read_saved(path: Path) -> Any:
    """What the benchmark file at ``path`` holds: None where there is none, an empty dict (no parts, no times)
    where it cannot be read. UserError where it is a symbolic link (as the bench pages refuse one: --resume would
    keep the parts of whatever file it points at)."""
    refuse_link(path, path.parent)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def same_machine(saved: dict[str, Any], env: dict[str, Any]) -> bool:
    """Whether a file was measured on this kind of machine (:data:`SAME_MACHINE`)."""
    return all(saved["hardware"].get(k) == env["hardware"].get(k) for k in SAME_MACHINE)


def kept_parts(saved: Any, path: Path, target: str, command: list[str], env: dict[str, Any]) -> dict[str, Any] | None:
    """The file at ``path`` (``saved``: :func:`read_saved`) if ``--resume`` may keep its parts, else None, saying
    why on stdout."""
    if saved is None:
        return None
    try:
        readable = (isinstance(saved["parts_done"], list) and isinstance(saved["rows"], list)
                    and isinstance(saved.get("columns", []), list))
        same = (saved["command"] == command and saved["software"]["source_digest"] == env["software"]["source_digest"]
                and same_machine(saved, env))
    except (KeyError, TypeError, AttributeError):
        readable = False
    if not readable:  # a file written before benchmarks had parts, or no benchmark file at all
        print(f"{target}: {path} holds no parts to resume; measuring every part", flush=True)
        return None
    if not same:
        print(f"{target}: {path} was measured with other options, other code or on another kind of machine; "
              "measuring every part", flush=True)
        return None
    return saved


def earlier_seconds(saved: Any, env: dict[str, Any]) -> dict[str, float]:
    """How long each part took when the file (``saved``: :func:`read_saved`) last measured it on this kind of
    machine, whatever code or options measured it: what a time limit expects of a part before starting it (a part
    that took 97 s should not start with 60 s left because the one before it took 13). Empty without such a file."""
    try:
        if not same_machine(saved, env):
            return {}
        return {part: float(seconds) for session in saved.get("sessions", [])
                for part, seconds in session.get("seconds", {}).items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return {}


class PartsFailed(Exception):
    """Some parts of a benchmark crashed (their tracebacks were printed); the others are in its file."""


def bench_one(target: str, args: argparse.Namespace, device: torch.device) -> tuple[list[dict[str, Any]], bool]:
    """Run one target's benchmark part by part, rewriting its JSON file after each; print its table. Returns
    the file's rows and whether every part is in it (False: stopped, see the module docstring); PartsFailed
    after the last part when some crashed."""
    command, todo = parts(target, args, device)
    names = [part.name for part in todo]
    path = Path(args.out) / f"{target}-{device.type}.json"
    env = environment(device, None if target == "losses" else target)
    on_disk = read_saved(path)  # read before this run rewrites the file
    expected = earlier_seconds(on_disk, env)
    saved = kept_parts(on_disk, path, target, command, env) if args.resume else None
    done: dict[str, list[dict[str, Any]]] = {}
    header = env
    sessions: list[dict[str, Any]] = []
    if saved is not None:
        order = saved.get("columns", [])
        done = {name: [_as_measured(row, order) for row in saved["rows"] if row.get(PART_KEY) == name]
                for name in saved["parts_done"] if name in names}
        header = {key: saved[key] for key in ("hardware", "software", "date")}
        sessions = saved.get("sessions", [])
        print(f"{target}: kept {len(done)} of {len(todo)} parts from {path}", flush=True)
    longest = 0.0
    failed: list[str] = []
    measured_here = False
    for part in todo:
        if part.name in done:
            continue
        # Its own earlier time where the file knows one, else the longest part so far.
        reason = stopping.stop_reason() or stopping.would_pass_deadline(expected.get(part.name, longest))
        if reason:
            print(f"{target}: stopped ({reason}) {_stopped_with(done, len(todo), path, reason)}", flush=True)
            return _in_order(done, names), False
        print(f"{target}: measuring {part.name}", flush=True)
        tic = time.perf_counter()
        measured = None
        try:
            measured = part.measure()
        except (UserError, ImportError):
            raise  # the target cannot run here: skipped whole
        except Exception:  # one broken part must not cost the other parts' GPU time
            traceback.print_exc()
            print(f"{target}: part {part.name} failed (traceback above); the other parts go on", flush=True)
            failed.append(part.name)
        seconds = time.perf_counter() - tic
        longest = max(longest, seconds)
        if measured is None:
            continue
        done[part.name] = [{**row, PART_KEY: part.name} for row in measured]
        # This call's first measured part starts its session: two calls in the same second have the same date.
        sessions = _add_session(sessions, env, part.name, seconds, starts=not measured_here)
        measured_here = True
        rows = _in_order(done, names)
        # The file's keys are written sorted, so the rows' column order is kept beside them for the page.
        columns = list(dict.fromkeys(key for row in map(figures, rows) for key in row))
        write_json_atomic(path, {"name": target, "device": str(device), "quick": target != "losses" and args.quick,
                                 "command": command, **header, "columns": columns, "rows": rows, "parts": names,
                                 "parts_done": [n for n in names if n in done], "complete": len(done) == len(todo),
                                 "sessions": sessions})
        print(f"wrote {path} ({len(done)} of {len(todo)} parts)", flush=True)
    rows = _in_order(done, names)
    print(format_table([figures(row) for row in rows]))
    if failed:
        raise PartsFailed(f"{target}: {len(failed)} of {len(todo)} parts failed ({', '.join(failed)}); the same "
                          "command with --resume measures them again")
    return rows, True


def _stopped_with(done: dict[str, list[dict[str, Any]]], parts: int, path: Path, reason: str) -> str:
    """What a stopped benchmark leaves: the parts in its file, or (none measured nor kept) that the file was not
    written, where "0 of N parts in <file>" would name a file that may not exist. The --resume hint follows."""
    if done:
        return f"with {len(done)} of {parts} parts in {path}"
    untouched = f"{path} is left as it was" if path.exists() else f"nothing was written to {path}"
    # The same limit would stop the resumed command at once again.
    longer = "; give a longer --time-limit" if reason.startswith("time limit") else ""
    return f"before measuring any of its {parts} parts: {untouched}{longer}"


def _as_measured(row: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    """A kept row with its keys back in the order the benchmark emitted them: the file writes keys sorted, and
    keeps that order in its ``columns``; the keys not among them (:data:`PART_KEY`) go last."""
    return {**{key: row[key] for key in columns if key in row}, **row}


def _in_order(done: dict[str, list[dict[str, Any]]], names: list[str]) -> list[dict[str, Any]]:
    return [row for name in names if name in done for row in done[name]]


def _add_session(sessions: list[dict[str, Any]], env: dict[str, Any], part: str, seconds: float,
                 starts: bool) -> list[dict[str, Any]]:
    """Which process measured which parts, and how long each took (what plans a GPU call): its date and commit
    (the code is the same: ``source_digest``). ``starts``: the part is the first this call measured, which opens
    the call's session (a later part of the call joins it)."""
    if starts:
        sessions = [*sessions, {"date": env["date"], "git_commit": env["software"]["git_commit"], "parts": [],
                                "seconds": {}}]
    last = sessions[-1]
    return [*sessions[:-1], {**last, "parts": [*last["parts"], part],
                             "seconds": {**last.get("seconds", {}), part: round(seconds, 1)}}]


def all_targets(names: str | None) -> list[str]:
    """The targets of ``all``: those named, or every one, the ones the issue's targets read first (the loss core,
    then the domains in the order of bench.md's targets), so that a time limit cuts the others."""
    read = [t.bench for t in TARGETS]
    known = sorted(["losses", *domains.available()], key=lambda n: (read.index(n) if n in read else len(read), n))
    if names is None:
        return known
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown or not chosen:
        hint = did_you_mean(unknown[0], known) if unknown else "."
        raise UserError(f"--targets: unknown target(s) {', '.join(unknown) or '(none given)'}{hint} "
                        f"Available: {', '.join(known)}")
    return list(dict.fromkeys(chosen))


def bench_all(args: argparse.Namespace, device: torch.device) -> int:
    """Every target in turn; a missing extra or dataset skips that target only (see the module docstring)."""
    written: list[str] = []
    skipped: dict[str, str] = {}
    failed: list[str] = []
    for target in all_targets(args.targets):
        print(f"== bench {target} on {device}", flush=True)
        try:
            rows, complete = bench_one(target, args, device)
        except (UserError, ImportError) as exc:
            skipped[target] = " ".join(str(exc).split())
            print(f"skipped {target}: {skipped[target]}", flush=True)
            continue
        except PartsFailed as exc:
            failed.append(target)
            print(f"failed {exc}", flush=True)
            continue
        except Exception:  # one broken benchmark must not cost the others' GPU time
            failed.append(target)
            traceback.print_exc()
            print(f"failed {target} (traceback above)", flush=True)
            continue
        if not complete:
            return _stopped(args)
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


def _stopped(args: argparse.Namespace) -> int:
    print(f"not finished; continue with: {resume_command(args.argv, args.data_root)}", flush=True)
    return stopping.EXIT_STOPPED


def check_target(target: str) -> None:
    """UserError naming the closest target when ``target`` is none: the loss benchmark, ``all`` or a domain (the
    domain registry alone would offer only the domains)."""
    known = ["losses", "all", *domains.available()]
    if target not in known:
        raise UserError(f"unknown target '{target}'{did_you_mean(target, known)} Available: {', '.join(known)}")


# The profiler's C++ side (Kineto; the loss benchmark counts kernels and memory with torch.profiler) logs every
# profiler start and stop ("USDT:") and, on a CPU-only machine with torch's CUDA build, an "ERROR:" that it found
# no GPU: neither is an error of the benchmark. Kineto reads its level from this variable once, when a profiler
# first starts; 6 is above its highest level (USDT is 5). TORCH_CPP_LOG_LEVEL does not reach these lines (torch
# 2.14.1).
KINETO_LEVEL = ("KINETO_LOG_LEVEL", "6")


@contextlib.contextmanager
def quiet_libraries(verbose: bool) -> Iterator[None]:
    """What ``harness run`` hides unless ``-v`` (:func:`harness.run.output.output_settings`: library warnings
    such as PyG's torch.jit.script FutureWarning, INFO logs), and Kineto's log lines; a Kineto level the user set
    stays. Undone afterwards, as ``main`` also runs inside other programs."""
    name, level = KINETO_LEVEL
    quiet = not verbose and name not in os.environ
    with output_settings(verbose):
        if quiet:
            os.environ[name] = level
        try:
            yield
        finally:
            if quiet:
                os.environ.pop(name, None)


def cmd_bench(args: argparse.Namespace) -> int:
    check_target(args.target)
    device = resolve_device(args.device)
    if args.targets is not None and args.target != "all":
        raise UserError("--targets only goes with 'harness bench all'")
    if args.dim is not None and args.dim < 1:
        raise UserError(f"--dim must be an embedding size of at least 1, got {args.dim}")
    if args.target not in ("losses", "all") and (args.batch_sizes or args.dim is not None):
        raise UserError(f"--batch-sizes and --dim are for 'losses' (or 'all'); the {args.target} benchmark sets "
                        "its own")
    if args.target == "losses" and args.quick:
        raise UserError("--quick is for a domain's benchmark (or 'all'); 'losses' measures the --batch-sizes given")
    with quiet_libraries(args.verbose), stopping.graceful(stopping.STOP_SIGNALS, time_limit(args)):
        if args.target == "all":
            return bench_all(args, device)
        try:
            return 0 if bench_one(args.target, args, device)[1] else _stopped(args)
        except PartsFailed as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
