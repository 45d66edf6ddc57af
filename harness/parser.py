"""The ``harness`` command line's shape: each command's options (:func:`build_parser`), the parser that raises
:class:`CommandLineRefused` where argparse would exit, and what ``--out`` may be (:func:`check_out`). It imports no
command: ``harness.command`` parses with it and then imports the one command it runs, and a compare command line that
argparse refused is read again by compare's own options (:mod:`harness.compare.refused`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from domains.errors import UserError
from harness.run import tracking

RESULTS = "leaderboards/results"
OUT = "leaderboards"
PRIOR_RESULTS = "leaderboards/prior"  # the prior study's records, apart from the leaderboards' (harness prior)
DEVICE_HELP = "auto (cuda when available, else cpu), cpu, cuda, cuda:N or mps where available (default: auto)"
DATA_ROOT_HELP = "data folder (default: $HARNESS_DATA_ROOT or ~/.cache/contrastive-harness/data)"


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--domain", required=True, help="domain name (harness list domains)")
    p.add_argument("--loss", help="loss name accepted by the domain (harness list losses); required, except by a "
                                  "method that trains nothing (text's bow and hf), which takes only its baseline "
                                  "loss, the one its record names (default)")
    p.add_argument("--method", help="method (default: the domain's default)")
    p.add_argument("--dataset", help="dataset (default: the domain's embedded default)")
    p.add_argument("--seeds", help="comma-separated seeds or a range, e.g. 0,1,2 or 0-9 (default: the preset's)")
    p.add_argument("--preset", default="quick",
                   help="quick (about 5 minutes on a laptop CPU), paper, ... (harness list presets; default: quick)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (harness list options), or a loss hyper-parameter as "
                        "loss.NAME=VALUE (harness list losses) (repeatable)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data-root", help=DATA_ROOT_HELP)
    p.add_argument("--results", default=RESULTS, help=f"folder the records are written to (default: {RESULTS})")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run from its last checkpoint")
    p.add_argument("--force", action="store_true",
                   help="run again even when a completed record exists; with --resume, go on with an interrupted "
                        "--force: redo only the seeds it had not redone yet")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars; the results, warnings and the tracking line (where the live logs are) "
                        "still show")
    _add_save_model(p, "seed")
    _add_tracker(p)
    _add_time_limit(p, "at its next checkpoint")
    _add_verbose(p)


def _add_save_model(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--save-model", action="store_true",
                   help=f"keep each {what}'s trained networks in RESULTS/models/RUN_ID.pt, written once it completes "
                        "(not its identity: the run id and record are the same; a run skipped as done saves none; "
                        "default: not kept)")


def _add_tracker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tracker", dest="trackers", action="append", choices=[*tracking.TRACKERS, tracking.NONE],
                   help="log each run live, beside the records: tensorboard (default; RESULTS/tb/RUN_ID), wandb "
                        "(offline, RESULTS/wandb), mlflow (file:RESULTS/mlruns) or none (repeatable)")


def _add_time_limit(p: argparse.ArgumentParser, where: str) -> None:
    p.add_argument("--time-limit", metavar="DURATION",
                   help=f"e.g. 90m, 2h, 3600s: stop before then, {where}, as on SIGTERM or SIGUSR1; exit 75 and "
                        "print the command that resumes (default: no limit)")


def _add_verbose(p: argparse.ArgumentParser) -> None:
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show the run's log lines, library warnings and library log lines")


def add_compare_args(p: argparse.ArgumentParser) -> None:
    """compare's options, for its parser and for the reading of a compare command line argparse refused
    (:func:`harness.compare.refused.as_given`). Here, not in ``harness.compare``: every command builds the whole
    parser, and importing that package (the gate, scipy) would load it into every run."""
    side = ("a results folder, FOLDER@NAME, or with --results a NAME: a version, a commit (or its first digits), "
            "a tag or a branch")
    p.add_argument("--baseline", required=True, help=side)
    p.add_argument("--candidate", required=True, help=side)
    p.add_argument("--results", help="the folder that holds the records of both names (default: none; each side is "
                   "then a folder or FOLDER@NAME)")
    p.add_argument("--tolerance", action="append", metavar="[DOMAIN[/DATASET]=]VALUE",
                   help="metric units a change must exceed to count (default: 1); repeat with DOMAIN=VALUE or "
                   "DOMAIN/DATASET=VALUE for groups whose metric or spread differs (e.g. --tolerance rl=25)")
    p.add_argument("--test", default="auto", choices=["auto", "paired-t", "wilcoxon", "welch", "mannwhitney"],
                   help="auto (default): paired t-test on the seeds both sides have (>= 2) when the candidate has no "
                   "other, else Welch's t-test")
    p.add_argument("--correction", default="holm", choices=["holm", "bh", "none"],
                   help="correction for the number of groups: holm (default), bh (Benjamini-Hochberg) or none")
    p.add_argument("--alpha", type=float, default=0.05, help="significance level, after the correction (default: 0.05)")
    p.add_argument("--allow-missing", action="store_true",
                   help="pass although baseline groups are absent or short of seeds there (never a seed the candidate "
                   "ran and failed or diverged on; an unconfirmed drop on the seeds they have still needs "
                   "--allow-untestable)")
    p.add_argument("--allow-untestable", action="store_true",
                   help="pass although a drop beyond the tolerance was not confirmed by the test (too few seeds "
                   "or too much spread)")
    p.add_argument("--out", help="also write the markdown report to this file (default: none; it is always printed)")


class CommandLineRefused(Exception):
    """argparse's refusal of a command line (a bad value, a missing or unknown option), raised where argparse would
    print it and exit 2, so that :func:`main` can first give compare's ``--out`` a report of it."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser, self.message = parser, message


class Parser(argparse.ArgumentParser):
    """The parser of ``harness`` and of each command (``add_subparsers`` makes them of the same class)."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineRefused(self, message)


def build_parser() -> argparse.ArgumentParser:
    """The ``harness`` parser; a command line it refuses raises :class:`CommandLineRefused` (:func:`main` exits 2
    on it)."""
    parser = Parser(prog="harness", description="Contrastive losses across domains: runs, records, leaderboards, "
                     "reports and regression tracking.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_run_args(sub.add_parser("run", help="run (domain, method, dataset, loss, seeds) and write records"))

    p = sub.add_parser("list", help="list domains, datasets, losses, presets, options (the --set keys) or code (the "
                       "source digest runs of this code record, which compare's FOLDER@NAME takes)")
    p.add_argument("what", nargs="?", choices=["domains", "datasets", "losses", "presets", "options", "code"],
                   help="what to list (default: all six)")

    p = sub.add_parser("sweep", help="run a grid of domains x datasets x losses x hyper-parameters x seeds")
    p.add_argument("--domains", required=True, help="comma-separated domains (harness list domains)")
    p.add_argument("--datasets", help="comma-separated datasets (default: each domain's default)")
    p.add_argument("--methods", help="comma-separated methods (default: each domain's default)")
    p.add_argument("--losses", help="comma-separated losses (default: every loss each method trains); a method "
                   "that trains nothing runs once, under its baseline loss alone")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="a swept key and its values, e.g. loss.alpha=0.1,0.5: a config field, or loss.NAME for "
                        "the losses that have it (repeatable)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a value every job takes: a config field, or loss.NAME for the losses that have it "
                        "(repeatable)")
    p.add_argument("--seeds", help="comma-separated seeds or a range, e.g. 0,1,2 or 0-9 (default: the preset's)")
    p.add_argument("--preset", default="quick", help="the preset of every job (harness list presets; default: quick)")
    p.add_argument("--executor", default="local", choices=["local", "slurm", "ray"],
                   help="local: a pool of --workers processes; slurm: a job array through submitit (local when no "
                   "Slurm cluster is found); ray: ray tasks (default: local)")
    p.add_argument("--workers", type=int, default=1,
                   help="parallel jobs (local pool size, Slurm array width, Ray tasks at once; default: 1)")
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--data-root", help=DATA_ROOT_HELP)
    p.add_argument("--results", default=RESULTS, help=f"folder the records are written to (default: {RESULTS})")
    p.add_argument("--force", action="store_true",
                   help="run every job again, even those with a completed record; with --resume, go on with an "
                        "interrupted --force sweep: redo only the jobs it had not redone yet")
    p.add_argument("--dry-run", action="store_true", help="print the jobs and exit")
    p.add_argument("--slurm-partition", help="Slurm partition (default: the cluster's default partition)")
    p.add_argument("--timeout-min", type=int, default=240, help="Slurm time limit per job, minutes (default: 240)")
    p.add_argument("--slurm-lost-after", type=float, default=60, metavar="SECONDS",
                   help="where sacct cannot say how a job ended (no Slurm accounting), fail a job once it has been "
                        "gone from squeue this long without a result; raise it where the shared file system shows "
                        "result files later (default: 60)")
    p.add_argument("--ray-address",
                   help="a running Ray cluster, e.g. 10.0.0.1:6379 (default: $RAY_ADDRESS where set, else a new "
                        "one started here)")
    p.add_argument("--cpus-per-job", type=int,
                   help="CPUs (torch threads) a Ray or Slurm job asks for (default: OMP_NUM_THREADS where set, else "
                        "this machine's CPUs over --workers)")
    p.add_argument("--resume", action="store_true", help="jobs go on from the checkpoints a stopped sweep left")
    _add_save_model(p, "job")
    _add_time_limit(p, "each running job at its next checkpoint")
    _add_tracker(p)
    _add_verbose(p)

    p = sub.add_parser("leaderboard", help="regenerate leaderboards/ from the records, bench.md from the benchmarks")
    p.add_argument("--results", default=RESULTS, help=f"folder of records to read (default: {RESULTS})")
    p.add_argument("--out", default=OUT, help=f"folder the pages are written to: README.md, one page per domain, "
                   f"bench.md (default: {OUT})")
    p.add_argument("--bench", help="folder of `harness bench` JSON files for bench.md (default: OUT/bench)")

    p = sub.add_parser("report", help="cross-modality report: ranks, win rates, Friedman test, figures")
    p.add_argument("--results", default=RESULTS, help=f"folder of records to read (default: {RESULTS})")
    p.add_argument("--out", default=OUT, help=f"folder report.md and its figures are written to (default: {OUT})")

    p = sub.add_parser("prior", help="the class-prior page (prior.md): auto estimates against the label prior, gains")
    p.add_argument("--results", default=PRIOR_RESULTS, help=f"records of the prior study (default: {PRIOR_RESULTS})")
    p.add_argument("--out", default=OUT, help=f"folder prior.md and its figure are written to (default: {OUT})")

    p = sub.add_parser("history", help="history.md and history.png: each setting's metric over the code versions "
                       "that ran it, step changes marked")
    p.add_argument("--results", default=RESULTS, help=f"records folder (default: {RESULTS})")
    p.add_argument("--out", default=OUT, help=f"folder for history.md and history.png (default: {OUT})")

    p = sub.add_parser("compare", help="regression gate between two result sets: exit 0 held, 1 regression or "
                       "missing, 2 cannot decide (a drop too few seeds can test, or a baseline that failed "
                       "on every seed: unjudged)")
    add_compare_args(p)

    p = sub.add_parser("bench", help="speed benchmarks: 'losses', a domain name, or 'all'")
    p.add_argument("target", help="losses, a domain, or all (exit 3 when a target was skipped, 1 when one failed)")
    p.add_argument("--targets", help="with 'all': comma-separated targets (default: losses and every domain)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto (default: cpu)")
    p.add_argument("--batch-sizes", help="for 'losses' (default: 512,4096,16384 on cuda, 256,512,1024 on cpu)")
    p.add_argument("--dim", type=int, help="embedding size for 'losses' (default: 128)")
    p.add_argument("--quick", action="store_true", help="for a domain: a short benchmark")
    p.add_argument("--data-root", help=DATA_ROOT_HELP)
    p.add_argument("--out", default=f"{OUT}/bench", help=f"folder the <target>-<device>.json rows are written to, "
                   f"after each part (default: {OUT}/bench)")
    p.add_argument("--resume", action="store_true",
                   help="keep the parts the files at --out hold when this code measured them on this kind of machine "
                        "with these options; measure the rest")
    _add_time_limit(p, "between two parts of a benchmark")
    _add_verbose(p)
    return parser


# What each command writes at --out: a folder of pages or benchmarks, or compare's one report file.
OUT_FOLDERS = ("leaderboard", "report", "prior", "history", "bench")


def check_out(command: str, out: str | None) -> None:
    """UserError, before any work, when ``--out`` cannot be what ``command`` writes there: a folder (an existing
    file is in the way) or compare's report file (an existing folder is), or a path under a file."""
    if not out:
        return
    path = Path(out)
    folder = command in OUT_FOLDERS
    if path.exists() and path.is_dir() != folder:
        what = "a folder, where it writes its pages" if folder else "a file, the markdown report"
        raise UserError(f"--out '{out}' is {'a file' if folder else 'a folder'}; {command} needs {what}")
    above = next(p for p in path.absolute().parents if p.exists())
    if not above.is_dir():
        raise UserError(f"--out '{out}' lies under the file '{above}'")
