"""Checks of tensor *values* in the loss core that never stall an accelerator.

Reading a value of a CUDA tensor on the host (``bool(t)``, ``.item()``, ``nonzero``) waits for every
kernel queued before it: a host-device synchronisation, which costs more than the loss itself at small
batch sizes. So a check on the CPU raises ValueError at once (a CPU tensor is read for free), while on
another device it is queued with ``torch._assert_async``: a failed check stops the process at the
next synchronisation with a device-side assertion (CUDA cannot carry our message; run the batch on the
CPU, or call ``set_sync_checks(True)``, to see which check failed). ``set_sync_checks(True)`` makes
every check a synchronous ValueError on every device, for debugging. Under ``torch.compile`` every check is
queued, whatever the device (a graph reads no value on the host); on the CPU a failed one raises at once, as a
RuntimeError with the check's message.

Checks of shapes, dtypes and hyper-parameters need no value and always raise at once.

A check that refuses non-finite logits raises :class:`NonFiniteError`, a ValueError, so that a training
loop can tell diverged weights from a misuse of the API.
"""

from __future__ import annotations

import torch
from torch import Tensor

_sync_checks = False

READS_VALUES_ON = frozenset({"cpu"})
"""Devices whose tensors a check reads on the host at once (emptied, the CPU takes an accelerator's path)."""


class NonFiniteError(ValueError):
    """The logits (or the loss computed from them) contain NaN or infinite values."""


def set_sync_checks(enabled: bool) -> bool:
    """Make value checks on an accelerator synchronous (ValueError) or queued; returns the old setting."""
    global _sync_checks
    previous, _sync_checks = _sync_checks, bool(enabled)
    return previous


def reads_values_now(t: Tensor) -> bool:
    """Whether a check on ``t`` may read it on the host now: on the CPU, or with synchronous checks; never
    while ``torch.compile`` traces (a graph reads no value on the host: its checks are queued)."""
    return not torch.compiler.is_compiling() and (t.device.type in READS_VALUES_ON or _sync_checks)


def require(condition: Tensor, message: str, error: type[ValueError] = ValueError) -> None:
    """``error(message)`` (a ValueError) unless the one-element bool tensor ``condition`` is True (see the
    module)."""
    if reads_values_now(condition):
        if not bool(condition):
            raise error(message)
    else:
        torch._assert_async(condition, message)
