"""A ``harness compare`` command line that argparse refused (a bad value, a missing or unknown option): its sides,
``--results`` and ``--out`` read as argparse reads them, and ``--out``'s CANNOT DECIDE report of the refusal, so
that ``--out`` never keeps an earlier comparison's verdict. Only such a command line imports this module."""

from __future__ import annotations

import argparse
from typing import Any

from domains.errors import UserError
from harness.compare import claim_out, report_error
from harness.parser import CommandLineRefused, Parser, add_compare_args, check_out


class _Reader(Parser):
    """A parser that reads a command line's words as argparse reads them (its option strings and their
    abbreviations, ``--opt=value``, the last one given) and checks nothing else: no option is required, typed or
    limited to choices, a value may be absent (``nargs="?"``), and ``--help`` is a flag, not a printout and an exit.
    A word argparse refuses alone raises :class:`harness.parser.CommandLineRefused`, as :class:`harness.parser.Parser`
    does."""

    def add_argument(self, *names: str, **kwargs: Any) -> argparse.Action:
        if kwargs.get("action") in ("store_true", "help"):
            return super().add_argument(*names, action="store_true")
        return super().add_argument(*names, dest=kwargs.get("dest"), nargs="?")


def as_given(words: list[str]) -> argparse.Namespace:
    """The sides, ``--results`` and ``--out`` of a compare command line that argparse refused (``words``, after
    ``compare``), read by compare's own options (:func:`harness.parser.add_compare_args`) as argparse reads them:
    ``--ou R`` is ``--out``, ``--c X`` none (``--candidate`` or ``--correction``: argparse calls it ambiguous); None
    where absent or left without a value (``--baseline`` without one, argparse's refusal, still leaves ``--out``
    read). A word argparse itself refuses alone (an ambiguous abbreviation, ``--allow-missing=1``) is read as
    nothing, the rest as they stand."""
    reader = _Reader(prog="harness compare")
    add_compare_args(reader)

    def readable(word: str) -> bool:
        try:
            reader.parse_known_args([word])
        except CommandLineRefused:
            return False
        return True

    return reader.parse_known_args([word for word in words if readable(word)])[0]


def refused_compare(words: list[str], message: str) -> str:
    """argparse's message for a compare command line it refused (``words``, after ``compare``), once ``--out``,
    where given, holds a CANNOT DECIDE report of it: it must not keep an earlier comparison's verdict, which a CI
    step may publish or grep. Where ``--out`` may not take a report, the message adds why, and nothing is written
    (:func:`harness.compare.claim_out`)."""
    given = as_given(words)
    if not given.out:
        return message
    try:
        check_out("compare", given.out)
        claim_out(given)
    except UserError as exc:
        return f"{message}; {' '.join(str(exc).split())}"
    return str(report_error(given, UserError(message)))
