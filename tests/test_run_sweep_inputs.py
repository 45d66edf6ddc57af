"""The commands as a new user meets them: every command's ``--help`` gives each option's default, and ``harness
run`` and ``harness sweep`` make input that would silently run something else than asked one error line (exit 2)
before any work."""

from __future__ import annotations

import argparse
import re

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)

from domains.errors import UserError
from harness.cli import main
from harness.parser import build_parser
from harness.run.config import parse_seeds


def _command(name: str) -> argparse.ArgumentParser:
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


COMMANDS = ["run", "sweep", "list", "leaderboard", "report", "prior", "history", "compare", "bench"]


def test_every_command_is_checked():
    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_with_a_default_names_it_in_its_help(command):
    """As ``(default: VALUE)``, or ``VALUE (default)`` where the help lists the choices."""
    unnamed = []
    for action in _command(command)._actions:
        if action.default in (None, False, [], argparse.SUPPRESS) or isinstance(action, argparse._HelpAction):
            continue
        text = " ".join((action.help or "").split())
        if f"default: {action.default}" not in text and f"{action.default} (default" not in text:
            unnamed.append(f"{'/'.join(action.option_strings)} (default {action.default!r})")
    assert not unnamed, f"harness {command}: the help does not give the default of {', '.join(unnamed)}"


@pytest.mark.parametrize("command", COMMANDS)
def test_an_option_without_a_value_says_what_happens_without_it(command):
    """An option whose parser default is None (not given) says what the command does then, unless required."""
    silent = [a.option_strings[0] for a in _command(command)._actions
              if a.option_strings and a.default is None and not a.required and a.nargs != 0
              and "default" not in (a.help or "")]
    assert not silent, f"harness {command}: {', '.join(silent)} do not say what happens when left out"


@pytest.mark.parametrize("seeds", ["0,,1", "0,1,", ",0"])
def test_an_empty_seed_between_commas_is_refused(tmp_path, capsys, seeds):
    """'0,,1' ran seeds 0 and 1 without a word: a seed left out by a typo went unnoticed."""
    with pytest.raises(UserError, match="got an empty item in"):
        parse_seeds(seeds)
    run = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", seeds, "--results", str(tmp_path)]
    sweep = ["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", seeds, "--results", str(tmp_path),
             "--dry-run"]
    for argv in (run, sweep):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --seeds expects comma-separated integers") and err.count("\n") == 1, err
    assert not list(tmp_path.glob("*.json"))


def test_seeds_still_read_as_before():
    assert parse_seeds("0,1,2") == [0, 1, 2] and parse_seeds(" 3 , 0-1 ") == [3, 0, 1] and parse_seeds("2,2") == [2]
    for bad, message in (("", "got nothing"), (",", "got nothing"), ("-1", "got '-1'"), ("3-1", "write 1-3")):
        with pytest.raises(UserError, match=message):
            parse_seeds(bad)


@pytest.mark.parametrize("values", ["1,,2", "1,2,", ",1"])
def test_an_empty_grid_value_between_commas_is_refused(tmp_path, run_main, values):
    """'1,,2' ran the points 1 and 2 without a word, as seeds did."""
    out = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce", "--grid", f"epochs={values}",
                   "--results", str(tmp_path), "--dry-run")
    assert out.returncode == 2 and out.stderr == f"error: --grid epochs={values} has an empty value (a stray comma)\n"


def test_one_grid_value_written_twice_is_one_job(tmp_path, run_main):
    """'1,1.0' is one run id: two jobs would run it at once, the second finding it busy."""
    out = run_main(main, "sweep", "--domains", "tiny", "--losses", "infonce", "--grid", "epochs=1,1.0,2",
                   "--seeds", "0", "--results", str(tmp_path), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "sweep: 2 runs, 0 with a completed record (skipped), 2 to run" in out.stdout
    assert [line.split("--set ")[1].split()[0] for line in out.stdout.splitlines()
            if re.match(r"(\S+=\S+ )*harness run ", line)] == ["epochs=1", "epochs=2"], out.stdout


def test_a_misspelt_loss_method_or_dataset_in_a_sweep_gets_a_did_you_mean_as_in_run(tmp_path, run_main):
    """``run --loss pcul`` asked "did you mean 'pucl'?"; a sweep only said that no domain had it (session 33)."""
    for option, typo, meant in (("--losses", "pcul", "pucl"), ("--methods", "linaer", "linear"),
                                ("--datasets", "blbos", "blobs")):
        out = run_main(main, "sweep", "--domains", "tiny", option, typo, "--results", str(tmp_path), "--dry-run")
        assert out.returncode == 2, out.stderr
        assert f" {typo}; did you mean '{meant}'? (see harness list" in out.stderr  # (a loss: then the plugin hint)
