"""``harness compare --out PATH`` never leaves at PATH an earlier run's verdict, whatever ends the command: a command
line argparse refuses (a bad value, a missing or unknown option) gets a CANNOT DECIDE report of the refusal, as bad
input read later does; an ``--out`` refused because a ``.json`` report there would sit among a side's records
replaces an earlier report of ours there, and writes none where there was none; an interruption gets a report too.
A user's file or a folder at PATH is left as it is (no report of ours is there to go stale). An audit (session 36)
found a CI step that greps ``report.md`` reading the previous run's PASS after ``--alpha abc``."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil

import pytest
from tiny_domain import harness, synthetic_record, write_records

from harness import compare
from harness.cli import main
from harness.compare.refused import as_given
from harness.parser import CommandLineRefused, build_parser

GOOD = [85.9, 82.45, 86.6, 81.2, 80.9]
USAGE = "usage: harness compare [-h] --baseline BASELINE --candidate CANDIDATE"
FOUR = ("baseline", "candidate", "results", "out")  # what the report of a refused command line reads


def _sides(tmp_path) -> list[str]:
    write_records(tmp_path / "base", [synthetic_record("infonce", s, v) for s, v in enumerate(GOOD)])
    write_records(tmp_path / "cand", [synthetic_record("infonce", s, v, finished_at="2026-01-02T00:00:00+00:00")
                                      for s, v in enumerate(GOOD)])
    return ["--baseline", str(tmp_path / "base"), "--candidate", str(tmp_path / "cand")]


def test_a_command_line_argparse_refuses_replaces_an_earlier_pass_at_out(tmp_path, run_main):
    sides = _sides(tmp_path)
    report = tmp_path / "report.md"
    done = harness("compare", *sides, "--out", str(report))
    assert done.returncode == 0 and "**PASS" in report.read_text()
    earlier = report.read_bytes()
    refusals = {  # the command line after `compare` -> argparse's message
        "argument --alpha: invalid float value: 'abc'": [*sides, "--alpha", "abc", "--out", str(report)],
        "argument --test: invalid choice: 'foo'": [*sides, "--test", "foo", "--out", str(report)],
        "the following arguments are required: --candidate": [*sides[:2], "--out", str(report)],
        # another option without its value: --out is still read
        "argument --baseline: expected one argument": [*sides[2:], "--out", str(report), "--baseline"],
        # an unknown option is refused by the top-level parser; --out abbreviated, as argparse takes it
        "unrecognized arguments: --bogus 1": [*sides, f"--ou={report}", "--bogus", "1"],
    }
    for i, (message, line) in enumerate(refusals.items()):
        report.write_bytes(earlier)
        # The first through the command, the rest through main in this process (what the command calls), without
        # a fresh interpreter's seconds of imports each.
        done = harness("compare", *line) if i == 0 else run_main(main, "compare", *line)
        assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
        assert message in done.stderr and done.stderr.rstrip().endswith(f"; wrote {report}, a CANNOT DECIDE report")
        text = report.read_text()
        assert "PASS" not in text and "**CANNOT DECIDE" in text and message in text, text
    # the sides as far as they were given head the report
    assert text.startswith(f"# Comparison: baseline `{tmp_path / 'base'}` vs candidate `{tmp_path / 'cand'}`")
    report.write_bytes(earlier)
    run_main(main, "compare", *sides[:2], "--out", str(report))
    assert report.read_text().startswith(f"# Comparison: baseline `{tmp_path / 'base'}` vs candidate (not given)")


def _error_line(stderr: str) -> str:
    """The one line of ``stderr`` that says ``error:``."""
    [line] = [x for x in stderr.splitlines() if "error:" in x]
    return line


def _names(option: str, line: str) -> bool:
    """Whether ``line`` names ``option`` itself, not an option it begins (``--c`` in ``--candidate``)."""
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", line) is not None


def test_an_ambiguous_abbreviation_names_no_side_in_the_report(tmp_path, run_main):
    """``--c X`` could be ``--candidate`` or ``--correction``, and argparse refuses it as ambiguous; the report of
    the refusal named X the candidate all the same (its reader knew only the sides, --results and --out). In this
    process: a refused command line through the command is the first test's."""
    sides = _sides(tmp_path)
    report = tmp_path / "report.md"
    done = run_main(main, "compare", *sides[:2], "--c", sides[3], "--ou", str(report))
    # argparse's wording of the refusal differs between Python versions: the line names the abbreviation, and ours
    # adds where the report went
    line = _error_line(done.stderr)
    assert done.returncode == 2 and line.startswith("harness compare: error: ") and _names("--c", line), line
    assert line.endswith(f"; wrote {report}, a CANNOT DECIDE report")
    assert report.read_text().startswith(f"# Comparison: baseline `{sides[1]}` vs candidate (not given)\n")
    # an abbreviation argparse reads as one option is read as it: --ca is --candidate
    run_main(main, "compare", *sides[:2], "--ca", sides[3], "--alpha", "abc", "--ou", str(report))
    assert report.read_text().startswith(f"# Comparison: baseline `{sides[1]}` vs candidate `{sides[3]}`\n")


def _reads(words: list[str]) -> dict[str, str | None] | None:
    """The sides, --results and --out compare's own parser reads from ``words``; None where it refuses them."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # an abbreviation of --help prints the help and exits
            args = vars(build_parser().parse_args(["compare", *words]))
    except (CommandLineRefused, SystemExit):
        return None
    return {k: args[k] for k in FOUR}


def test_every_abbreviation_of_compares_options_is_read_as_argparse_reads_it():
    """Each prefix of each of compare's option strings, ``--p X`` and ``--p=X``, after a line that gives the sides,
    --results and --out: where argparse accepts the line, the reader of a refused line reads the four as it does;
    where argparse refuses it (ambiguous, a bad value, an explicit value to a flag, the help), as the line without
    that option, never X."""
    [compare] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    names = [o for a in compare.choices["compare"]._actions for o in a.option_strings if o.startswith("--")]
    line = ["--baseline", "B", "--candidate", "C", "--results", "R", "--out", "O"]
    checked = set()
    for prefix in {name[:n] for name in names for n in range(3, len(name) + 1)}:
        for option in ([prefix, "X"], [f"{prefix}=X"]):
            given = vars(as_given([*line, *option]))
            expected = _reads([*line, *option]) or dict(zip(FOUR, "BCRO"))
            assert {k: given[k] for k in FOUR} == expected, option
            checked.add(prefix)
    assert {"--c", "--t", "--al", "--ca", "--o"} <= checked  # among them the ambiguous --c, --t and --al


def test_a_refused_command_line_leaves_a_users_file_or_a_folder_at_out_and_says_why(tmp_path, run_main):
    sides = _sides(tmp_path)
    notes = tmp_path / "notes.md"
    notes.write_text("my notes\n")
    out = run_main(main, "compare", *sides, "--alpha", "abc", "--out", str(notes))
    assert out.returncode == 2 and notes.read_text() == "my notes\n"
    assert "invalid float value: 'abc'; " in out.stderr and "was not generated by `harness compare`" in out.stderr
    out = run_main(main, "compare", *sides, "--alpha", "abc", "--out", str(tmp_path / "base"))
    assert out.returncode == 2 and "is a folder; compare needs a file" in out.stderr
    # Without --out, or with --out left without its value, argparse's lines are as they were: nothing is written.
    for tail in ([], ["--out"]):
        out = run_main(main, "compare", *sides, "--alpha", "abc", *tail)
        assert out.returncode == 2 and out.stderr.startswith(USAGE) and out.stderr.count("error:") == 1
        assert out.stderr.rstrip().endswith(("invalid float value: 'abc'", "expected one argument"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "cand", "notes.md"]


def test_other_commands_refusals_are_argparse_s_own(tmp_path, run_main):
    out = run_main(main, "leaderboard", "--out", str(tmp_path / "pages"), "--bogus")
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "pages").exists()
    # argparse's line (its wording is argparse's), from the parser that refused it, and nothing of compare's added
    line = _error_line(out.stderr)
    assert line.startswith("harness: error: ") and _names("--bogus", line) and "wrote" not in line, line
    out = run_main(main, "run", "--loss", "infonce")
    line = _error_line(out.stderr)
    assert out.returncode == 2 and line.startswith("harness run: error: ") and _names("--domain", line), line


@pytest.mark.parametrize("side", ["base", "cand"])
def test_an_out_among_a_sides_records_replaces_an_earlier_report_of_ours_there(tmp_path, run_main, side):
    """``--out cand/report.json`` was written while cand was no side of the comparison; once it is one, --out
    there is refused (a .json report among records is read as one), and the refusal kept the earlier PASS. In this
    process: the command's own exit and report are the first test's."""
    sides = _sides(tmp_path)
    shutil.copytree(tmp_path / "base", tmp_path / "other")
    report = tmp_path / side / "report.json"
    done = run_main(main, "compare", "--baseline", str(tmp_path / "other"), "--candidate", str(tmp_path / "cand"
                    if side == "base" else tmp_path / "base"), "--out", str(report))
    assert done.returncode == 0 and "**PASS" in report.read_text()
    done = run_main(main, "compare", *sides, "--out", str(report))
    assert done.returncode == 2 and done.stdout == "" and "is among the records of" in done.stderr
    assert done.stderr.rstrip().endswith("the earlier compare report there now says so (CANNOT DECIDE): move it "
                                         "out of the folder")
    text = report.read_text()
    assert "PASS" not in text and "**CANNOT DECIDE" in text and "is among the records of" in text
    # beside the records, only that report: no temporary file left
    assert [p.name for p in (tmp_path / side).iterdir() if not p.name.startswith("tiny-blobs-")] == ["report.json"]


def test_an_interrupted_comparison_leaves_no_earlier_verdict_at_out(tmp_path, run_main, monkeypatch):
    sides = _sides(tmp_path)
    report = tmp_path / "report.md"
    assert run_main(main, "compare", *sides, "--out", str(report)).returncode == 0

    def interrupted(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(compare, "load_side", interrupted)  # Ctrl-C while the records are read
    out = run_main(main, "compare", *sides, "--out", str(report))
    assert out.returncode == 130 and out.stderr == "interrupted\n"
    text = report.read_text()
    assert "PASS" not in text and "**CANNOT DECIDE: the comparison was interrupted before its verdict.**" in text
