"""Domain adapters and their registry.

Built-in domains are imported lazily, on first use, so that listing them needs none of the domain
extras. Third-party code plugs in through the ``contrastive_harness.domains`` entry-point group, or by
importing a module named in ``HARNESS_PLUGINS`` (comma-separated): a plugin may register domains
(:func:`register`) and losses (``losses.register_loss``), under names no other code has taken. A plugin's source is
part of the identity of every run of its domain or loss (``harness.version.source_digest``).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from domains.base import Domain, did_you_mean
from domains.errors import UserError
from losses.registry import NAME, NAME_RULE, NameRefusedError
from losses.registry import available as _loss_names
from losses.registry import spec as _loss_spec

_BUILTIN = {
    "graph": "domains.graph",
    "vision": "domains.vision",
    "text": "domains.text",
    "rl": "domains.rl",
}
PACKAGES = ("losses", "domains", "harness")  # this project's code, never a user's own
_REGISTRY: dict[str, type[Domain]] = {}
_plugins_loaded = False
# The plugin (a HARNESS_PLUGINS module, an entry point's module) whose import registered each domain and loss: the
# module that a run of it needs imported, whichever module defines its class or kernel (provider, loss_provider).
_LOADED_BY: dict[str, dict[str, str]] = {"domain": {}, "loss": {}}


def register(cls: type[Domain]) -> type[Domain]:
    """Class decorator: make a :class:`Domain` subclass available under ``cls.name``. UserError for a name that
    another class has, or that a built-in domain has (even before it is imported): a plugin replaces no domain; and
    for a name that is no plain name (a page, run ids and ``--domains a,b`` carry it)."""
    if not NAME.fullmatch(cls.name):
        raise UserError(f"domain {cls.name!r} of {cls.__module__} is no plain name ({NAME_RULE})")
    taken, builtin = _REGISTRY.get(cls.name), _BUILTIN.get(cls.name)
    if (taken is not None and taken is not cls) or (builtin is not None and cls.__module__ != builtin):
        owner = taken.__module__ if taken is not None else builtin
        raise UserError(f"domain '{cls.name}' of {cls.__module__} is taken by {owner}; a plugin's domain needs a "
                        "name of its own")
    _REGISTRY[cls.name] = cls
    return cls


@functools.cache
def _installed_roots() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    found = [paths.get("stdlib"), paths.get("platstdlib"), sys.prefix, sys.base_prefix, sys.exec_prefix,
             sys.base_exec_prefix]
    return tuple(dict.fromkeys(Path(p).resolve() for p in found if p))


def is_own_code(path: Path, root: Path) -> bool:
    """Whether the file ``path`` is the user's own code rather than installed or the project's: not in the standard
    library, not under a ``site-packages`` or ``dist-packages`` folder or the interpreter's prefixes
    (``sys.prefix``, ``sys.base_prefix``: a virtual environment, the Python installation), not in the packages
    (:data:`PACKAGES`) of the project at ``root``."""
    path = Path(path).resolve()
    if {"site-packages", "dist-packages"} & set(path.parts):
        return False
    project = [Path(root).resolve() / package for package in PACKAGES]
    return not any(path.is_relative_to(other) for other in (*_installed_roots(), *project))


def _where(exc: BaseException) -> str:
    """``file:line`` where ``exc`` arose: a syntax error's own place; else the innermost frame in the user's own
    code (not the project's packages, not importlib, not the standard library or an installed package), the
    innermost frame where there is none."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    root = Path(__file__).resolve().parent.parent
    own = [f for f in frames if is_own_code(Path(f.filename), root)]
    frame = (own or frames or [None])[-1]
    return "" if frame is None else f"{frame.filename}:{frame.lineno}"


def _import_plugin(module: str, named_by: str, load: Callable[[], object]) -> None:
    """Import the plugin ``module`` (``load``), noting it as the plugin of each domain and loss its import
    registers; any error it raises as one UserError line that names it, the error and where it arose."""
    domains_before, losses_before = set(_REGISTRY), set(_loss_names(objective=None))
    try:
        load()
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise _failed(module, named_by, exc) from None  # a module that the plugin imports is missing
        # a typo in the variable, or a plugin in the current folder, where the `harness` script does not look: one
        # line, not a traceback from deep in importlib
        top = module.split(".")[0]
        here = f"; ./{top}.py is in the current folder, which is not on the Python path: run with PYTHONPATH=." \
            if os.path.isfile(f"{top}.py") else "; fix or remove it"
        raise UserError(f"{named_by} names '{module}', which cannot be imported ({exc}){here}") from None
    except NameRefusedError as exc:
        raise UserError(f"plugin '{module}' ({named_by}) is refused: {exc}") from None
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - a plugin's own mistake (a SyntaxError too): one line, not a traceback
        raise _failed(module, named_by, exc) from None
    for name in set(_REGISTRY) - domains_before - set(_BUILTIN):  # (a plugin may import a built-in domain)
        _LOADED_BY["domain"].setdefault(name, module)
    for name in set(_loss_names(objective=None)) - losses_before:  # (the built-in ones: all with losses)
        _LOADED_BY["loss"].setdefault(name, module)


def _failed(module: str, named_by: str, exc: Exception) -> UserError:
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    where = _where(exc)
    return UserError(f"plugin '{module}' ({named_by}) failed on import: {type(exc).__name__}: {message}"
                     + (f" (at {where})" if where else ""))


def plugin_modules() -> list[str]:
    """The plugin modules ``HARNESS_PLUGINS`` names in this process (comma-separated), in order, once each."""
    return list(dict.fromkeys(filter(None, (m.strip() for m in os.environ.get("HARNESS_PLUGINS", "").split(",")))))


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    try:
        for module in plugin_modules():
            _import_plugin(module, "HARNESS_PLUGINS", lambda module=module: importlib.import_module(module))
        for ep in entry_points(group="contrastive_harness.domains"):
            _import_plugin(ep.module, f"entry point '{ep.name}'", ep.load)
    except UserError:
        _plugins_loaded = False  # the next call names the plugin again, rather than go on without it
        raise


def available() -> list[str]:
    """Names of every domain, built-in and plugged in."""
    _load_plugins()
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def get(name: str) -> Domain:
    """An instance of the domain called ``name``."""
    _load_plugins()
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise UserError(f"unknown domain '{name}'{did_you_mean(name, available())} Available: {', '.join(available())}")
    return _REGISTRY[name]()


def provider(name: str) -> str:
    """The module that provides the domain ``name``: a built-in one's without importing it (its extras may be
    missing, and no plugin takes a built-in name); the plugin whose import registered it (``HARNESS_PLUGINS``, an
    entry point), which may define the class in another module; else the module that defines its class."""
    if name in _BUILTIN:
        return _BUILTIN[name]
    cls = type(get(name))
    return _LOADED_BY["domain"].get(name) or cls.__module__


def loss_provider(name: str) -> str:
    """The module that provides the loss ``name``: the plugin whose import registered it (``HARNESS_PLUGINS``, an
    entry point; its kernel may be defined in another module), else the module that defines its kernel."""
    _load_plugins()
    return _LOADED_BY["loss"].get(name) or _loss_spec(name).fn.__module__


__all__ = ["Domain", "UserError", "available", "get", "loss_provider", "provider", "register"]
