"""What a plugin's code is, and which plugin a run needs: a plugin's identity covers the user's own modules it imports
(an edited helper is other code, so another run), the plugin named for a loss is the ``HARNESS_PLUGINS`` module that
registered it (not the module that defines its kernel), and a plugin that fails on import is one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_domain import REPO, harness_env

from harness.cli import main as harness_main

KERNEL = "def kernel(scores):\n    return scores.logits.logsumexp(-1).mean() + {shift}\n"


def _harness(plugins: Path, names: str, *args: str) -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` with ``HARNESS_PLUGINS=names`` and the modules in the folder ``plugins``."""
    env = {**harness_env(), "HARNESS_PLUGINS": names}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)


def _run(plugins: Path, names: str, loss: str, results: Path) -> subprocess.CompletedProcess:
    return _harness(plugins, names, "run", "--domain", "tiny", "--loss", loss, "--seeds", "0", "--set", "epochs=1",
                    "--quiet", "--tracker", "none", "--results", str(results))


def _digests(plugins: Path, names: str, loss: str) -> dict[str, str]:
    code = f"import json, harness.version as v; print(json.dumps(v.plugin_digests(None, {loss!r})))"
    env = {**harness_env(), "HARNESS_PLUGINS": names}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_edited_module_that_a_single_file_plugin_imports_is_another_run(tmp_path):
    plugins, results = tmp_path / "plugins", tmp_path / "results"
    plugins.mkdir()
    (plugins / "my_helper.py").write_text("def margin_shift(x):\n    return x + 0.0\n")
    (plugins / "helped_loss.py").write_text(
        "import json\n\nimport torch\nfrom my_helper import margin_shift\n\nfrom losses import register_loss\n\n\n"
        "@register_loss('helped_nce', paper='-', summary='a loss with a helper')\n"
        "def helped(scores):\n    return margin_shift(scores.logits.logsumexp(-1).mean())\n")
    names = "tiny_domain,helped_loss"
    first = _run(plugins, names, "helped_nce", results)
    assert first.returncode == 0 and "[completed]" in first.stdout, first.stderr
    [before] = [json.loads(p.read_text()) for p in results.glob("*.json")]

    (plugins / "my_helper.py").write_text("def margin_shift(x):\n    return x + 0.5\n")  # other code
    rerun = _run(plugins, names, "helped_nce", results)
    assert rerun.returncode == 0, rerun.stderr
    assert "[completed]" in rerun.stdout and "[skipped]" not in rerun.stdout
    [after] = [json.loads(p.read_text()) for p in results.glob("*.json") if json.loads(p.read_text()) != before]
    assert after["software"]["plugins"]["helped_loss"] != before["software"]["plugins"]["helped_loss"]
    assert after["software"]["source_digest"] != before["software"]["source_digest"]


def test_a_package_plugins_identity_covers_the_users_modules_it_imports_from_outside_it(tmp_path):
    (tmp_path / "pkg_plugin").mkdir()
    (tmp_path / "pkg_plugin" / "__init__.py").write_text("from pkg_plugin import loss\n")
    (tmp_path / "pkg_plugin" / "loss.py").write_text(
        "import os\n\nfrom losses import register_loss\n\n\ndef _lazy():\n    from far.helper import kernel\n\n"
        "    return kernel\n\n\n"
        "@register_loss('pkg_nce', paper='-', summary='-')\n"
        "def pkg_nce(scores):\n    return _lazy()(scores)\n")
    (tmp_path / "far").mkdir()
    (tmp_path / "far" / "__init__.py").write_text("")
    (tmp_path / "far" / "helper.py").write_text("import near\n\n" + KERNEL.format(shift="near.SHIFT"))
    (tmp_path / "near.py").write_text("SHIFT = 0.0\n")
    first = _digests(tmp_path, "pkg_plugin", "pkg_nce")
    assert list(first) == ["pkg_plugin"]
    assert _digests(tmp_path, "pkg_plugin", "pkg_nce") == first  # the same code: the same digest

    (tmp_path / "near.py").write_text("SHIFT = 1.0\n")  # two imports away, first imported inside a function
    second = _digests(tmp_path, "pkg_plugin", "pkg_nce")
    assert second != first
    (tmp_path / "far" / "__init__.py").write_text("# edited\n")  # the package above an imported module runs too
    assert _digests(tmp_path, "pkg_plugin", "pkg_nce") not in (first, second)


def test_the_plugin_named_for_a_loss_is_the_module_that_registered_it(tmp_path):
    plugins, results = tmp_path / "plugins", tmp_path / "results"
    plugins.mkdir()
    (plugins / "kern.py").write_text(KERNEL.format(shift="0.0"))
    (plugins / "reg.py").write_text("import kern\n\nfrom losses import register_loss\n\n"
                                    "register_loss('split_nce', paper='-', summary='-')(kern.kernel)\n")
    names = "tiny_domain,reg"
    first = _run(plugins, names, "split_nce", results)
    assert first.returncode == 0 and "[completed]" in first.stdout, first.stderr
    [record] = [json.loads(p.read_text()) for p in results.glob("*.json")]
    assert set(record["software"]["plugins"]) == {"tiny_domain", "reg"}

    [line] = [ln.split("reproduce: ", 1)[1] for ln in first.stdout.splitlines() if "reproduce: " in ln]
    # after the data root where this test's is not the default (harness.run.data_root_prefix)
    assert line.split(" harness run ")[0].split()[-1] in ("HARNESS_PLUGINS=reg,tiny_domain",
                                                          "HARNESS_PLUGINS=tiny_domain,reg")
    env = {k: v for k, v in harness_env().items() if k != "HARNESS_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    pasted = subprocess.run(["bash", "-c", f"{line} --results {results}"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=180)
    assert pasted.returncode == 0 and "[skipped]" in pasted.stdout, pasted.stderr

    (plugins / "kern.py").write_text(KERNEL.format(shift="1.0"))  # the kernel's module is the plugin's code too
    edited = _run(plugins, names, "split_nce", results)
    assert edited.returncode == 0 and "[completed]" in edited.stdout and "[skipped]" not in edited.stdout


def _one_error_line(out: subprocess.CompletedProcess, folder: Path, error: str, line: int) -> None:
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"error: plugin 'bad_plugin' (HARNESS_PLUGINS) failed on import: {error}")
    assert out.stderr.rstrip().endswith(f"(at {folder / 'bad_plugin.py'}:{line})")


@pytest.mark.parametrize(("source", "error", "line"), [
    ("x = 1\ny = x / 0\n", "ZeroDivisionError: division by zero", 2),
    ("x = 1\n\ndef f(:\n    pass\n", "SyntaxError: ", 3),
    ("from losses import HParam, register_loss\n\n\n"
     "@register_loss('bad_sig', paper='-', summary='-', hparams=(HParam('tau', 0.5),))\n"
     "def bad(scores, tau=0.7):\n    return scores.logits.sum()\n",
     "TypeError: loss 'bad_sig': the kernel's defaults {'tau': 0.7} are not its hyper-parameters' {'tau': 0.5}", 4),
    ("import no_such_dependency_of_a_plugin\n", "ModuleNotFoundError: No module named "
     "'no_such_dependency_of_a_plugin'", 1),
])
def test_a_plugin_that_fails_on_import_is_one_error_line_naming_it_and_where(tmp_path, run_main, monkeypatch,
                                                                             plugins_afresh, source, error, line):
    """``harness list losses`` in this process, its plugins loaded afresh: only ``bad_plugin`` (the tiny domain's,
    loaded already, are left registered)."""
    (tmp_path / "bad_plugin.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "bad_plugin", raising=False)
    plugins_afresh("bad_plugin")
    _one_error_line(run_main(harness_main, "list", "losses"), tmp_path, error, line)


def test_a_plugin_that_fails_on_import_is_one_error_line_of_the_command(tmp_path):
    """The same line through the command a user types: the process's exit status and its stderr alone."""
    (tmp_path / "bad_plugin.py").write_text("x = 1\ny = x / 0\n")
    _one_error_line(_harness(tmp_path, "bad_plugin", "list", "losses"), tmp_path,
                    "ZeroDivisionError: division by zero", 2)
