"""The ``harness`` command: parse the command line (:mod:`harness.parser`), then run the one command it names, whose
module is imported only then.

User mistakes (``UserError``) print one line ``error: ...`` and exit 2; unexpected errors exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

from domains.errors import UserError
from harness.parser import CommandLineRefused, build_parser, check_out
from harness.run import stopping
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


def main(argv: list[str] | None = None) -> int:
    """The ``harness`` command on ``argv``; without it, on this process's command line, which is then the process's
    own command: once its work is over, a stop signal ends the process with its exit status, never killed by the
    signal (:func:`harness.run.stopping.own_process`)."""
    if argv is not None:
        return _command(list(argv))
    stopping.own_process()
    status = None
    try:
        status = _command(sys.argv[1:])
        return status
    finally:
        stopping.exit_with(status)


def _command(words: list[str]) -> int:
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
        print("interrupted", file=sys.stderr)
        return 130
