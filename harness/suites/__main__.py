"""``python -m harness.suites`` (``tools/regression-suite``): run a suite, then gate it with ``harness compare``.

Each setting of the suite runs as one ``harness run`` per seed, on the CPU with one thread, ``--jobs`` at a time,
in the suite file's order, into a results folder (a fresh temporary one unless ``--results``). Then
``harness compare --baseline <baseline> --candidate <results> --out <report>``, with each setting's tolerance
(``--tolerance domain/dataset=VALUE``), decides. Exit status: compare's
(0 every baseline group held, 1 a regression or a baseline group missing or failed, 2 cannot decide), except
that a run that crashed gives 1 and a run refused as bad input (a missing extra or data set) gives 2, whatever
the comparison says (its report is still written); a bad suite or argument gives 2 before any run starts.

``--update-baseline`` removes the baseline's records and runs the suite into the baseline folder instead (no
comparison): for a change that moves the numbers on purpose; commit the new records. With ``--domain D`` it runs
only D's settings and removes only D's records (those whose ``domain`` is D, and their logs): the other domains'
baseline stays as it is, so a change to one domain's ``regression`` preset reruns that domain alone.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from domains.base import UserError
from harness.records import load_record_files
from harness.suites import Setting, load_suite, suite_path
from harness.suites.pool import run_all

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
                   help="remove the baseline's records and run the suite into the baseline folder (no comparison)")
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


def baseline_files(baseline: Path, domain: str | None = None) -> list[Path]:
    """The baseline's records and logs; of one ``domain``: its records (read, so that an unreadable one is a
    UserError rather than a guess) and their logs."""
    if domain is None:
        return sorted([*baseline.glob("*.json"), *baseline.glob("*.log")])
    if not baseline.is_dir():
        return []
    records = [path for path, record in load_record_files(baseline, completed_only=False) if record.domain == domain]
    return sorted([*records, *(log for path in records if (log := path.with_suffix(".log")).is_file())])


def clear_baseline(baseline: Path, old: list[Path], domain: str | None = None) -> None:
    """Remove ``old`` (:func:`baseline_files`), saying how many (git restores committed ones)."""
    for path in old:
        path.unlink()
    what = f"of domain {domain} " if domain else ""
    print(f"removed {len(old)} old baseline files {what}(records and logs) from {baseline}; the suite now writes the "
          "new baseline there (git checkout restores the committed one)", flush=True)


def only_domain(settings: list[Setting], domain: str) -> list[Setting]:
    """The settings of ``domain``; UserError when the suite has none."""
    chosen = [s for s in settings if s.domain == domain]
    if not chosen:
        known = ", ".join(dict.fromkeys(s.domain for s in settings))
        raise UserError(f"--domain {domain}: the suite has no setting of that domain (its domains: {known})")
    return chosen


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.jobs < 1:
            raise UserError("--jobs must be at least 1")
        if args.update_baseline and (args.results or args.report):
            raise UserError("--update-baseline writes into --baseline; it takes no --results or --report")
        if args.domain is not None and not args.update_baseline:
            raise UserError("--domain applies to --update-baseline only (the gate compares every domain's baseline)")
        settings = load_suite(suite_path(args.suite))
        tolerances = tolerance_args(settings)
        if args.domain is not None:
            settings = only_domain(settings, args.domain)
        baseline = Path(args.baseline)
        old = baseline_files(baseline, args.domain) if args.update_baseline and not args.dry_run else []
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    if args.update_baseline or args.results:
        results = baseline if args.update_baseline else Path(args.results)
    else:  # a dry run names the folder it would make, and makes none
        results = Path(tempfile.gettempdir(), "regression-XXXXXX") if args.dry_run else Path(
            tempfile.mkdtemp(prefix="regression-"))
    report = Path(args.report) if args.report else results / "regression-report.md"
    commands = run_commands(settings, results)
    compare = harness_command("compare", "--baseline", str(baseline), "--candidate", str(results),
                              "--out", str(report), *tolerances)
    if args.dry_run:
        for command in [c for _, c in commands] + ([] if args.update_baseline else [compare]):
            print(shlex.join(command))
        return 0
    if args.update_baseline:
        clear_baseline(baseline, old, args.domain)
    codes = run_all(commands, args.jobs)
    if args.update_baseline:
        print(f"baseline: {sum(c == 0 for c in codes)} of {len(codes)} runs completed into {baseline}")
        return 2 if 2 in codes else int(any(codes))
    print(shlex.join(compare), flush=True)
    code = subprocess.run(compare).returncode
    print(f"report: {report}")
    if 2 in codes:
        print("a run was refused as bad input (above): the suite could not run as written", file=sys.stderr)
        return 2
    if any(codes):
        print("a run failed (above): the gate does not pass", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
