"""CURL's updates replayed from CUDA graphs (``domains.graphed``), the replay sampling included: the plumbing that
makes an update cost one launch on a GPU, beside the algorithm in ``domains.rl.curl``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from domains.graphed import Backend, CudaGraphBackend, GraphedStep, learning_rates, make_capturable
from domains.rl.replay import ReplayBuffer

if TYPE_CHECKING:  # annotations only: domains.rl.curl imports this module
    from domains.rl.curl import CurlSac, Schedule


class GraphedUpdates:
    """Replay sampling and one update per call, each kind of update (its :class:`Schedule`: with or without
    the actor and EMA parts) replayed from its own CUDA graph after a few eager warm-up updates
    (``domains.graphed``). An update's hundreds of small kernels then cost one launch: launching them one by
    one is most of an eager update's time at batch 128 (the bench's rows give each way).

    The graphs read the replay buffer in place, sampling from its device-side size, and draw their random
    numbers from the default CUDA generator, whose state a replay advances as the eager update would: a
    seed gives the same run again. Where capture fails, a one-line warning goes to ``log`` and the updates
    run eagerly. On the CPU, or with ``enabled=False``, every update is eager. ``backend``: a stand-in for
    CUDA graphs (tests)."""

    def __init__(self, agent: CurlSac, buffer: ReplayBuffer, *, enabled: bool,
                 log: Callable[[str], None] | None = None, backend: Backend | None = None):
        self.agent, self.buffer, self.log = agent, buffer, log
        graphed_here = enabled and agent.device.type == "cuda" and torch.cuda.is_available()
        if backend is None and graphed_here:
            # One memory pool for the graphs of both kinds: they never run at once, and none reads what
            # another left in the pool (every buffer of a graph is written in it before it is read).
            backend = CudaGraphBackend(agent.device)
        for opt in agent.optimisers():  # after a restored checkpoint, whose groups may say otherwise
            make_capturable(opt, graphed_here)
        self.backend = backend if enabled else None
        self.runs: dict[Schedule, GraphedStep] = {}

    @property
    def replays(self) -> int:
        """How many updates were replayed from a graph."""
        return sum(run.replays for run in self.runs.values())

    def __call__(self, step: int) -> dict[str, Tensor]:
        """Sample a batch and update at agent step ``step``; the statistics as in :meth:`CurlSac.update`."""
        parts = self.agent.schedule(step)
        run = self.runs.get(parts)
        if run is None:
            run = self.runs[parts] = GraphedStep(
                functools.partial(self._sample_and_update, parts), self.agent.device,
                enabled=self.backend is not None, key=lambda: learning_rates(*self.agent.optimisers()),
                name=f"CURL update ({', '.join(parts.stats)})", log=self.log, backend=self.backend)
        values = run()
        if run.captured:
            values = values.clone()  # the graph's output: its next replay overwrites it
        return dict(zip(parts.stats, values.unbind()))

    def _sample_and_update(self, parts: Schedule) -> Tensor:
        cfg = self.agent.cfg
        batch = self.buffer.sample(cfg.batch_size, cfg.crop_size, cfg.num_positives)
        return torch.stack(list(self.agent.update_parts(batch, parts).values()))
