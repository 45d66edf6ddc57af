"""The code a run's identity hashes (``harness.run_code``): every module a real run loads is in it; the pages,
``compare``, sweeps, benchmarks and a domain's published rows are not; an edit to a file in it is other code, an
edit elsewhere is not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from support import run_code_digest
from tiny_domain import REPO, harness_env

from harness import version
from harness.cli import main
from harness.run_code import PACKAGES, run_files

OUTSIDE = ["harness/cli.py", "harness/command.py", "harness/parser.py", "harness/pages/leaderboard.py",
           "harness/compare/sides.py", "harness/sweep/local.py", "harness/bench.py", "harness/suites/campaign.py",
           "harness/groups.py", "losses/benchmark.py"]


def _relative(root: Path) -> set[str]:
    run_files.cache_clear()
    return {p.relative_to(root).as_posix() for p in run_files(root)}


def test_every_module_a_run_loads_is_in_its_code():
    """A real vision run in a fresh interpreter: each module of the packages it imported (but the CLI's own three
    files, its entry, the command and its parser, whose choices reach the run as its config) is one the digest covers.
    Two of the digits' classes: a fifth of the data, the same modules."""
    script = (
        "import json, sys, tempfile\n"
        "from harness.cli import main\n"
        "with tempfile.TemporaryDirectory() as results:\n"
        "    code = main(['run', '--domain', 'vision', '--dataset', 'digits', '--loss', 'dcl', '--seeds', '0',\n"
        "                 '--set', 'epochs=1', '--set', 'linear_epochs=1', '--set', 'classes=2', '--quiet',\n"
        "                 '--tracker', 'none',\n"
        "                 '--results', results])\n"
        "print(json.dumps([code, [m.__name__ for m in list(sys.modules.values()) if getattr(m, '__file__', None)]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=harness_env(), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    code, modules = json.loads(out.stdout.splitlines()[-1])
    assert code == 0
    loaded = {m.replace(".", "/") for m in modules if m.split(".")[0] in PACKAGES}
    files = {f"{m}/__init__.py" if (REPO / m / "__init__.py").is_file() else f"{m}.py" for m in loaded}
    assert "domains/vision/train.py" in files and "losses/dcl.py" in files  # the run did load its code
    assert files - _relative(REPO) == {"harness/cli.py", "harness/command.py", "harness/parser.py"}


def test_the_commands_around_runs_and_the_published_rows_are_not_run_code():
    covered = _relative(REPO)
    assert not covered & set(OUTSIDE)
    assert not {p for p in covered if p.endswith("/published.py")}
    assert {"harness/run/runner.py", "harness/records.py", "domains/base.py", "losses/registry.py",
            "domains/graph/__init__.py", "domains/rl/__init__.py", "domains/text/__init__.py"} <= covered
    assert version.package_digest() == run_code_digest(REPO)


def test_an_edit_is_other_code_only_inside_the_run_code(tmp_path):
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    before = run_code_digest(tmp_path)
    for name in OUTSIDE:  # pages, compare, sweeps, benchmarks: the same runs
        with (tmp_path / name).open("a") as fh:
            fh.write("\n# edited\n")
    assert run_code_digest(tmp_path) == before
    with (tmp_path / "domains/vision/train.py").open("a") as fh:
        fh.write("\n# edited\n")
    assert run_code_digest(tmp_path) != before

    # A module is run code once run code imports it: inside a function, relatively, at any depth.
    (tmp_path / "domains/vision/extra.py").write_text("VALUE = 1\n")
    (tmp_path / "harness/sweep/hidden.py").write_text("VALUE = 2\n")
    assert not {"domains/vision/extra.py", "harness/sweep/hidden.py"} & _relative(tmp_path)
    with (tmp_path / "domains/vision/train.py").open("a") as fh:
        fh.write("\n\ndef _late():\n    from . import extra\n    return extra\n")
    with (tmp_path / "losses/dcl.py").open("a") as fh:
        fh.write("\n\ndef _late():\n    from harness.sweep import hidden\n    return hidden\n")
    assert {"domains/vision/extra.py", "harness/sweep/hidden.py", "harness/sweep/__init__.py"} <= _relative(tmp_path)


def test_seeds_of_two_commits_share_a_row_unless_the_run_code_changed(tmp_path):
    """The promise the narrower digest keeps (README, "The same code"): a seed run after a pages-only edit joins
    the row of the seed before it; after an edit to run code, the row shows the new code's seed alone. The runs go
    through the edited tree's code; the pages (which read only the records) are made in this process."""
    tree, results = tmp_path / "tree", tmp_path / "results"
    for package in PACKAGES:
        shutil.copytree(REPO / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "tests").mkdir()
    shutil.copy(REPO / "tests" / "tiny_domain.py", tree / "tests" / "tiny_domain.py")
    env = {**harness_env(), "PYTHONPATH": f"{tree / 'tests'}{os.pathsep}{tree}"}

    def harness(*args: str) -> str:
        out = subprocess.run([sys.executable, "-m", "harness", *args], cwd=tree, env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def run(seed: int) -> None:
        harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", str(seed), "--quiet", "--tracker",
                "none", "--results", str(results))

    def row() -> str:
        assert main(["leaderboard", "--results", str(results), "--out", str(tmp_path / "pages")]) == 0
        (line,) = [x for x in (tmp_path / "pages" / "tiny.md").read_text().splitlines()
                   if x.startswith("| linear | infonce |")]
        return line

    run(0)
    with (tree / "harness/pages/leaderboard.py").open("a") as fh:
        fh.write("\n# edited: a page writer, no run's code\n")
    run(1)
    assert "(2 seeds)" in row()
    with (tree / "domains/base.py").open("a") as fh:
        fh.write("\n# edited: run code\n")
    run(2)
    assert "(1 seed)" in row() and len(list(results.glob("*.json"))) == 3
