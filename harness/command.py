"""One ``harness`` command line, in this process: parse it (:mod:`harness.parser`), then run the one command it names,
whose module is imported only then. :mod:`harness.cli` is its entry.

User mistakes (``UserError``) print one line ``error: ...`` and exit 2; unexpected errors exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from domains.errors import UserError
from harness.ending import interrupted
from harness.parser import CommandLineRefused, build_parser, check_out
from harness.run.output import output_settings


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        from harness.run import cmd_run
        return cmd_run(args)
    if args.command == "list":
        from harness.listing import cmd_list
        return cmd_list(args.what)
    if args.command == "sweep":
        from harness.sweep import cmd_sweep
        return cmd_sweep(args)
    if args.command == "leaderboard":
        from harness.pages.leaderboard import cmd_leaderboard
        # One command writes the pages and bench.md, so a broken bench file fails before any page is written.
        return cmd_leaderboard(args.results, args.out, args.bench)
    if args.command == "report":
        from harness.pages.report import cmd_report
        return cmd_report(args.results, args.out)
    if args.command == "prior":
        from harness.pages.prior import cmd_prior
        return cmd_prior(args.results, args.out)
    if args.command == "history":
        from harness.pages.history import cmd_history
        return cmd_history(args.results, args.out)
    if args.command == "compare":
        from harness.compare import cmd_compare
        return cmd_compare(args)
    from harness.bench import cmd_bench
    return cmd_bench(args)


def command(words: list[str]) -> int:
    """The ``harness`` command line ``words`` (``sys.argv[1:]``); its exit status."""
    try:
        args = build_parser().parse_args(words)
    except CommandLineRefused as refused:
        message = refused.message
        # The top-level parser has no option but -h: a compare command line starts with its name.
        if words[:1] == ["compare"]:
            from harness.compare.refused import refused_compare
            message = refused_compare(words[1:], message)
        argparse.ArgumentParser.error(refused.parser, message)  # argparse's usage and error lines, exit 2
    args.argv = words  # for the --resume hint after an interruption
    settings = output_settings(args.verbose) if args.command in ("run", "sweep") else contextlib.nullcontext()
    try:
        check_out(args.command, getattr(args, "out", None))
        with settings:
            return _dispatch(args)
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted()
