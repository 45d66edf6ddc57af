"""Code plugged in from outside the repository (``HARNESS_PLUGINS``, entry points): a user's own loss runs end to end,
its source is part of every run's identity (a changed plugin is another run), and it takes no name already taken.
Built-in code keeps the identity it had before plugins counted, so committed records keep theirs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tiny_domain
from support import run_code_digest
from tiny_domain import REPO, harness_env, subprocess_data_root

import domains
from harness import version
from harness.cli import main
from losses import registry as loss_registry

LOSS = "tiny_weighted_nce"  # tests/tiny_loss.py's


def _harness(plugins: Path, *args: str, names: str = "tiny_domain,tiny_loss") -> subprocess.CompletedProcess:
    """``python -m harness ARGS`` with the plugin modules in the folder ``plugins`` (ahead of tests/) plugged in."""
    env = {**harness_env(), "HARNESS_PLUGINS": names}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)


@pytest.fixture
def plugged_in(monkeypatch, plugins_afresh) -> Iterator[Callable[[Path, str], None]]:
    """``plugged_in(folder, NAMES)``: the next command called in this process loads the plugin modules ``NAMES`` (in
    ``folder``, ahead of the path) afresh, as a fresh process would; after the test, the losses they registered and
    the modules this process had not imported before are gone (another test's plugin of the same name is its own)."""
    before = set(sys.modules)
    monkeypatch.setattr(loss_registry, "_REGISTRY", dict(loss_registry._REGISTRY))
    monkeypatch.setitem(domains._LOADED_BY, "loss", dict(domains._LOADED_BY["loss"]))
    names: list[str] = []

    def load(folder: Path, modules: str) -> None:
        monkeypatch.syspath_prepend(str(folder))
        names.extend(modules.split(","))
        plugins_afresh(modules)

    yield load
    for name in set(names) - before:
        sys.modules.pop(name, None)


def _records(results: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def test_without_plugins_the_code_identity_is_the_packages_digest():
    env = {k: v for k, v in harness_env().items() if k != "HARNESS_PLUGINS"}
    code = "import json, harness.version as v; print(json.dumps(v.software_info()))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    software = json.loads(out.stdout)
    assert software["source_digest"] == run_code_digest(REPO)
    assert "plugins" not in software and "package_digest" not in software  # a record as it was written before


def test_a_plugin_loss_runs_in_worker_processes_and_its_source_is_part_of_the_run_id(tmp_path, run_main, plugged_in):
    """The listing through ``main`` in this process (:func:`plugged_in`); the sweep's one worker process runs both
    seeds (a second worker loads the plugin alike, for seconds of imports)."""
    plugins, results = tmp_path / "plugins", tmp_path / "results"
    plugins.mkdir()
    shutil.copy(REPO / "tests" / "tiny_loss.py", plugins / "tiny_loss.py")
    plugged_in(plugins, "tiny_domain,tiny_loss")
    listed = run_main(main, "list", "losses")
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith(LOSS) and "tiny" in line.split("domains:")[1] for line in listed.stdout.splitlines())

    swept = _harness(plugins, "sweep", "--domains", "tiny", "--losses", LOSS, "--seeds", "0,1", "--workers", "1",
                     "--set", "epochs=1", "--tracker", "none", "--results", str(results))
    assert swept.returncode == 0, swept.stderr
    first = _records(results)
    assert len(first) == 2 and all(r["status"] == "completed" and r["loss"] == LOSS for r in first.values())
    software = next(iter(first.values()))["software"]
    assert set(software["plugins"]) == {"tiny_domain", "tiny_loss"}
    assert software["package_digest"] == run_code_digest(REPO) != software["source_digest"]

    with (plugins / "tiny_loss.py").open("a") as plugin:  # any change to its source is other code
        plugin.write("# edited\n")
    run = ["run", "--domain", "tiny", "--loss", LOSS, "--seeds", "0", "--set", "epochs=1", "--quiet", "--tracker",
           "none", "--results", str(results)]
    rerun = _harness(plugins, *run)
    assert rerun.returncode == 0, rerun.stderr
    assert "[completed]" in rerun.stdout and "[skipped]" not in rerun.stdout
    after = _records(results)
    [(new_id, new)] = [(k, r) for k, r in after.items() if k not in first]
    assert {k: after[k] for k in first} == first  # the other code's records are kept as they were
    assert new_id.endswith("-s0") and new["software"]["source_digest"] != software["source_digest"]
    assert new["software"]["plugins"]["tiny_domain"] == software["plugins"]["tiny_domain"]
    assert new["software"]["plugins"]["tiny_loss"] != software["plugins"]["tiny_loss"]

    # The printed line that reproduces the run names its plugins, and run as printed it is that run again: the
    # same code again, reused
    [line] = [ln.split("reproduce: ", 1)[1] for ln in rerun.stdout.splitlines() if "reproduce: " in ln]
    # after the data root where this test's is not the default (harness.run.data_root_prefix)
    assert line.split(" harness run ")[0].split()[-1] == "HARNESS_PLUGINS=tiny_domain,tiny_loss"
    env = {k: v for k, v in harness_env().items() if k != "HARNESS_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    pasted = subprocess.run(["bash", "-c", f"{line} --results {results}"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=180)
    assert pasted.returncode == 0 and "[skipped]" in pasted.stdout and new_id in pasted.stdout, pasted.stderr


def _pasted(plugins: Path, line: str) -> subprocess.CompletedProcess:
    """``line`` run in a new shell, as a user pastes it: without HARNESS_PLUGINS in the environment, with the plugin
    modules on the path and this interpreter first on PATH."""
    env = {k: v for k, v in harness_env().items() if k != "HARNESS_PLUGINS"}
    env["PYTHONPATH"] = os.pathsep.join([str(plugins), env["PYTHONPATH"]])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def test_the_printed_resume_and_dry_run_commands_name_the_plugins_and_run_pasted_in_a_new_shell(tmp_path, run_main,
                                                                                                plugged_in):
    """The dry run through ``main`` in this process (:func:`plugged_in`): what it prints is a plan."""
    plugins, results = tmp_path / "plugins", tmp_path / "results"
    plugins.mkdir()
    shutil.copy(REPO / "tests" / "tiny_loss.py", plugins / "tiny_loss.py")
    run = ["run", "--domain", "tiny", "--loss", LOSS, "--seeds", "0", "--set", "epochs=6", "--set", "sleep_s=0.4",
           "--quiet", "--tracker", "none", "--results", str(results)]
    stopped = _harness(plugins, *run, "--time-limit", "1s")
    assert stopped.returncode == 75, stopped.stderr
    hint = stopped.stderr.strip().splitlines()[-1]
    # after the data root, as every printed command (harness.run.data_root_prefix)
    assert f"at a checkpoint; continue with: {subprocess_data_root()}HARNESS_PLUGINS=tiny_domain,tiny_loss " in hint, \
        hint
    command = hint.split("continue with: ", 1)[1]
    assert " --time-limit 1s " in command
    resumed = _pasted(plugins, command.replace(" --time-limit 1s ", " "))  # the rest of the run at once
    assert resumed.returncode == 0 and "[completed]" in resumed.stdout, resumed.stderr
    [record] = _records(results).values()
    assert record["status"] == "completed" and record["loss"] == LOSS

    sweep = ["sweep", "--domains", "tiny", "--losses", LOSS, "--seeds", "1", "--set", "epochs=1", "--tracker", "none",
             "--results", str(results)]
    plugged_in(plugins, "tiny_domain,tiny_loss")
    dry = run_main(main, *sweep, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    [job] = [line for line in dry.stdout.splitlines() if " run --domain tiny " in line]
    assert job.startswith(f"{subprocess_data_root()}HARNESS_PLUGINS=tiny_domain,tiny_loss harness run "), job
    pasted = _pasted(plugins, job.replace("harness run", f"{sys.executable} -m harness run", 1))
    assert pasted.returncode == 0 and "[completed]" in pasted.stdout, pasted.stderr


@pytest.mark.parametrize(("body", "returned", "fresh"), [
    ("scores.logits.logsumexp(1)", "a tensor of shape (", True),  # the command a user types, in a subprocess
    ("scores.logits.logsumexp(1).mean().item()", "a float (", False),
    ("scores.logits.logsumexp(1).mean().detach()", "a tensor that does not require grad", False),
])
def test_a_plugin_kernel_that_returns_no_loss_fails_its_run_in_one_line_naming_the_loss(tmp_path, run_main, plugged_in,
                                                                                         body, returned, fresh):
    """The others through ``main`` in this process (:func:`plugged_in`)."""
    (tmp_path / "bad_kernel.py").write_text(
        "from losses import register_loss\n\n\n"
        "@register_loss('bad_kernel', paper='-', summary='-')\n"
        f"def bad_kernel(scores):\n    return {body}\n")
    run = ["run", "--domain", "tiny", "--loss", "bad_kernel", "--seeds", "0", "--set", "epochs=1", "--quiet",
           "--tracker", "none", "--results", str(tmp_path / "results")]
    if fresh:
        out = _harness(tmp_path, *run, names="tiny_domain,bad_kernel")
    else:
        plugged_in(tmp_path, "tiny_domain,bad_kernel")
        out = run_main(main, *run)
    assert out.returncode == 2, out.stderr  # the user's code to fix, not a crash
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"error: loss 'bad_kernel' (bad_kernel) returned {returned}"), out.stderr
    assert "a loss kernel must return a 0-dim floating-point torch Tensor" in out.stderr


def _plugin(folder: Path, module: str, decorator: str, kernel: str) -> None:
    """The plugin ``module`` in ``folder``: one loss, ``@decorator`` over ``kernel``'s def."""
    (folder / f"{module}.py").write_text(f"from losses import HParam, register_loss\n\n\n@{decorator}\n{kernel}\n")


@pytest.fixture
def listed_with(tmp_path, run_main, monkeypatch, plugins_afresh):
    """``listed_with(module, decorator, kernel)``: ``harness list losses`` with that plugin (:func:`_plugin`) in
    ``tmp_path``, through ``main`` in this process (the command's own refusal is the built-in-name test's), as a
    process that has loaded no plugin yet; a refused plugin registers nothing (checked)."""

    def listed(module: str, decorator: str, kernel: str) -> subprocess.CompletedProcess:
        _plugin(tmp_path, module, decorator, kernel)
        monkeypatch.syspath_prepend(str(tmp_path))
        plugins_afresh(module)
        before = dict(loss_registry._REGISTRY)
        out = run_main(main, "list", "losses")
        assert loss_registry._REGISTRY == before and module not in sys.modules
        return out

    return listed


def test_a_plugin_loss_under_a_builtin_name_is_refused_in_one_line(tmp_path):
    _plugin(tmp_path, "my_dcl", "register_loss('dcl', paper='-', summary='not the paper\\'s dcl')",
            "def dcl(scores):\n    return scores.logits.sum()")
    out = _harness(tmp_path, "list", "losses", names="my_dcl")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith("error: plugin 'my_dcl' (HARNESS_PLUGINS) is refused: loss 'dcl' of my_dcl is "
                                 "taken by losses.dcl")


@pytest.mark.parametrize("name", ["my,loss", "../x", "a b", "new\nline", "", "-x"])
def test_a_plugin_loss_or_domain_under_no_plain_name_is_refused(listed_with, name):
    # A sweep splits --losses and --domains at commas; run ids and page names carry the name
    out = listed_with("odd_names", f"register_loss({name!r}, paper='-', summary='-')",
                      "def odd(scores):\n    return scores.logits.sum()")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"error: plugin 'odd_names' (HARNESS_PLUGINS) is refused: loss {name!r} of "
                                 "odd_names is no plain name")

    class Odd(tiny_domain.TinyDomain):
        pass

    Odd.name = name
    before = dict(domains._REGISTRY)
    with pytest.raises(domains.UserError, match="is no plain name"):
        domains.register(Odd)
    assert domains._REGISTRY == before


@pytest.mark.parametrize("name", ["graph", "tiny"])  # a built-in domain not imported yet; a plugged-in one
def test_a_domain_under_a_taken_name_is_refused(name):
    before = dict(domains._REGISTRY)

    class Impostor(tiny_domain.TinyDomain):
        pass

    Impostor.name = name
    with pytest.raises(domains.UserError, match=f"domain .{name}. of {Impostor.__module__} is taken by "):
        domains.register(Impostor)
    assert domains._REGISTRY == before


def test_only_the_plugins_that_provide_a_runs_domain_or_loss_are_part_of_its_identity():
    # tiny_domain is loaded in this process; the built-in domain and loss stay the packages' alone
    assert version.source_digest("graph", "dcl") == version.package_digest() == run_code_digest(REPO)
    assert list(version.plugin_digests("tiny", "dcl")) == ["tiny_domain"]
    assert version.source_digest("tiny", "dcl") not in (version.package_digest(), version.source_digest("graph", "dcl"))


def test_a_plugin_loss_whose_default_is_outside_its_range_is_refused_before_it_is_listed(listed_with):
    out = listed_with("margin_loss", "register_loss('margin_nce', paper='-', summary='-', "
                      "hparams=(HParam('margin', 5.0, low=0, high=2),))",
                      "def margin_nce(scores, margin=5.0):\n    return scores.logits.sum() * margin")
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr  # one line
    assert ("loss 'margin_nce': the default of its hyper-parameter margin is not an allowed value (margin must be a "
            "number in [0, 2], got 5)") in out.stderr, out.stderr


LONG = "x" * 240  # past records.MAX_NAME (236): no record could hold it


@pytest.mark.parametrize(("kind", "args", "shown"), [
    ("domain", ["--domain", "d" + LONG, "--loss", "infonce"], repr(("d" + LONG)[:40]) + "... is 241 characters long"),
    ("method", ["--domain", "oddtiny", "--method", "two\nlines", "--loss", "infonce"],
     "'two\\nlines' is not a plain name"),
    ("loss", ["--domain", "tiny", "--loss", "l" + LONG], repr(("l" + LONG)[:40]) + "... is 241 characters long"),
])
def test_a_plugin_name_no_record_could_hold_is_refused_before_training(tmp_path, kind, args, shown):
    """Registration checks a plugin domain's and loss's characters, not their length, and a domain's method names
    not at all: the record's validator (records.name_problem) refused such a name only after training (the loss,
    written whole, was cut out of its run id). Each is refused before anything runs, naming it."""
    (tmp_path / "odd_plugin.py").write_text(
        "import domains, tiny_domain\nfrom losses import register_loss\n\n\n"
        f"@domains.register\nclass Long(tiny_domain.TinyDomain):\n    name = {'d' + LONG!r}\n\n\n"
        "@domains.register\nclass OddMethod(tiny_domain.TinyDomain):\n    name = 'oddtiny'\n"
        "    methods = {**tiny_domain.TinyDomain.methods, 'two\\nlines': 'a method of two lines'}\n\n\n"
        f"@register_loss({'l' + LONG!r}, paper='-', summary='-')\n"
        "def long_loss(scores):\n    return scores.logits.logsumexp(1).mean() - scores.logits.mean()\n")
    results = tmp_path / "results"
    out = _harness(tmp_path, "run", *args, "--seeds", "0", "--set", "epochs=1", "--results", str(results),
                   names="tiny_domain,odd_plugin")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"error: the {kind} name {shown}"), out.stderr
    assert not results.exists()  # refused before any training, record or log
