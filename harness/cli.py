"""The ``harness`` command's entry, the installed script's and ``python -m harness``'s: :func:`main`, which imports
the command (:mod:`harness.command`; with torch, seconds) only once a Ctrl-C in those imports ends the process as
any other Ctrl-C before a run does (:func:`harness.ending.own_command`). Nothing heavier here, so that the script's
own import of this module is over at once.
"""

from __future__ import annotations

import sys

from harness import ending


def main(argv: list[str] | None = None) -> int:
    """The ``harness`` command on ``argv``, in this process (another program's call); without it, on this process's
    command line, which is then the process's own command (:func:`harness.ending.own_command`): a Ctrl-C from its
    first import on exits 130 with one line, and a stop signal once its work is over ends the process with its exit
    status, never killed by the signal."""
    if argv is not None:
        return _command(list(argv))
    return ending.own_command(lambda: _command(sys.argv[1:]))


def _command(words: list[str]) -> int:
    from harness.command import command  # here, not above: see the module's docstring

    return command(words)
