"""The version a checkout reports is setuptools-scm's, and reading it (or the commit and dirty flag) never
rewrites the user's git index: a rewrite takes .git/index.lock, which fails the user's own git at that moment
and is left behind by a run killed then."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import version

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="no git")
setuptools_scm = pytest.importorskip("setuptools_scm")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A one-commit repository that ``harness.version`` reads as its checkout."""
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text("x = 1\n")
    _commit(root, "a")
    monkeypatch.setattr(version, "ROOT", root)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # the dirty suffix's date, the same for both readers
    monkeypatch.delenv("SETUPTOOLS_SCM_PRETEND_VERSION", raising=False)
    version.package_version.cache_clear()
    yield root
    version.package_version.cache_clear()  # later tests read the real checkout's version again


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args], check=True,
                   capture_output=True)


def _commit(root: Path, message: str) -> None:
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", message)


def _index(root: Path) -> tuple[int, bytes]:
    index = root / ".git" / "index"
    return index.stat().st_mtime_ns, index.read_bytes()


def _stale(root: Path) -> None:
    """Same bytes, other times: git status or describe --dirty would refresh the index's stat data and write it."""
    os.utime(root / "a.py", (1, 1))


@pytest.mark.parametrize("tagged", [False, True], ids=["tag-less", "tagged"])
def test_reading_the_version_never_rewrites_the_index(repo, tagged):
    if tagged:  # setuptools-scm's describe --dirty path, which rewrites the index even with GIT_OPTIONAL_LOCKS=0
        _git(repo, "tag", "v1.2")
    _stale(repo)
    before = _index(repo)
    expected = "1.2" if tagged else "0.1.dev1+g"
    assert version.package_version().startswith(expected)
    assert version.software_info()["git_dirty"] is False
    assert _index(repo) == before and not (repo / ".git" / "index.lock").exists()


def _states(root: Path) -> Iterator[str]:
    """The checkout in each state whose version setuptools-scm formats differently."""
    yield "one commit, no tag"
    (root / "a.py").write_text("x = 2\n")
    yield "dirty, no tag"
    _git(root, "add", "a.py")
    yield "staged only, no tag"
    _commit(root, "b")
    yield "two commits, no tag"
    _git(root, "tag", "v1.2")
    yield "on a tag"
    (root / "b.py").write_text("y = 1\n")
    yield "untracked file on a tag (not dirty)"
    (root / "a.py").write_text("x = 3\n")
    yield "dirty on a tag"
    _commit(root, "c")
    (root / "a.py").write_text("x = 4\n")
    _commit(root, "d")
    yield "two commits past a tag"
    _git(root, "tag", "-a", "v2.0rc1", "-m", "rc")
    (root / "a.py").write_text("x = 5\n")
    yield "dirty on an annotated pre-release tag"
    _commit(root, "e")
    _git(root, "tag", "notaversion")
    yield "past a pre-release, a newer tag without a digit ignored"


def test_the_version_is_setuptools_scms_in_every_state(repo):
    for state in _states(repo):
        version.package_version.cache_clear()
        ours = version.package_version()
        theirs = setuptools_scm.get_version(root=str(repo))  # after ours: it may rewrite the index
        assert ours == theirs, state


def test_a_pretended_version_is_reported_as_setuptools_scm_reports_it(repo, monkeypatch):
    monkeypatch.setenv("SETUPTOOLS_SCM_PRETEND_VERSION", "3.4")
    assert version.package_version() == "3.4" == setuptools_scm.get_version(root=str(repo))
