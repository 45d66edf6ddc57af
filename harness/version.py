"""The code a run ran: the package version, the git commit and dirty flag, and a digest of the package's sources.

*The same code* means the same **source digest**: sha256 over the path and bytes of every ``*.py`` file of the
three packages (``losses``, ``domains``, ``harness``). It is part of every run's identity (``records.run_hash``):
a run of other code is another run, so skipping a completed record and ``--resume`` reuse a result only for the
same sources. The digest is used rather than the commit because it also holds for a dirty tree, a copy without
``.git`` (the GPU machine runs the project from a copied tree) and an installed wheel, and because a commit that
changes only records, pages or documentation changes no result. Domains loaded from plugins are not covered.

The commit, its date and the dirty flag are recorded beside it for people (``compare --baseline <commit>``,
``harness history``). The version comes from git through setuptools-scm where the code is a checkout
(``0.1.devN+g<commit>``, with ``.dYYYYMMDD`` on a dirty tree, until the first release tag); an installed copy
reports its own version, and a copied tree that is neither ``0+unknown``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("losses", "domains", "harness")


def _git(*args: str) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: git status would otherwise refresh and rewrite the user's index under .git/index.lock,
    # a lock that a run killed at that moment would leave behind, blocking the user's own git.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _is_checkout() -> bool:
    return (ROOT / ".git").exists()


@functools.cache
def package_version() -> str:
    """The version from git (setuptools-scm) in a checkout, else the installed version, else ``0+unknown``."""
    if _is_checkout():
        try:
            from setuptools_scm import get_version

            return get_version(root=str(ROOT))
        except Exception:  # noqa: BLE001 - no git, no setuptools-scm: fall back to the installed metadata
            pass
    try:
        return version("contrastive-harness")
    except PackageNotFoundError:
        return "0+unknown"


@functools.cache
def source_digest() -> str:
    """sha256 over the relative path and bytes of every ``*.py`` file of the packages, in path order."""
    digest = hashlib.sha256()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def software_info() -> dict[str, Any]:
    """What a record says of its code: version, git commit, its date and dirty flag (None outside a checkout),
    and the source digest (always)."""
    commit = _git("rev-parse", "HEAD") if _is_checkout() else None
    dirty = None if commit is None else bool(_git("status", "--porcelain", "--untracked-files=no"))
    date = None if commit is None else _git("show", "-s", "--format=%cI", commit)
    return {"contrastive_harness": package_version(), "git_commit": commit, "git_commit_date": date,
            "git_dirty": dirty, "source_digest": source_digest()}


def resolve_commit(name: str) -> str | None:
    """The full commit a tag, branch or (abbreviated) commit names in this checkout; None when git knows none."""
    if not _is_checkout():
        return None
    return _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
