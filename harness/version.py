"""The code a run ran: the package version, the git commit and dirty flag, and a digest of the package's sources.

*The same code* means the same **source digest**: sha256 over the path and bytes of every ``*.py`` file of the three
packages (``losses``, ``domains``, ``harness``) that a run can execute (:mod:`harness.run_code`: the run command,
the losses, the built-in domains and all they import; not the pages, ``compare``, sweeps, benchmarks or a domain's
published rows), and over the code of the plugins that provide the run's domain and loss (a module outside the
packages: the ``HARNESS_PLUGINS`` module or entry point whose import registered it, else the module that defines it;
its package's files or its own, and the user's own modules that these import: :func:`_plugin_digest`), and
likewise over the code the run's dataset runs (``Domain.dataset_code``: rl's ``gym:<module>:<id>``, a custom
environment's module), whose digests the record names (``software.plugins``; ``software.dataset_code``, the
dataset's, which no ``HARNESS_PLUGINS`` loads: the dataset spec imports it). It is part of every run's identity
(``records.run_hash``): a run of other code is another run, so skipping a completed record and ``--resume`` reuse a
result only for the same sources, and ``harness compare`` never pools two versions of a plugin. The digest is used
rather than the commit because it also holds for a dirty tree, a copy without ``.git`` (the GPU machine runs the
project from a copied tree) and an installed wheel, and because a commit that changes only records, pages,
documentation or the commands around runs changes no result. A run of built-in code hashes the packages' run code alone
(:func:`package_digest`); other plugins loaded beside it change nothing of its identity. Records written before
2026-11-27 hashed every file of the packages: their digests name that code, and a run of today's code is a new run
beside them.

The commit, its date and the dirty flag are recorded beside it for people (``compare --baseline <commit>``,
``harness history``). The version is setuptools-scm's for a checkout (``0.1.devN+g<commit>``, with ``.dYYYYMMDD``
on a dirty tree, until the first release tag): the git facts are read here and setuptools-scm's default schemes
format them (:func:`checkout_version`); an installed copy reports its own version, and a copied tree that is
neither ``0+unknown``. No call here writes the user's git index.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import os
import re
import subprocess
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import domains
from domains import PACKAGES, is_own_code
from domains.files import hash_jsonable
from harness.run_code import import_closure, run_files

ROOT = Path(__file__).resolve().parent.parent

# setuptools-scm's default describe, without its --dirty: `git describe --dirty` refreshes and rewrites the index
# under .git/index.lock even with GIT_OPTIONAL_LOCKS=0 (git 2.39); the dirty flag is read with `git status` instead.
_DESCRIBE = ("describe", "--tags", "--long", "--abbrev=40", "--match", "*[0-9]*")
_DESCRIBED = re.compile(r"^(?P<tag>.+)-(?P<distance>\d+)-g(?P<node>[0-9a-f]+)$")


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


def checkout_version() -> str:
    """The version setuptools-scm's ``get_version`` gives the checkout at ``ROOT``, read without writing its index.

    setuptools-scm runs ``git describe --dirty`` and ``git status`` itself with every ``GIT_*`` variable removed,
    so GIT_OPTIONAL_LOCKS=0 cannot reach them and a run rewrote the user's index (taking .git/index.lock, which
    fails the user's own git at that moment). Here git answers the same questions (``_git``: no optional locks,
    no --dirty) and setuptools-scm's default version and local schemes format the answer, so the string is
    the one ``get_version`` returns (tests/test_version_git.py compares both on tag-less, tagged and dirty
    trees). Raises where setuptools-scm is missing or git is unusable.
    """
    if os.environ.get("SETUPTOOLS_SCM_PRETEND_VERSION"):  # setuptools-scm then answers without running git
        from setuptools_scm import get_version

        return get_version(root=str(ROOT))
    from setuptools_scm import Configuration
    from setuptools_scm.version import format_version, meta

    if _git("rev-parse", "--git-dir") is None:
        raise RuntimeError(f"git cannot read {ROOT}")
    config = Configuration(root=str(ROOT))
    head = _git("rev-parse", "--verify", "--quiet", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    described = _DESCRIBED.match(_git(*_DESCRIBE) or "") if head else None
    if described:
        tag, distance, node = described["tag"], int(described["distance"]), "g" + described["node"]
    else:  # no tag yet: setuptools-scm counts every commit from its fallback 0.0
        tag, node = "0.0", None if head is None else "g" + head
        distance = int(_git("rev-list", "--count", "HEAD") or 0) if head else 0
        dirty = dirty or head is None
    return format_version(meta(tag, distance=distance, dirty=dirty, node=node, config=config))


@functools.cache
def package_version() -> str:
    """The version from git (as setuptools-scm gives it) in a checkout, else the installed version, else
    ``0+unknown``."""
    if _is_checkout():
        try:
            return checkout_version()
        except Exception:  # noqa: BLE001 - no git, no setuptools-scm: fall back to the installed metadata
            pass
    try:
        return version("contrastive-harness")
    except PackageNotFoundError:
        return "0+unknown"


def _update(digest: Any, files: list[tuple[str, Path]]) -> None:
    for label, path in files:
        digest.update(label.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")


def _digest_files(root: Path, paths: list[Path]) -> str:
    """sha256 over the path (relative to ``root``) and bytes of each file, in the order given."""
    digest = hashlib.sha256()
    _update(digest, [(path.relative_to(root).as_posix(), path) for path in paths])
    return digest.hexdigest()


@functools.cache
def package_digest() -> str:
    """sha256 over the relative path and bytes of every ``*.py`` file of the packages a run can execute
    (:func:`harness.run_code.run_files`), in path order."""
    return _digest_files(ROOT, list(run_files(ROOT)))


@functools.cache
def tree_digest() -> str:
    """sha256 over the relative path and bytes of every ``*.py`` file of the packages, in path order: the code of
    a benchmark, whose own modules (``harness/bench.py``, ``losses/benchmark.py``) no run imports."""
    return _digest_files(ROOT, [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))])


def _plugin_source(module: str) -> tuple[str, Path] | None:
    """Where a plugin's code lies, with that module's name: its outermost regular package (the code it imports
    beside itself lies there too), else its own file; None for a module without a file. A namespace package (no
    file) is not one project."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        name = ".".join(parts[:n])
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            return name, Path(file).parent if hasattr(sys.modules[name], "__path__") else Path(file)
    return None


def _module_file(name: str) -> Path | None:
    """The file of the module ``name``: the one this process imported, else the one an import would load, found
    without running any code (a module imported only inside a function is found too); None for a name that is no
    module (an attribute imported from one), a module without a file or one not found."""
    file, search = None, None  # the file and the package's folders of the module found so far
    parts = name.split(".")
    for n in range(1, len(parts) + 1):
        found = sys.modules.get(".".join(parts[:n]))
        if found is not None:
            file, search = getattr(found, "__file__", None), getattr(found, "__path__", None)
            continue
        if not parts[n - 1] or (n > 1 and search is None):
            return None
        try:
            spec = importlib.machinery.PathFinder.find_spec(parts[n - 1], None if n == 1 else list(search))
        except (ImportError, ValueError):
            return None
        if spec is None:
            return None
        file = spec.origin if spec.has_location else None
        search = spec.submodule_search_locations
    return Path(file) if file else None


def _local_imports(modules: dict[str, Path], inside: Path) -> dict[str, Path]:
    """The user's own modules (:func:`domains.is_own_code`: not the standard library, not installed, not
    the project's packages) that ``modules`` (name -> file) import, at any depth, outside the file or folder
    ``inside`` (the plugin's own code): name -> file (:func:`harness.run_code.import_closure`: read from the
    source, so an import inside a function counts too)."""
    def find(name: str) -> Path | None:
        file = None if name.split(".")[0] in PACKAGES else _module_file(name)
        if (file is None or file.suffix != ".py" or not file.is_file() or file.resolve().is_relative_to(inside)
                or not is_own_code(file, ROOT)):
            return None
        return file

    return import_closure(modules, find)


@functools.cache
def _plugin_digest(module: str) -> str:
    """sha256 over the plugin's code: the relative path and bytes of each ``*.py`` file of its package, or of its
    own file (:func:`_plugin_source`), then the name and bytes of each of the user's own modules that these import,
    at any depth (:func:`_local_imports`), in name order. Cached: the code a process runs is what it imported,
    whatever later happens to the files."""
    source = _plugin_source(module)
    if source is None:
        return _digest_files(Path(), [])
    name, path = source
    if path.is_dir():  # relative paths: the digest is the same wherever the package is installed
        root, files = path, sorted(path.rglob("*.py"))
        modules = {".".join([name, *f.relative_to(path).with_suffix("").parts]).removesuffix(".__init__"): f
                   for f in files}
    else:
        root, files, modules = path.parent, [path], {name: path}
    digest = hashlib.sha256()
    _update(digest, [(f.relative_to(root).as_posix(), f) for f in files])
    # Beside its own files (a digest as before where it imports none of the user's other modules), by module
    # name: the same wherever the user keeps them. ':' starts no relative path.
    _update(digest, [(":" + other, file) for other, file in sorted(_local_imports(modules, path.resolve()).items())])
    return digest.hexdigest()


def plugin_digests(domain: str | None = None, loss: str | None = None) -> dict[str, str]:
    """The modules outside the packages that provide ``domain`` and ``loss`` (:func:`domains.provider`,
    :func:`domains.loss_provider`: the plugin whose import registered each) -> the digest of their code
    (:func:`_plugin_digest`). Empty where both are built in."""
    providers = [domains.provider(domain)] if domain else []
    providers += [domains.loss_provider(loss)] if loss else []
    return _digests(providers)


def dataset_code_digests(domain: str | None = None, dataset: str | None = None,
                         plugins: Iterable[str] = ()) -> dict[str, str]:
    """The modules of the user's that ``dataset`` runs (``Domain.dataset_code``: a custom Gymnasium environment's
    module, which the dataset spec imports itself: no plugin) -> the digest of their code, as a plugin's
    (:func:`_plugin_digest`); but those of ``plugins``, which name them already. Empty for any other dataset."""
    modules, named = domains.get(domain).dataset_code(dataset) if domain and dataset else (), set(plugins)
    return _digests([m for m in modules if m not in named])


def _digests(modules: list[str]) -> dict[str, str]:
    return {module: _plugin_digest(module) for module in dict.fromkeys(modules) if module.split(".")[0] not in PACKAGES}


def _user_code(domain: str | None, loss: str | None, dataset: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """The run's plugins and its dataset's code (:func:`plugin_digests`, :func:`dataset_code_digests`)."""
    plugins = plugin_digests(domain, loss)
    return plugins, dataset_code_digests(domain, dataset, plugins)


def source_digest(domain: str | None = None, loss: str | None = None, dataset: str | None = None) -> str:
    """The identity of the code a run of ``domain`` with ``loss`` on ``dataset`` runs: :func:`package_digest`
    where all are built in, else sha256 of it and the digests of the plugins and the dataset's code
    (:func:`_user_code`)."""
    return _code_digest(*_user_code(domain, loss, dataset))


def _code_digest(plugins: dict[str, str], dataset_code: dict[str, str], packages: str | None = None) -> str:
    packages = packages or package_digest()
    # One mapping of both, as when the dataset's code was recorded among the plugins: the same digest.
    user = {**plugins, **dataset_code}
    return hash_jsonable({"packages": packages, "plugins": user}) if user else packages


def software_info(domain: str | None = None, loss: str | None = None, dataset: str | None = None, *,
                  packages: str | None = None) -> dict[str, Any]:
    """What a record (of a run of ``domain`` with ``loss`` on ``dataset``) says of its code: version, git commit,
    its date and dirty flag (None outside a checkout), and the source digest (always); with plugins or the
    dataset's code, also the packages' digest and each plugin's (``plugins``) and each module of the dataset's
    (``dataset_code``), by module. ``packages``: the packages' digest, by default :func:`package_digest` (a
    benchmark gives :func:`tree_digest`: its own modules are no run's)."""
    commit = _git("rev-parse", "HEAD") if _is_checkout() else None
    dirty = None if commit is None else bool(_git("status", "--porcelain", "--untracked-files=no"))
    date = None if commit is None else _git("show", "-s", "--format=%cI", commit)
    packages = packages or package_digest()
    plugins, dataset_code = _user_code(domain, loss, dataset)
    beside = {"package_digest": packages} if plugins or dataset_code else {}
    beside |= {"plugins": plugins} if plugins else {}
    beside |= {"dataset_code": dataset_code} if dataset_code else {}
    return {"contrastive_harness": package_version(), "git_commit": commit, "git_commit_date": date,
            "git_dirty": dirty, "source_digest": _code_digest(plugins, dataset_code, packages), **beside}


def resolve_commit(name: str) -> str | None:
    """The full commit a tag, branch or (abbreviated) commit names in this checkout; None when git knows none."""
    if not _is_checkout():
        return None
    return _git("rev-parse", "--verify", "--quiet", f"{name}^{{commit}}")
