"""How long a run's pretraining has left, printed once: a RunContext whose first progress loop measures the recent
time per step."""

from __future__ import annotations

import bisect
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from domains.base import counted
from domains.context import RunContext

T = TypeVar("T")
# A run's estimate is printed once its first steps took this long, or once this fraction of them is done.
ESTIMATE_AFTER_S = 30.0
ESTIMATE_AFTER_FRACTION = 0.1


@dataclass
class EstimatingContext(RunContext):
    """A RunContext whose first progress loop (every domain's pretraining loop) prints once how long the
    pretraining should take: the recent time per step times the steps left, over the seeds left."""

    seeds: int = 1

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None, steady_from: int = 0,
                 **kw) -> Iterator[T]:
        items = super().progress(iterable, desc, total=total, **kw)
        if total is None or self.seeds < 1:
            return items
        seeds, self.seeds = self.seeds, 0  # later loops (evaluation) print nothing
        initial = kw.get("initial", 0)
        steady = min(max(steady_from, initial), total)
        return estimating(items, desc, total - initial, seeds, kw.get("unit", "step"), cheap=steady - initial,
                          seed_steps=total - min(steady_from, total))


def estimating(items: Iterator[T], desc: str, steps: int, seeds: int, unit: str = "step", cheap: int = 0,
               seed_steps: int | None = None) -> Iterator[T]:
    """Yield ``steps`` items; after 30 s or a tenth of the timed steps, print once the time the pretraining has
    left over this seed and ``seeds - 1`` more of ``seed_steps`` timed steps each (default ``steps``). The first
    ``cheap`` steps are not timed (nor counted in what is left): their time says nothing of the rest."""
    from tqdm.auto import tqdm  # its write() keeps the progress bar intact

    timed = steps - cheap
    seed_steps = timed if seed_steps is None else seed_steps
    starts: list[float] = []  # when each timed step started
    for done, item in enumerate(items):
        if seeds and done >= cheap:
            starts.append(time.perf_counter())
            measured = len(starts) - 1
            if measured and (starts[-1] - starts[0] >= ESTIMATE_AFTER_S or measured >= ESTIMATE_AFTER_FRACTION * timed):
                per_step = recent_step_time(starts)
                left = per_step * (steps - done) + per_step * seed_steps * (seeds - 1)
                tqdm.write(f"estimate: {desc}: {duration(per_step)} per {unit}; about {duration(left)} of "
                           f"pretraining left over {counted(seeds, 'seed')}, plus each seed's evaluation",
                           file=sys.stderr)
                seeds = 0
        yield item


def recent_step_time(starts: list[float]) -> float:
    """The time per step over the latest half of the elapsed time: past the warm-up, and past a cheap first
    phase such as the random-action steps that fill CURL's replay buffer before any update."""
    half = (starts[0] + starts[-1]) / 2
    first = min(bisect.bisect_left(starts, half), len(starts) - 2)
    return (starts[-1] - starts[first]) / (len(starts) - 1 - first)


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
