"""Helpers shared by several test files: a region where any host-device synchronisation raises, and a run
context that dies right after its first checkpoint (to test resuming)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from domains.base import RunContext


@contextmanager
def no_sync() -> Iterator[None]:
    """Any host-device synchronisation inside raises (CUDA only); the previous mode is restored after."""
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


class Killed(Exception):
    """Stands for a process killed right after it saved a checkpoint."""


class KilledAfterCheckpoint(RunContext):
    def save_checkpoint(self, state):
        super().save_checkpoint(state)
        raise Killed
