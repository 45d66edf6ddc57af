"""A test plugin (``HARNESS_PLUGINS=tiny_domain,sigint_in_exec`` with ``tests/`` on the path) whose process sends
itself SIGINT, as Ctrl-C does, as each tiny run's pretraining starts, from code run by ``exec`` of a string: where
a Ctrl-C lands while an import makes a dataclass or a namedtuple (their methods are made by ``exec`` of a string),
so that the KeyboardInterrupt is raised within that ``exec``. Signalled at a fixed point, never after a sleep."""

from __future__ import annotations

import functools
import os
import signal
from typing import Any

from tiny_domain import TinyDomain

_pretrain = TinyDomain.pretrain


@functools.wraps(_pretrain)
def _interrupted_in_exec(*args: Any, **kwargs: Any) -> Any:
    exec("os.kill(os.getpid(), signal.SIGINT)", {"os": os, "signal": signal})
    return _pretrain(*args, **kwargs)


TinyDomain.pretrain = _interrupted_in_exec
