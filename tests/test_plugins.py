"""Code plugged in from outside the repository (``HARNESS_PLUGINS``, entry points) takes no name already taken."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_domain
from tiny_domain import REPO, harness_env

import domains


def _harness(plugins: Path, *args: str, names: str = "tiny_domain,tiny_loss") -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` with the plugin modules in the folder ``plugins`` (ahead of tests/) plugged in."""
    env = {**harness_env(), "HARNESS_PLUGINS": names}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)


def test_a_plugin_loss_under_a_builtin_name_is_refused_in_one_line(tmp_path):
    (tmp_path / "my_dcl.py").write_text(
        "from losses import register_loss\n\n\n"
        "@register_loss('dcl', paper='-', summary='not the paper\\'s dcl')\n"
        "def dcl(scores):\n    return scores.logits.sum()\n")
    out = _harness(tmp_path, "list", "losses", names="my_dcl")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: plugin 'my_dcl' (HARNESS_PLUGINS) is refused: loss 'dcl' of my_dcl is "
                                 "taken by losses.dcl")


@pytest.mark.parametrize("name", ["graph", "tiny"])  # a built-in domain not imported yet; a plugged-in one
def test_a_domain_under_a_taken_name_is_refused(name):
    before = dict(domains._REGISTRY)

    class Impostor(tiny_domain.TinyDomain):
        pass

    Impostor.name = name
    with pytest.raises(domains.UserError, match=f"domain .{name}. of {Impostor.__module__} is taken by "):
        domains.register(Impostor)
    assert domains._REGISTRY == before
