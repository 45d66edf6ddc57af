"""Domain adapters and their registry.

Built-in domains are imported lazily, on first use, so that listing them needs none of the domain
extras. Third-party code plugs in through the ``contrastive_harness.domains`` entry-point group, or by
importing a module named in ``HARNESS_PLUGINS`` (comma-separated): a plugin may register domains
(:func:`register`) and losses (``losses.register_loss``), under names no other code has taken. A plugin's source is
part of the identity of every run of its domain or loss (``harness.version.source_digest``).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from importlib.metadata import entry_points

from domains.base import Domain, did_you_mean
from domains.errors import UserError
from losses.registry import NAME, NAME_RULE, NameRefusedError

_BUILTIN = {
    "graph": "domains.graph",
    "vision": "domains.vision",
    "text": "domains.text",
    "rl": "domains.rl",
}
_REGISTRY: dict[str, type[Domain]] = {}
_plugins_loaded = False


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


def _import_plugin(module: str, named_by: str, load: Callable[[], object]) -> None:
    try:
        load()
    except ImportError as exc:  # a typo in the variable: one line, not a traceback from deep in importlib
        top = module.split(".")[0]  # a plugin in the current folder, where the `harness` script does not look
        here = "; fix or remove it" if getattr(exc, "name", None) != top or not os.path.isfile(f"{top}.py") else \
            f"; ./{top}.py is in the current folder, which is not on the Python path: run with PYTHONPATH=."
        raise UserError(f"{named_by} names '{module}', which cannot be imported ({exc}){here}") from None
    except NameRefusedError as exc:
        raise UserError(f"plugin '{module}' ({named_by}) is refused: {exc}") from None


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    try:
        for module in filter(None, (m.strip() for m in os.environ.get("HARNESS_PLUGINS", "").split(","))):
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
    """The module that defines the domain ``name``; a built-in one's without importing it (its extras may be
    missing, and no plugin takes a built-in name)."""
    return _BUILTIN.get(name) or type(get(name)).__module__


__all__ = ["Domain", "UserError", "available", "get", "provider", "register"]
