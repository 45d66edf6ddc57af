"""Ctrl-C in a ``harness run`` exits 130 with the resume hint, also where its KeyboardInterrupt was raised within
code run by ``exec`` of a string (an import making a dataclass as the signal came): CPython then marks the
interrupt unhandled even though the command caught it, and under ``python -m`` the process killed itself with
SIGINT after its teardown (returncode -2). Signalled by the ``sigint_in_exec`` test plugin at a fixed point."""

from __future__ import annotations

import subprocess
import sys

from support import default_sigint
from tiny_domain import AS_MODULE, REPO, harness_env


def test_a_ctrl_c_raised_within_an_exec_of_a_string_exits_130_with_the_resume_hint(tmp_path):
    env = {**harness_env(), "HARNESS_PLUGINS": "tiny_domain,sigint_in_exec"}
    out = subprocess.run([sys.executable, "-m", "harness", "run", "--domain", "tiny", "--loss", "infonce", "--seeds",
                          "0", "--quiet", "--tracker", "none", "--results", str(tmp_path)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, preexec_fn=default_sigint)
    assert out.returncode == 130, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr
    hint = out.stderr.strip().splitlines()[-1]
    assert hint.startswith("interrupted; continue with: ") and f" {AS_MODULE} run " in hint, hint
    assert hint.endswith(" --resume"), hint
