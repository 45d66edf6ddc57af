"""Python imports this at startup where this folder is on PYTHONPATH (only the subprocesses of the tests that put it
there): the process sends itself SIGINT, as Ctrl-C does, from code run by ``exec`` of a string (where a Ctrl-C lands
while an import makes a dataclass), at the fixed point ``SIGINT_AT`` names, never after a sleep:

- ``import:M``: as module M's import starts (a Ctrl-C while the command imports torch);
- ``call:M:F``: at the first call of module M's function F, as bound by whatever imports F from M.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import os
import signal
import sys
from collections.abc import Callable
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def _sigint() -> None:
    exec("os.kill(os.getpid(), signal.SIGINT)", {"os": os, "signal": signal})


def _first_call_interrupted(function: Callable[..., Any]) -> Callable[..., Any]:
    calls = []

    @functools.wraps(function)
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        if not calls:
            calls.append(1)
            _sigint()
        return function(*args, **kwargs)
    return interrupted


class _At(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, function: str | None):
        self.module, self.function = module, function

    def find_spec(self, fullname: str, path: object, target: object = None) -> ModuleSpec | None:
        if fullname != self.module:
            return None
        sys.meta_path.remove(self)  # once, and the module's own spec comes from the other finders
        if self.function is None:
            _sigint()
            return None
        spec = importlib.util.find_spec(fullname)
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            setattr(module, self.function, _first_call_interrupted(getattr(module, self.function)))
        spec.loader.exec_module = exec_module
        return spec


_kind, _, _where = os.environ.get("SIGINT_AT", "").partition(":")
if _kind == "import":
    sys.meta_path.insert(0, _At(_where, None))
elif _kind == "call":
    sys.meta_path.insert(0, _At(*_where.split(":")))
