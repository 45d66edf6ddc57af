"""The errors a new user of plugins meets say what to do: an unknown loss may be a loss of their own that
``HARNESS_PLUGINS`` does not name; a plugin module in the current folder is not on the installed script's Python path;
a loss a domain does not accept says what it needs that the domain's methods do not supply."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from tiny_domain import REPO

from harness.cli import main


def _error(capsys, *args: str) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_an_unknown_loss_says_a_loss_of_ones_own_needs_harness_plugins(capsys, monkeypatch):
    monkeypatch.delenv("HARNESS_PLUGINS", raising=False)
    err = _error(capsys, "run", "--domain", "graph", "--loss", "infonse")
    assert err.startswith("error: unknown loss 'infonse'; did you mean 'infonce'? Domain 'graph' accepts: "), err
    assert "(a loss of your own is known only where HARNESS_PLUGINS names the module that registers it" in err
    err = _error(capsys, "sweep", "--domains", "graph", "--losses", "margin_nce", "--dry-run")
    assert "no domain in --domains has loss margin_nce (see harness list; a loss of your own is known only where " \
           "HARNESS_PLUGINS names" in err, err

    monkeypatch.setenv("HARNESS_PLUGINS", "tiny_domain")  # set, and naming no module that registers it
    err = _error(capsys, "run", "--domain", "graph", "--loss", "margin_nce")
    assert err.rstrip().endswith("(HARNESS_PLUGINS names tiny_domain, which registers no loss margin_nce)"), err


def test_a_loss_a_domain_does_not_accept_says_what_it_needs_that_the_domain_does_not_supply(capsys):
    err = _error(capsys, "run", "--domain", "graph", "--loss", "supcon")
    assert err.startswith("error: domain 'graph' does not accept loss 'supcon': it needs class labels and positives "
                          "that are the anchor's classmates, which graph's infograph does not supply; accepted: "), err


def test_a_plugin_in_the_current_folder_that_the_installed_script_cannot_import_names_pythonpath(tmp_path):
    """The console script ``harness`` puts its own folder on the path, not the current one (as ``python -m`` does)."""
    script = tmp_path / "bin" / "harness"
    script.parent.mkdir()
    script.write_text("import sys\nfrom harness.cli import main\nsys.exit(main())\n")
    shutil.copy(REPO / "tests" / "tiny_loss.py", tmp_path / "my_losses.py")
    env = {**os.environ, "HARNESS_PLUGINS": "my_losses", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, str(script), "list", "losses"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr == ("error: HARNESS_PLUGINS names 'my_losses', which cannot be imported (No module named "
                          "'my_losses'); ./my_losses.py is in the current folder, which is not on the Python path: "
                          "run with PYTHONPATH=.\n")
    env["PYTHONPATH"] = os.pathsep.join([".", str(REPO)])  # as the hint says
    listed = subprocess.run([sys.executable, str(script), "list", "losses"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "tiny_weighted_nce" in listed.stdout, listed.stderr


@pytest.mark.parametrize("module", ["no_such_plugin", "my_pkg.losses"])
def test_a_plugin_that_is_nowhere_keeps_the_plain_message(tmp_path, run_main, monkeypatch, plugins_afresh, module):
    """In this process, as a fresh one that loads its plugins (the script's own refusal is the test above's)."""
    plugins_afresh(module)
    monkeypatch.chdir(tmp_path)
    out = run_main(main, "list", "losses")
    assert out.returncode == 2 and out.stderr.rstrip().endswith("; fix or remove it"), out.stderr
