"""A record is reused only for the very run that wrote it (seed, config, data and code), never because of its file
name; the harness opens nothing through a link in its folders; a damaged or foreign checkpoint is named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)
from tiny_domain import synthetic_record, write_records

from harness import records, version
from harness.cli import main
from harness.records import load_record_files

TINY = ["run", "--domain", "tiny", "--loss", "infonce", "--set", "epochs=2", "--quiet"]


def _records(results: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}


def _run(results: Path, *extra: str) -> int:
    return main([*TINY, "--results", str(results), *extra])


def test_the_record_names_its_code_and_a_run_of_other_code_is_another_run(tmp_path, monkeypatch, capsys):
    assert _run(tmp_path, "--seeds", "0") == 0
    [(rid, record)] = _records(tmp_path).items()
    software = record["software"]
    # the tiny domain is a plugin: its source is part of the code's identity
    assert software["source_digest"] == version.source_digest("tiny", "infonce") != version.package_digest()
    assert software["git_commit"] and software["git_dirty"] in (True, False) and software["git_commit_date"]
    assert software["contrastive_harness"] == version.package_version() != "0.1.0"
    capsys.readouterr()
    assert _run(tmp_path, "--seeds", "0") == 0
    assert "[skipped]" in capsys.readouterr().out  # the same code: reused
    monkeypatch.setattr("harness.version.package_digest", lambda: "f" * 64)  # as if the sources changed
    assert _run(tmp_path, "--seeds", "0") == 0
    assert "[completed]" in capsys.readouterr().out
    after = _records(tmp_path)
    assert len(after) == 2 and after[rid] == record  # the old record is kept, the new run has its own id
    [new] = [r for k, r in after.items() if k != rid]
    assert new["software"]["package_digest"] == "f" * 64 and new["software"]["plugins"] == software["plugins"]


def test_another_runs_record_copied_under_a_run_id_is_refused_not_skipped(tmp_path, capsys):
    assert _run(tmp_path, "--seeds", "0,1") == 0
    (a, _), (b, record_b) = sorted(_records(tmp_path).items())
    shutil.copy(tmp_path / f"{b}.json", tmp_path / f"{a}.json")  # seed 1's record under seed 0's id
    capsys.readouterr()
    assert _run(tmp_path, "--seeds", "0") == 2
    err = capsys.readouterr().err
    assert f"{a}.json holds a record that is not this run's" in err and "run id, seed" in err
    assert err.count("\n") == 1 and _records(tmp_path)[a] == record_b  # nothing overwritten
    # An edited config is caught the same way, also by a sweep, which lists it as invalid.
    edited = dict(record_b, run_id=a, seed=0, config={**record_b["config"], "epochs": 7})
    (tmp_path / f"{a}.json").write_text(json.dumps(edited))
    assert _run(tmp_path, "--seeds", "0") == 2
    assert "experiment (config)" in capsys.readouterr().err
    assert main(["sweep", "--domains", "tiny", "--losses", "infonce", "--seeds", "0", "--set", "epochs=2",
                 "--results", str(tmp_path), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert "[invalid]" in captured.out and "holds a record that is not this run's" in captured.out
    assert _run(tmp_path, "--seeds", "0", "--force") == 0  # --force replaces it, on purpose


def test_the_log_and_the_work_folder_are_never_opened_through_a_link(tmp_path, capsys):
    assert _run(tmp_path, "--seeds", "0") == 0
    [rid] = _records(tmp_path)
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("precious\n")
    log = tmp_path / f"{rid}.log"
    log.unlink()
    log.symlink_to(outside)
    (tmp_path / f"{rid}.json").unlink()
    capsys.readouterr()
    assert _run(tmp_path, "--seeds", "0") == 2
    assert f"{log} is a symbolic link" in capsys.readouterr().err
    assert outside.read_text() == "precious\n"
    # So is a lock file that is a link (filelock would open it; its target is never truncated, but it is no lock).
    log.unlink()
    lock = tmp_path / ".work" / f"{rid}.lock"
    lock.unlink(missing_ok=True)
    lock.symlink_to(outside)
    assert _run(tmp_path, "--seeds", "0") == 2
    assert f"{lock} is a symbolic link" in capsys.readouterr().err
    lock.unlink()
    assert _run(tmp_path, "--seeds", "0") == 0
    (tmp_path / "board").mkdir()
    (tmp_path / "board" / ".leaderboard.lock").symlink_to(outside)
    assert main(["leaderboard", "--results", str(tmp_path), "--out", str(tmp_path / "board")]) == 2
    assert ".leaderboard.lock is a symbolic link" in capsys.readouterr().err
    assert outside.read_text() == "precious\n"
    # A record that is a link is named by the readers too.
    (tmp_path / "linked.json").symlink_to(outside)
    with pytest.raises(Exception, match="linked.json is a symbolic link"):
        load_record_files(tmp_path)


@pytest.mark.parametrize("force", [True, False])
def test_a_work_folder_that_is_a_link_is_refused_before_anything_is_written_through_it(tmp_path, capsys, force):
    """``--force`` marks its seeds in .work before the first one runs: the link is named before that mark (or any
    other file) is written where it points."""
    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    results.mkdir()
    elsewhere.mkdir()
    (results / ".work").symlink_to(elsewhere, target_is_directory=True)
    assert _run(results, "--seeds", "0,1", *(["--force"] if force else [])) == 2
    assert f"{results / '.work'} is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == [] and [p.name for p in results.iterdir()] == [".work"]


def test_a_force_mark_that_is_a_link_is_refused_before_any_mark_is_written(tmp_path, capsys):
    assert _run(tmp_path, "--seeds", "0,1") == 0
    rid = sorted(_records(tmp_path))[1]
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    (tmp_path / ".work" / f"{rid}.force").symlink_to(outside)
    before = sorted(p.name for p in (tmp_path / ".work").iterdir())
    capsys.readouterr()
    assert _run(tmp_path, "--seeds", "0,1", "--force") == 2
    assert f"{rid}.force is a symbolic link" in capsys.readouterr().err
    assert not outside.exists() and sorted(p.name for p in (tmp_path / ".work").iterdir()) == before

def _leave_a_checkpoint(results: Path, seed: int, monkeypatch) -> Path:
    """A run whose record cannot be written keeps its checkpoint in .work/<run id>/, as a killed run would."""
    with monkeypatch.context() as patch:
        patch.setattr(records, "write_json_atomic", lambda path, data: (_ for _ in ()).throw(OSError(28, "full")))
        assert _run(results, "--seeds", str(seed)) == 2
    [checkpoint] = (results / ".work").glob(f"*-s{seed}/checkpoint.pt")
    return checkpoint


def test_a_damaged_or_foreign_checkpoint_on_resume_names_the_file(tmp_path, monkeypatch, capsys):
    checkpoint = _leave_a_checkpoint(tmp_path, 0, monkeypatch)
    other = _leave_a_checkpoint(tmp_path / "other", 5, monkeypatch)
    for plant, problem in ((lambda: checkpoint.write_bytes(b"\x80\x02garbage"), "cannot be read"),
                           (lambda: shutil.copy(other, checkpoint), "saved by another run")):
        plant()
        capsys.readouterr()
        assert _run(tmp_path, "--seeds", "0", "--resume") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and str(checkpoint) in err and problem in err and "rerun without --resume" in err
    # Without --resume it starts over and completes, and says that it dropped the checkpoint (a rerun after a
    # crash that forgot --resume lost it unseen).
    assert _run(tmp_path, "--seeds", "0") == 0
    dropped = f"starting over without --resume; dropped the checkpoint an interrupted attempt left in " \
              f"{checkpoint.parent}"
    [line] = [line for line in capsys.readouterr().err.splitlines() if "dropped the checkpoint" in line]
    assert line.startswith("warning: ") and dropped in line  # one line, no file and source line of Python's
    assert not checkpoint.parent.exists()


def test_a_resume_without_a_checkpoint_says_it_starts_from_the_beginning(tmp_path, monkeypatch, capsys):
    """An attempt stopped before its first checkpoint leaves its work folder and nothing to go on from: --resume
    then starts over, and says so (it did without a word); a seed that never started says nothing."""
    checkpoint = _leave_a_checkpoint(tmp_path, 0, monkeypatch)
    checkpoint.unlink()
    capsys.readouterr()
    assert _run(tmp_path, "--seeds", "0,1", "--resume") == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "found no checkpoint" in line]
    assert lines == [f"warning: {checkpoint.parent.name}: --resume found no checkpoint in {checkpoint.parent} (the "
                     "earlier attempt stopped before its first one): starting from the beginning"]


def test_a_record_field_never_names_a_path(tmp_path, capsys):
    out = tmp_path / "pages"
    for evil in ("../escaped", "/tmp/escaped", "a/b"):
        folder = tmp_path / f"results{len(evil)}"
        write_records(folder, [{**synthetic_record("infonce", 0, 80.0, domain=evil), "run_id": "planted-s0"}])
        assert main(["leaderboard", "--results", str(folder), "--out", str(out)]) == 2
        assert "is not a plain name" in capsys.readouterr().err
    assert not (tmp_path / "escaped.md").exists() and not Path("/tmp/escaped.md").exists()
    assert not out.exists() or not list(out.glob("*.md"))


def test_a_build_and_a_checkout_name_the_same_version():
    """pip builds the version from pyproject's [tool.setuptools_scm]; a checkout reads it at run time with
    setuptools-scm's defaults. Both must agree (a fallback_version of "0+unknown" once made builds say 1.devN)."""
    import subprocess
    import sys

    if not (version.ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    built = subprocess.run([sys.executable, "-m", "setuptools_scm"], cwd=version.ROOT, capture_output=True,
                           text=True, check=True).stdout.strip().splitlines()[-1]
    runtime = version.package_version()
    # a dirty tree adds the date (".d2026...") to the local part at one moment and not the other: compare the rest
    assert built.split(".d20")[0] == runtime.split(".d20")[0], (built, runtime)


def test_reading_the_commit_never_rewrites_the_users_git_index(tmp_path, monkeypatch):
    """``git status`` refreshes the index of a tree whose files' times changed and rewrites it under
    ``.git/index.lock``; a run killed at that moment left the lock, which blocks the user's git until removed."""
    import os
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("no git")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "a.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    os.utime(repo / "a.py", (1, 1))  # same bytes, other times: the index's stat data is stale
    index = repo / ".git" / "index"
    before = index.stat().st_mtime_ns, index.read_bytes()
    monkeypatch.setattr(version, "ROOT", repo)
    monkeypatch.setattr(version, "package_version", lambda: "0.1.0")  # setuptools-scm is not what is tested
    software = version.software_info()
    assert software["git_dirty"] is False and len(software["git_commit"]) == 40
    assert (index.stat().st_mtime_ns, index.read_bytes()) == before


def test_minus_zero_and_zero_are_one_setting():
    """``--set weight_decay=-0`` or ``loss.tau_plus=-0`` is the run of 0, under its run id (JSON writes -0.0 apart)."""
    from harness.records import run_id
    from harness.run.runner import RunRequest, plan

    def rid(sets: dict[str, str]) -> str:
        return run_id(plan(RunRequest("vision", "dcl", seeds=[0], sets=sets)).specs[0], {})

    assert rid({"weight_decay": "-0", "loss.tau_plus": "-0.0"}) == rid({"weight_decay": "0", "loss.tau_plus": "0"})


def _plugin_software(packages: str, plugin: str) -> dict:
    # what a run of a plugin loss records (harness.version.software_info): the combined digest, and its parts
    return {"source_digest": f"{packages}+{plugin}", "package_digest": packages, "plugins": {"my_losses": plugin},
            "git_commit": "1234567" * 6, "git_dirty": False}


@pytest.mark.parametrize(("packages", "marked"), [("aaaa", False), ("bbbb", True)])
def test_a_plugin_loss_row_is_marked_other_code_only_where_the_project_code_differs(tmp_path, packages, marked):
    """Every plugin-loss row was marked ‖ against its built-in baseline: its source digest takes in the plugin, which
    is the loss itself. Now only the code both rows ran counts: the packages, and plugins both name."""
    built_in = {"source_digest": "aaaa", "git_commit": "1234567" * 6, "git_dirty": False}
    write_records(tmp_path / "results", [
        *(synthetic_record("infonce", s, 80.0 + s, software=built_in) for s in range(3)),
        *(synthetic_record("my_nce", s, 82.0 + s, software=_plugin_software(packages, "p1p1")) for s in range(3))])
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "pages")]) == 0
    [row] = [line for line in (tmp_path / "pages" / "tiny.md").read_text().splitlines()
             if line.startswith("| linear | my_nce")]
    assert ("‖" in row) == marked and "+2.00" in row, row


@pytest.mark.parametrize(("env", "marked"), [("e1e1", False), ("e2e2", True)])
def test_a_row_whose_dataset_code_differs_from_its_baselines_is_marked_other_code(tmp_path, env, marked):
    """A custom environment's module (``software.dataset_code``) is code both rows ran, unlike a plugin loss's own
    module: a plugin loss on one version of it against the built-in baseline on another is other code."""
    built_in = {"source_digest": "aaaa+e1e1", "package_digest": "aaaa", "dataset_code": {"myenv": "e1e1"},
                "git_commit": "1234567" * 6, "git_dirty": False}
    plugin = {**_plugin_software("aaaa", "p1p1"), "dataset_code": {"myenv": env}}
    write_records(tmp_path / "results", [
        *(synthetic_record("infonce", s, 80.0 + s, software=built_in) for s in range(3)),
        *(synthetic_record("my_nce", s, 82.0 + s, software=plugin) for s in range(3))])
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "pages")]) == 0
    [row] = [line for line in (tmp_path / "pages" / "tiny.md").read_text().splitlines()
             if line.startswith("| linear | my_nce")]
    assert ("‖" in row) == marked and "+2.00" in row, row


def test_the_code_label_names_each_plugin_a_clean_commit_does_not():
    """history.md labelled two versions of a plugin, run from one clean commit, alike."""
    one, two = (records.RunRecord.model_validate(synthetic_record("my_nce", 0, 1.0, software=_plugin_software(
        "aaaa", plugin))) for plugin in ("p1p1p1p1", "p2p2p2p2"))
    assert one.code_label() == "1234567 (plugins my_losses p1p1p1p)"
    assert one.code_label() != two.code_label()
    env = records.RunRecord.model_validate(synthetic_record("my_nce", 0, 1.0, software={
        **_plugin_software("aaaa", "p1p1p1p1"), "dataset_code": {"myenv": "e1e1e1e1e1"}}))
    assert env.code_label() == "1234567 (plugins my_losses p1p1p1p) (dataset code myenv e1e1e1e)"
