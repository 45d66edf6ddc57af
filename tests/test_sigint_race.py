"""Ctrl-C in a ``harness`` command exits 130, never killed by SIGINT (returncode -2), also where its
KeyboardInterrupt was raised within code run by ``exec`` of a string (an import making a dataclass as the signal
came): CPython then marks the interrupt unhandled even though the command caught it, and the process killed itself
with SIGINT after its teardown. In a run (with the resume hint), and in the seconds the command's imports take,
before anything of the command runs (one line), by the installed script as by ``python -m harness``; and in the
regression suite (``python -m harness.suites``). Signalled at a fixed point, by ``tests/sigint_at/sitecustomize.py``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import default_sigint
from test_regression_suite_stop import tiny_suite
from tiny_domain import AS_MODULE, REPO, harness_env

TINY_RUN = ["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--quiet", "--tracker", "none"]


def test_a_ctrl_c_raised_within_an_exec_of_a_string_exits_130_with_the_resume_hint(tmp_path):
    """The SIGINT comes as the tiny run's first epoch ends (its first call of ``_hold``)."""
    out = interrupted_at("call:tiny_domain:_hold", ["-m", "harness", *TINY_RUN, "--results", str(tmp_path)], REPO)
    assert out.returncode == 130, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    hint = out.stderr.strip().splitlines()[-1]
    assert hint.startswith("interrupted; continue with: ") and f" {AS_MODULE} run " in hint, hint
    assert hint.endswith(" --resume"), hint


def interrupted_at(sigint_at: str, command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``command`` (this interpreter's) with a SIGINT at the point ``sigint_at`` names (tests/sigint_at)."""
    env = {**harness_env(), "SIGINT_AT": sigint_at}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "sigint_at"), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=default_sigint)


def installed_script(folder: Path) -> Path:
    """The ``harness`` script pip installs from pyproject.toml's entry point (the lines that matter)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    module, function = re.search(r'^\[project\.scripts\]\nharness = "([\w.]+):(\w+)"$', pyproject, re.M).groups()
    script = folder / "bin" / "harness"
    script.parent.mkdir()
    script.write_text(f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    return script


@pytest.mark.parametrize("invocation", ["script", "module"])
def test_a_ctrl_c_while_the_command_imports_torch_exits_130_with_one_line(tmp_path, invocation):
    start = [str(installed_script(tmp_path))] if invocation == "script" else ["-m", "harness"]
    out = interrupted_at("import:torch", [*start, *TINY_RUN, "--results", str(tmp_path / "results")], REPO)
    assert (out.returncode, out.stderr, out.stdout) == (130, "interrupted\n", "")
    assert not (tmp_path / "results").exists()


def test_a_ctrl_c_that_the_regression_suite_caught_exits_130_with_its_line(tmp_path):
    """Raised as its pool waits for its runs, which it catches to stop them and say so (its one run is stopped at
    once, or never started)."""
    suite = ["-m", "harness.suites", "--suite", str(tiny_suite(tmp_path)), "--baseline", str(tmp_path / "baseline"),
             "--update-baseline"]
    out = interrupted_at("call:harness.suites.pool:as_completed", suite, REPO)
    assert out.returncode == 130 and "Traceback" not in out.stderr, (out.returncode, out.stderr)
    assert out.stderr.splitlines()[-1].startswith("regression suite stopped by SIGINT: 0 runs finished, "), out.stderr
