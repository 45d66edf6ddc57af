"""``--help`` says what is true: every option of every sub-command has a help line, and ``harness list datasets``
marks as ``[download]`` only the sets the harness ever downloads."""

from __future__ import annotations

import argparse

import tiny_domain  # noqa: F401  (registers the tiny domain in this process)

from harness.listing import dataset_lines
from harness.parser import build_parser


def _options(parser: argparse.ArgumentParser, path: str):
    """(command path, option) for every argument of ``parser`` and of its sub-commands, recursively."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction):
            yield path, action


def test_every_option_of_every_command_has_help():
    options = list(_options(build_parser(), "harness"))
    commands = {path for path, _ in options}
    assert {"harness run", "harness sweep", "harness leaderboard", "harness compare", "harness bench"} <= commands
    silent = [f"{path} {'/'.join(action.option_strings) or action.dest}" for path, action in options
              if not (action.help or "").strip() or action.help == argparse.SUPPRESS]
    assert not silent, f"options without a help line: {', '.join(silent)}"


def test_a_default_in_the_help_is_the_default():
    """Where a help line names its default, the parser's default is that value."""
    for _, action in _options(build_parser(), "harness"):
        if "(default: " in (action.help or "") and isinstance(action.default, str) and "$" not in action.help:
            assert f"default: {action.default})" in action.help, (action.option_strings, action.help)


def test_download_marks_only_what_is_downloaded():
    import domains

    lines = {line.split()[0]: line for line in dataset_lines([domains.get("tiny")])}
    assert lines["tiny/blobs"].endswith("[default, embedded]")
    assert lines["tiny/blobs_hard"].endswith("[no download]") and lines["tiny/absent"].endswith("[download]")
    marked = set()
    for name in domains.available():
        for line in dataset_lines([domains.get(name)]):
            if line.endswith("[download]"):
                marked.add(line.split()[0])
    never = {"text/books", "vision/imagenet100", "vision/corrupted-cifar10", "vision/bffhq", "rl/cartpole-swingup",
             "rl/gym:Pendulum-v1", "graph/synthetic-motifs", "vision/digits"}  # read from disk, generated, shipped
    assert not marked & never
    assert {"graph/MUTAG", "vision/cifar10", "vision/mnist", "text/hf-text", "vision/hf:uoft-cs/cifar10"} <= marked
