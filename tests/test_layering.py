"""The house's layers, read from the sources: the loss core imports neither the domains nor the harness, the
domains do not import the harness (``domains/base.py`` is their one seam), and no two modules import each other
at module level, directly or round a longer loop (an import cycle); and no import statement reaches a domain's page
text (``domains/<name>/published.py``), which the pages load on demand, outside the run's code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("losses", "domains", "harness")
# What each package may import of the others, anywhere in its code (imports inside functions too).
ALLOWED = {"losses": {"losses"}, "domains": {"losses", "domains"}, "harness": set(PACKAGES)}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _imported(node: ast.AST) -> list[str]:
    """The project modules an import statement names (``from a import b`` names ``a.b`` where that is a module)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module
                 for a in node.names]
    else:
        return []
    return [name for name in names if name.split(".")[0] in PACKAGES]


def _edges(module_level_only: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        # A module importing its own package (``from losses import checks`` in losses/_core.py) is no cycle:
        # Python has the package's __init__ running already.
        edges[name] = {t for node in nodes for t in _imported(node)
                       if t in MODULES and t != name and not name.startswith(t + ".")}
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules round it, or None (depth-first search with colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_sources_are_found():
    assert {"losses", "losses._core", "domains.base", "harness.cli", "harness.sweep"} <= set(MODULES)


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_layers_below_it(package):
    wrong = sorted(f"{name} imports {target}" for name, targets in _edges(module_level_only=False).items()
                   if name.split(".")[0] == package for target in targets
                   if target.split(".")[0] not in ALLOWED[package])
    assert not wrong, wrong


def test_no_import_cycle_at_module_level():
    assert _cycle(_edges(module_level_only=True)) is None


def test_the_cycle_search_finds_a_loop():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _written_imports(node: ast.AST) -> list[str]:
    """The modules an import statement names as written, relative ones with their dots (``from . import b``:
    ``..b``), and each name it takes from one."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        module = "." * node.level + (node.module or "")
        return [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return []


def test_no_import_statement_reaches_the_page_text():
    assert {"domains.graph.published", "domains.rl.published"} <= set(MODULES)
    wrong = sorted(f"{name} imports {written}" for name, path in MODULES.items()
                   for node in ast.walk(ast.parse(path.read_text(), filename=str(path)))
                   for written in _written_imports(node) if "published" in written.split("."))
    assert not wrong, wrong


@pytest.mark.parametrize("statement", ["from domains.graph import published", "import domains.rl.published as p",
                                       "from .published import NOTES", "from . import published"])
def test_the_page_text_check_sees_each_form_of_import(statement):
    assert any("published" in written.split(".") for written in _written_imports(ast.parse(statement).body[0]))
