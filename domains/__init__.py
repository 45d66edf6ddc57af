"""Domain adapters and their registry.

Built-in domains are imported lazily, on first use, so that listing them needs none of the domain
extras. Third-party domains register through the ``contrastive_harness.domains`` entry-point group,
or by importing a module named in ``HARNESS_PLUGINS`` (comma-separated) that calls :func:`register`.
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from domains.base import Domain, did_you_mean
from domains.errors import UserError

_BUILTIN = {
    "graph": "domains.graph",
    "vision": "domains.vision",
    "text": "domains.text",
    "rl": "domains.rl",
}
_REGISTRY: dict[str, type[Domain]] = {}
_plugins_loaded = False


def register(cls: type[Domain]) -> type[Domain]:
    """Class decorator: make a :class:`Domain` subclass available under ``cls.name``."""
    _REGISTRY[cls.name] = cls
    return cls


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in filter(None, (m.strip() for m in os.environ.get("HARNESS_PLUGINS", "").split(","))):
        try:
            importlib.import_module(module)
        except ImportError as exc:  # a typo in the variable: one line, not a traceback from deep in importlib
            _plugins_loaded = False
            raise UserError(f"HARNESS_PLUGINS names '{module}', which cannot be imported ({exc}); fix or unset "
                            "the variable") from None
    for ep in entry_points(group="contrastive_harness.domains"):
        ep.load()


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


__all__ = ["Domain", "UserError", "available", "get", "register"]
