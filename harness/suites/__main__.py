"""``python -m harness.suites`` (``tools/regression-suite``): run a suite, then gate it with ``harness compare``.

Each setting of the suite runs as one ``harness run`` per seed, on the CPU with one thread, ``--jobs`` at a time,
in the suite file's order, into a results folder (a fresh temporary one unless ``--results``). Then
``harness compare --baseline <baseline> --candidate <results>@<source digest> --out <report>``, with each setting's
tolerance (``--tolerance domain/dataset=VALUE``), decides. The candidate is the records of the code the suite ran
(its source digest, :func:`harness.version.source_digest`), never another code's that a reused ``--results`` holds:
compare would take a folder's newest code, which need not be this one.

Exit status: compare's (0 every baseline group held, 1 a regression or a baseline group missing or failed, 2 cannot
decide), with three exceptions. Whatever the comparison says (its report is still written), a run that crashed
gives 1, and a run refused as bad input (a missing extra or data set) or not finished (busy in another process)
gives 2. A pass becomes 2 when a setting of the suite has no completed record in the baseline: compare lists it as
added, so nothing judged it. And a bad suite or argument gives 2 before any run starts (so does a baseline with no
completed record, or ``--results`` that is the baseline folder).

``--update-baseline`` runs the suite into a new folder beside the baseline (``.<name>-new-XXXXXX``, on the same
file system) instead (no comparison), and only when every run completed swaps it in: the new records and logs
move into the baseline folder and the old ones go. For a change that moves the numbers on purpose; commit the new
records. A run that failed or diverged (a non-finite metric), or a stop (Ctrl-C, SIGTERM), leaves the old
baseline as it was and the new runs in their folder, which it names. It refuses to start when the baseline folder
holds anything but run records, their logs and the runs' scratch (hidden files, tracking folders), or when a
record it would remove is of a domain and preset that no setting of the suite has: a wrong ``--baseline`` (such as
leaderboards/results, records and logs only) loses nothing. With ``--domain D`` it runs only D's settings and
replaces only D's records (those whose ``domain`` is D, and their logs): the other domains' baseline stays as it
is, so a change to one domain's ``regression`` preset reruns that domain alone.

Ctrl-C or SIGTERM stops the suite: no further run starts, the running ones are stopped, and one line says what
was stopped and how to go on; exit 130 (SIGINT) or 75 (SIGTERM). The process ends as a ``harness`` command's does
(:func:`harness.ending.own_command`).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from domains.errors import UserError
from harness.compare.sides import RUN_FOLDERS, refuse_report_among_records
from harness.ending import own_command
from harness.groups import command_key, group_name, group_records
from harness.records import load_record_files
from harness.run.stopping import EXIT_STOPPED, handled
from harness.suites import Setting, load_suite, suite_path
from harness.suites.pool import Interrupted, run_all, thread_env
from harness.version import source_digest

BASELINE = "leaderboards/regression"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/regression-suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", default="regression",
                   help="a suite under harness/suites/ or a suite file (default: regression)")
    p.add_argument("--baseline", default=BASELINE, help=f"the baseline records (default: {BASELINE})")
    p.add_argument("--results", help="records folder of this run (default: a fresh temporary folder)")
    p.add_argument("--report", help="compare's markdown report (default: <results>/regression-report.md)")
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default: 2)")
    p.add_argument("--update-baseline", action="store_true",
                   help="run the suite into a new folder beside the baseline and, when every run completed, replace "
                   "the baseline's records with its records (no comparison)")
    p.add_argument("--domain", help="with --update-baseline: run only this domain's settings and replace only its "
                   "baseline records (the other domains' stay)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    return p


def harness_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "harness", *args]


def run_commands(settings: list[Setting], results: Path) -> list[tuple[str, list[str]]]:
    """One ``harness run`` per setting and seed, in the suite's order, each with a label for the progress lines."""
    return [(s.label(seed), harness_command("run", *s.run_args(seed), "--device", "cpu", "--results", str(results),
                                            "--quiet"))
            for s in settings for seed in s.seeds]


def tolerance_args(settings: list[Setting]) -> list[str]:
    """``--tolerance domain/dataset=VALUE`` for each setting of the suite; UserError when two settings of one
    domain/dataset give different tolerances (compare tells groups apart by those two)."""
    chosen: dict[str, Setting] = {}
    for s in settings:
        key = f"{s.domain}/{s.dataset}"
        if key in chosen and chosen[key].tolerance != s.tolerance:
            raise UserError(f"the suite's lines {chosen[key].line} and {s.line} give {key} two tolerances "
                            f"({chosen[key].tolerance:g} and {s.tolerance:g}); give its settings one")
        chosen.setdefault(key, s)
    return [arg for key, s in chosen.items() for arg in ("--tolerance", f"{key}={s.tolerance:g}")]


def baseline_files(baseline: Path, suite: list[Setting], domain: str | None = None) -> list[Path]:
    """The files an update replaces: the baseline's records (of one ``domain``) and their logs. UserError naming
    what the folder holds beyond run records, their logs and the runs' scratch (hidden files, the folders of
    :data:`RUN_FOLDERS`): an unreadable record, or a file the update would not own (a wrong ``--baseline``, someone's
    notes); and, among the records it would remove, one of a domain and preset no setting of the ``suite`` has: a
    folder of other runs, such as leaderboards/results, holds nothing but records and logs (a changed line of the
    suite keeps its preset, so its old records are still the suite's and go)."""
    if not baseline.exists():
        return []
    try:
        records = load_record_files(baseline, completed_only=False)
    except UserError as exc:
        raise UserError(f"--update-baseline: {exc}") from None
    logs = {path.with_suffix(".log") for path, _ in records}
    foreign = [path.name for path in sorted(baseline.iterdir()) if not path.name.startswith(".")
               and path.suffix != ".json" and path not in logs
               and not (path.is_dir() and path.name in RUN_FOLDERS)]
    if foreign:
        raise UserError(f"--update-baseline: {baseline} holds {len(foreign)} files that are not run records or their "
                        f"logs: {', '.join(foreign)}; the update replaces a folder of records only, so move them out "
                        "(or give --baseline the records folder); nothing was changed")
    removed = [(path, record) for path, record in records if domain is None or record.domain == domain]
    ours = {(s.domain, s.preset) for s in suite}
    others = [path.name for path, record in removed if (record.domain, record.preset) not in ours]
    if others:
        raise UserError(f"--update-baseline: {baseline} holds {len(others)} records of no domain and preset of the "
                        f"suite (e.g. {', '.join(others[:3])}), which the update would remove: it is no baseline of "
                        "this suite; give --baseline the suite's own folder (if they are the suite's own, from a line "
                        "since removed or given another preset, remove them first); nothing was changed")
    paths = [path for path, _ in removed]
    return sorted([*paths, *(log for path in paths if (log := path.with_suffix(".log")).is_file())])


def check_gate_baseline(baseline: Path, results: Path | None) -> None:
    """UserError, before any run, when the gate could not compare: the baseline is no folder of completed records
    (compare would refuse it only after the whole suite ran), or ``results`` is the baseline folder itself (the
    runs would be written among the baseline's records, and compare then refuses a side compared with itself)."""
    if not baseline.is_dir():
        raise UserError(f"--baseline {baseline} is not a folder of run records; nothing to compare with (make one "
                        "with --update-baseline)")
    if not load_record_files(baseline):
        raise UserError(f"--baseline {baseline} holds no completed run record; nothing to compare with (make one "
                        "with --update-baseline)")
    if results is not None and results.resolve() == baseline.resolve():
        raise UserError(f"--results {results} is the baseline folder: the runs would be written among the baseline's "
                        "records; give --results another folder (or none: a fresh temporary one)")


def new_baseline_folder(baseline: Path, dry_run: bool = False) -> Path:
    """A fresh folder beside ``baseline`` for the new one, on the same file system so that the swap is renames; a
    dry run names it and makes none."""
    baseline = baseline.resolve()
    if dry_run:
        return baseline.parent / f".{baseline.name}-new-XXXXXX"
    baseline.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{baseline.name}-new-", dir=baseline.parent))


def swap_baseline(baseline: Path, new: Path, old: list[Path]) -> int:
    """Move ``new``'s records and logs into ``baseline``, then remove the ``old`` files (:func:`baseline_files`)
    that none of them replaced, then ``new`` with the runs' scratch; returns how many moved. New first: a swap cut
    short leaves both baselines, never neither; and Ctrl-C and SIGTERM are ignored meanwhile (renames: a moment)."""
    with handled(signal.SIG_IGN, signal.SIGINT, signal.SIGTERM):
        baseline.mkdir(parents=True, exist_ok=True)
        moved = [path for pattern in ("*.json", "*.log") for path in sorted(new.glob(pattern))
                 if not path.name.startswith(".")]
        for path in moved:
            os.replace(path, baseline / path.name)
        replaced = {path.name for path in moved}
        for path in old:
            if path.name not in replaced:
                path.unlink(missing_ok=True)
        shutil.rmtree(new)
    return len(moved)


def only_domain(settings: list[Setting], domain: str) -> list[Setting]:
    """The settings of ``domain``; UserError when the suite has none."""
    chosen = [s for s in settings if s.domain == domain]
    if not chosen:
        known = ", ".join(dict.fromkeys(s.domain for s in settings))
        raise UserError(f"--domain {domain}: the suite has no setting of that domain (its domains: {known})")
    return chosen


def update_baseline(commands: list[tuple[str, list[str]]], jobs: int, baseline: Path, new: Path, old: list[Path],
                    domain: str | None) -> int:
    """Run ``commands`` into ``new`` and, when every run completed, swap it in (:func:`swap_baseline`); else leave
    the baseline as it was. Exit status: 0, 1 (a run failed) or 2 (a run refused as bad input)."""
    try:
        codes = run_all(commands, jobs)
    except Interrupted as stop:
        print(f"regression suite {stop}; the baseline {baseline} is unchanged, the runs done so far are in {new} "
              "(remove it); run the same command again to start over", file=sys.stderr)
        return stop.code
    done = f"baseline: {sum(c == 0 for c in codes)} of {len(codes)} runs completed"
    if any(codes):
        print(f"{done}: the baseline {baseline} is unchanged; the new runs are in {new} (remove it when done)",
              file=sys.stderr)
        return 2 if 2 in codes else 1
    # A seed that diverged completes (exit 0) but is no baseline: the gate would fail on it after every change.
    diverged = [record.run_id for _, record in load_record_files(new)
                if record.metrics.get(record.primary_metric) is None]
    if diverged:
        print(f"{done}, but {len(diverged)} diverged (a non-finite metric: {', '.join(diverged)}): the baseline "
              f"{baseline} is unchanged; the new runs are in {new} (remove it when done)", file=sys.stderr)
        return 1
    moved = swap_baseline(baseline, new, old)
    what = f"of domain {domain} " if domain else ""
    print(f"{done}; removed {len(old)} old baseline files {what}(records and logs) from {baseline} and moved the "
          f"{moved} new ones in (git checkout restores the committed ones)")
    return 0


def suite_code(settings: list[Setting]) -> str:
    """The source digest the suite's runs record (:func:`harness.version.source_digest`: the packages', with the
    plugins that provide a setting's domain or loss): compare gates that code's records. UserError where the
    settings run different code (other plugins), which one candidate cannot name."""
    codes: dict[str, list[str]] = {}
    for s in settings:
        codes.setdefault(source_digest(s.domain, s.loss, s.dataset), []).append(f"{s.domain} {s.loss} (line {s.line})")
    if len(codes) > 1:
        raise UserError("the suite's settings run different code (plugins that provide some of their domains or "
                        "losses), which one gate cannot name: "
                        + "; ".join(f"{', '.join(names)}: source digest {code[:12]}" for code, names in codes.items())
                        + "; split the suite by plugin")
    return next(iter(codes))


def unjudged(baseline: Path, results: Path, digest: str) -> list[str]:
    """The settings the suite ran into ``results`` (the records of the code of source digest ``digest``) that the
    baseline holds no completed record of, named as compare's report names them: compare lists them as added and
    passes, so a setting added to the suite without its baseline would never be gated. Groups on compare's match
    key (:func:`command_key`), diverged ones too."""
    judged = {command_key(record) for _, record in load_record_files(baseline)}
    ran = group_records((record for _, record in load_record_files(results)
                         if record.software.get("source_digest") == digest), key=command_key, keep_empty=True)
    return sorted(group_name(g) for g in ran if command_key(g.records[-1]) not in judged)


def gate(commands: list[tuple[str, list[str]]], jobs: int, results: Path, compare: list[str], report: Path,
         baseline: Path, digest: str) -> int:
    """Run ``commands`` into ``results``, then compare; the exit status of the module's docstring."""
    try:
        codes = run_all(commands, jobs)
    except Interrupted as stop:
        print(f"regression suite {stop}; the runs done so far are in {results}: run it again with --results "
              f"{results} to go on (their completed records are reused)", file=sys.stderr)
        return stop.code
    print(shlex.join(compare), flush=True)
    code = subprocess.run(compare).returncode
    print(f"report: {report}")
    if 2 in codes:
        print("a run was refused as bad input (above): the suite could not run as written", file=sys.stderr)
        return 2
    if EXIT_STOPPED in codes:  # a seed that another process is running (or that stopped): not done, not failed
        print("a run is not finished (above: busy in another process, or stopped): the gate cannot decide; run the "
              f"suite again with --results {results} once it is done (completed records are reused)", file=sys.stderr)
        return 2
    if any(codes):
        print("a run failed (above): the gate does not pass", file=sys.stderr)
        return 1
    missing = unjudged(baseline, results, digest)
    if missing:
        print(f"error: {len(missing)} setting(s) of the suite have no completed baseline record, so the gate "
              f"judged nothing of them: {'; '.join(missing)}. Record their baseline with --update-baseline "
              "(--domain D for one domain) and commit it", file=sys.stderr)
        return code or 2
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _suite(args)
    except UserError as exc:  # bad input before any run, or a folder the runs' records cannot be read back from
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


def _suite(args: argparse.Namespace) -> int:
    """The suite (or its update) as ``args`` ask; the exit status of the module's docstring."""
    if args.jobs < 1:
        raise UserError("--jobs must be at least 1")
    if args.update_baseline and (args.results or args.report):
        raise UserError("--update-baseline writes into --baseline; it takes no --results or --report")
    if args.domain is not None and not args.update_baseline:
        raise UserError("--domain applies to --update-baseline only (the gate compares every domain's baseline)")
    suite = load_suite(suite_path(args.suite))
    tolerances = tolerance_args(suite)
    settings = suite if args.domain is None else only_domain(suite, args.domain)
    baseline = Path(args.baseline)
    old = baseline_files(baseline, suite, args.domain) if args.update_baseline and not args.dry_run else []
    if not args.update_baseline:
        check_gate_baseline(baseline, Path(args.results) if args.results else None)
        if args.report:  # compare would refuse it too, but only after the whole suite ran
            folders = [baseline, *([Path(args.results)] if args.results else [])]
            refuse_report_among_records("--report", args.report, [(str(f), f) for f in folders])
    digest = suite_code(settings)  # the code the runs run, which their records name
    # A dry run names the folder it would make, and makes none.
    if args.update_baseline:
        results = new_baseline_folder(baseline, args.dry_run)
    elif args.results:
        results = Path(args.results)
    else:
        results = Path(tempfile.gettempdir(), "regression-XXXXXX") if args.dry_run else Path(
            tempfile.mkdtemp(prefix="regression-"))
    report = Path(args.report) if args.report else results / "regression-report.md"
    commands = run_commands(settings, results)
    compare = harness_command("compare", "--baseline", str(baseline), "--candidate", f"{results}@{digest}",
                              "--out", str(report), *tolerances)
    if args.dry_run:  # each run as the pool starts it: its thread settings lead, so that a copied line runs alike
        threads = " ".join(f"{name}={value}" for name, value in thread_env(1).items())
        for _, command in commands:
            print(f"{threads} {shlex.join(command)}")
        if not args.update_baseline:
            print(shlex.join(compare))
        return 0
    if args.update_baseline:
        return update_baseline(commands, args.jobs, baseline, results, old, args.domain)
    return gate(commands, args.jobs, results, compare, report, baseline, digest)


if __name__ == "__main__":
    sys.exit(own_command(main))
