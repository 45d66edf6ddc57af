"""The ``harness`` command line. Every sub-command lives in its own module; this file only parses.

User mistakes (``UserError``) print one line ``error: ...`` and exit 2; unexpected errors exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from domains.base import UserError
from harness.output import output_settings

RESULTS = "leaderboards/results"
OUT = "leaderboards"
PRIOR_RESULTS = "leaderboards/prior"  # the prior study's records, apart from the leaderboards' (harness prior)


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--domain", required=True, help="domain name (harness list domains)")
    p.add_argument("--loss", required=True, help="loss name accepted by the domain (harness list losses)")
    p.add_argument("--method", help="method (default: the domain's default)")
    p.add_argument("--dataset", help="dataset (default: the domain's embedded default)")
    p.add_argument("--seeds", help="comma-separated seeds or a range, e.g. 0,1,2 or 0-9 (default: the preset's)")
    p.add_argument("--preset", default="quick",
                   help="quick (about 5 minutes on a laptop CPU), paper, ... (harness list presets; default: quick)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, or a loss hyper-parameter as loss.NAME=VALUE (repeatable)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    p.add_argument("--data-root", help="data folder (default: $HARNESS_DATA_ROOT or ~/.cache/contrastive-harness/data)")
    p.add_argument("--results", default=RESULTS, help=f"records folder (default: {RESULTS})")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from its last checkpoint")
    p.add_argument("--force", action="store_true", help="run again even when a completed record exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_time_limit(p)
    _add_verbose(p)


def _add_time_limit(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-limit", metavar="DURATION",
                   help="e.g. 90m, 2h, 3600s: stop at a checkpoint before then (as on SIGTERM or SIGUSR1), exit 75 "
                        "and print the command that resumes")


def _add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show the run's log lines, library warnings and library log lines")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Contrastive losses across domains: runs, "
                                     "records, leaderboards, reports and regression tracking.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run_args(sub.add_parser("run", help="run (domain, method, dataset, loss, seeds) and write records"))

    p = sub.add_parser("list", help="list domains, datasets, losses or presets")
    p.add_argument("what", nargs="?", choices=["domains", "datasets", "losses", "presets"], help="(default: all)")

    p = sub.add_parser("sweep", help="run a grid of domains x datasets x losses x hyper-parameters x seeds")
    p.add_argument("--domains", required=True, help="comma-separated domains")
    p.add_argument("--datasets", help="comma-separated datasets (default: each domain's default)")
    p.add_argument("--methods", help="comma-separated methods (default: each domain's default)")
    p.add_argument("--losses", help="comma-separated losses (default: every loss the domain accepts)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a swept key (config field or loss.NAME; the latter only for losses that have it)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="a fixed override")
    p.add_argument("--seeds", help="comma-separated seeds (default: the preset's)")
    p.add_argument("--preset", default="quick")
    p.add_argument("--executor", default="local", choices=["local", "slurm", "ray"])
    p.add_argument("--workers", type=int, default=1, help="parallel jobs (local pool size / Slurm array width)")
    p.add_argument("--device", default="auto")
    p.add_argument("--data-root")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--force", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="print the jobs and exit")
    p.add_argument("--slurm-partition", help="Slurm partition")
    p.add_argument("--timeout-min", type=int, default=240, help="Slurm time limit per job, minutes")
    p.add_argument("--ray-address", help="a running Ray cluster, e.g. 10.0.0.1:6379 (default: start one here)")
    p.add_argument("--cpus-per-job", type=int,
                   help="CPUs (torch threads) a Ray or Slurm job asks for (default: this machine's over --workers)")
    p.add_argument("--resume", action="store_true", help="jobs go on from the checkpoints a stopped sweep left")
    _add_time_limit(p)
    _add_verbose(p)

    p = sub.add_parser("leaderboard", help="regenerate leaderboards/ from the records, bench.md from the benchmarks")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--out", default=OUT)
    p.add_argument("--bench", help="folder of `harness bench` JSON files for bench.md (default: OUT/bench)")

    p = sub.add_parser("report", help="cross-modality report: ranks, win rates, Friedman test, figures")
    p.add_argument("--results", default=RESULTS)
    p.add_argument("--out", default=OUT)

    p = sub.add_parser("prior", help="the class-prior page (prior.md): auto estimates against the label prior, gains")
    p.add_argument("--results", default=PRIOR_RESULTS, help=f"records of the prior study (default: {PRIOR_RESULTS})")
    p.add_argument("--out", default=OUT)

    p = sub.add_parser("compare", help="regression tracking between two result sets (exit 1 on a regression)")
    p.add_argument("--baseline", required=True, help="a results folder, or a version with --results")
    p.add_argument("--candidate", required=True, help="a results folder, or a version with --results")
    p.add_argument("--results", help="one folder holding both versions")
    p.add_argument("--tolerance", type=float, default=1.0, help="metric points a change must exceed (default 1)")
    p.add_argument("--test", default="welch", choices=["welch", "mannwhitney"])
    p.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    p.add_argument("--out", help="write the markdown report here too")

    p = sub.add_parser("bench", help="speed benchmarks: 'losses', a domain name, or 'all'")
    p.add_argument("target", help="losses, a domain, or all (exit 3 when a target was skipped, 1 when one failed)")
    p.add_argument("--targets", help="with 'all': comma-separated targets (default: losses and every domain)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-sizes", help="for 'losses' (default: 512,4096,16384 on cuda, 256,512,1024 on cpu)")
    p.add_argument("--dim", type=int, default=128, help="embedding size for 'losses'")
    p.add_argument("--quick", action="store_true", help="for a domain: a short benchmark")
    p.add_argument("--data-root")
    p.add_argument("--out", default=f"{OUT}/bench")
    return parser


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from harness.commands import cmd_run
        return cmd_run(args)
    if args.command == "list":
        from harness.listing import cmd_list
        return cmd_list(args.what)
    if args.command == "sweep":
        from harness.sweep import cmd_sweep
        return cmd_sweep(args)
    if args.command == "leaderboard":
        from harness.benchpage import cmd_bench_page
        from harness.leaderboard import cmd_leaderboard
        code = cmd_leaderboard(args.results, args.out)
        return code or cmd_bench_page(args.bench or f"{args.out}/bench", args.out)
    if args.command == "report":
        from harness.report import cmd_report
        return cmd_report(args.results, args.out)
    if args.command == "prior":
        from harness.priorpage import cmd_prior
        return cmd_prior(args.results, args.out)
    if args.command == "compare":
        from harness.compare import cmd_compare
        return cmd_compare(args)
    from harness.bench import cmd_bench
    return cmd_bench(args)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for the --resume hint after an interruption
    settings = output_settings(args.verbose) if args.command in ("run", "sweep") else contextlib.nullcontext()
    try:
        with settings:
            return _dispatch(args)
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
