"""The code a run can execute: the modules of the project's packages that a run's entry points import, at any
depth, found by reading their import statements.

A run's identity names its code (:func:`harness.version.source_digest`). Hashing every file of the packages made a
change to a page writer, the comparison gate or a domain's published rows a new run of every experiment: a
campaign's seeds from two sessions could never share a row, though the code that trained them was the same. The
digest covers instead the files of :func:`run_files`:

- the roots: every module of ``harness/run/`` (the ``run`` command, its runner and what it writes), the
  ``losses`` package and each built-in domain package (:data:`RUN_ROOTS`);
- every module of the packages they import, at any depth: ``import a.b``, ``from a import b`` (``a.b`` where
  that is a module), relative imports, imports inside functions, and the packages above each (importing ``a.b``
  runs ``a/__init__.py``).

Outside it: the CLI's other commands, the pages, ``compare``, sweeps and benchmarks, and a module that only
``importlib`` loads by name, as the pages load a domain's published rows and notes (``domains/<name>/
published.py``): text for pages, not code. What the CLI or a sweep decides for a run reaches it as its config,
which is part of its identity too.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable, Iterable
from pathlib import Path

from domains import PACKAGES

# The entry points of a run; a folder stands for every module in it (harness/run: each file is the run's).
RUN_ROOTS = ("harness/run", "losses", "domains.graph", "domains.vision", "domains.text", "domains.rl")


def module_file(root: Path, name: str) -> Path | None:
    """The file of the module ``name`` under ``root`` (a package's ``__init__.py``), or None if it is none."""
    path = root.joinpath(*name.split("."))
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").is_file() else None


def imported_names(path: Path, module: str) -> set[str]:
    """Every name an import statement of the file could load: ``a.b`` for ``import a.b``, ``a`` and ``a.x`` for
    ``from a import x`` (``a.x`` counts where it is a module), relative ones resolved against ``module``."""
    package = (module if path.name == "__init__.py" else module.rpartition(".")[0]).split(".")
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def root_modules(root: Path) -> list[str]:
    """The module names of :data:`RUN_ROOTS`: a folder's every module, a package's own name."""
    names = []
    for entry in RUN_ROOTS:
        if "/" in entry:
            names += [".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
                      for p in sorted((root / entry).rglob("*.py"))]
        else:
            names.append(entry)
    return names


def with_packages(names: Iterable[str]) -> set[str]:
    """Each name and the packages above it: importing ``a.b`` runs ``a/__init__.py``."""
    return {".".join(parts[:k]) for parts in (n.split(".") for n in names) for k in range(1, len(parts) + 1)}


def import_closure(modules: dict[str, Path], find: Callable[[str], Path | None]) -> dict[str, Path]:
    """The modules that ``modules`` (name -> file) import, at any depth, read from their source
    (:func:`imported_names`), with the packages above each name (:func:`with_packages`): name -> file, outside
    ``modules``. ``find`` is the caller's filter: a name's file, or None for a name not to follow (not a module, or
    not code the caller hashes); a name is asked once. A file that is not Python source is followed no further (a
    compiled module: its bytes alone)."""
    found: dict[str, Path] = {}
    seen = set(modules)
    todo = sorted(modules.items())
    while todo:
        name, path = todo.pop()
        try:
            names = imported_names(path, name)
        except (OSError, SyntaxError, ValueError):
            continue
        for imported in sorted(with_packages(names) - seen):
            seen.add(imported)
            file = find(imported)
            if file is not None:
                found[imported] = file
                todo.append((imported, file))
    return found


@functools.cache
def run_files(root: Path) -> tuple[Path, ...]:
    """The files of every module a run can execute (the module docstring), in path order."""
    def find(name: str) -> Path | None:
        return module_file(root, name) if name.split(".")[0] in PACKAGES else None

    roots = {name: file for name in with_packages(root_modules(root)) if (file := find(name)) is not None}
    return tuple(sorted({**roots, **import_closure(roots, find)}.values()))
