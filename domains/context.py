"""What the harness hands a domain for one run (:class:`RunContext`): progress bars that stop at a step boundary,
checkpoints saved atomically and restored only by the run that saved them (with every random generator's state,
:func:`rng_state`), the loss check, and the live trackers its scalars go to."""

from __future__ import annotations

import logging
import math
import numbers
import os
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from domains.checkpoint_extras import CheckpointExtras, mistyped
from domains.errors import NonFiniteLossError, ResumeRefused, RunStopped, UserError
from domains.files import refuse_link, write_atomic

T = TypeVar("T")
# How every refusal of a checkpoint (ResumeRefused) ends but a link's: tools/campaign tells a refusal by it.
START_OVER = "rerun without --resume to start over"

# Seconds between a progress bar's refreshes where standard error is no terminal (a log file, a sweep's or a batch
# job's captured output): each refresh there is one more frame kept in the file, not a redraw, and tqdm's 0.1 s
# default writes several a second for hours.
LOG_REFRESH_S = 30.0


def bar_refresh_s() -> float:
    """tqdm's ``mininterval`` for a bar on standard error: its default on a terminal, LOG_REFRESH_S elsewhere;
    tqdm's own ``TQDM_MININTERVAL``, where set, on both."""
    if "TQDM_MININTERVAL" in os.environ:
        return float(os.environ["TQDM_MININTERVAL"])
    return 0.1 if sys.stderr.isatty() else LOG_REFRESH_S


def _checkpoint_globals() -> list[Any]:
    """What a checkpoint may hold besides tensors and plain Python: numpy arrays, scalars and dtypes (replay
    buffers, RNG states). ``torch.load(weights_only=True)`` refuses every other class, so a tampered
    checkpoint cannot run code."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDG"]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype, *dtypes]


def rng_state() -> dict[str, Any]:
    """The state of every random generator a run draws from: Python's, numpy's global one, torch's on the CPU
    and, once CUDA is in use, on every CUDA device (an unused CUDA generator keeps the seed it was given)."""
    import numpy as np

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`rng_state` returned (the CUDA devices this machine has, of those saved)."""
    import numpy as np

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"][:torch.cuda.device_count()])


def _malformed(state: dict[str, Any]) -> str | None:
    """What is wrong with the layout of a loaded checkpoint that has the right keys and run (a tampered or
    damaged file), or None: the objects' states, the generators' and the extras are dicts by name, the generators
    those :func:`rng_state` saves, and the elapsed seconds a finite number, none negative."""
    for part in ("objects", "extra", "rng"):
        if not isinstance(state[part], dict) or not all(isinstance(name, str) for name in state[part]):
            return f"its {part} are not a dict by name"
    if not all(isinstance(value, Mapping) for value in state["objects"].values()):
        return "an object's state is not a dict"
    if not {"python", "numpy", "torch"} <= set(state["rng"]) <= {"python", "numpy", "torch", "cuda"}:
        return "its random generator states are not those the harness saves"
    elapsed = state.get("elapsed_s", 0.0)
    if not isinstance(elapsed, numbers.Real) or isinstance(elapsed, bool) or not 0 <= elapsed < math.inf:
        return f"its elapsed_s {elapsed!r} is not a number of seconds"
    return None


@dataclass
class RunContext:
    """What the harness gives a domain for one run."""

    seed: int
    device: torch.device
    data_root: Path
    work_dir: Path  # private to this run: checkpoints live here
    resume: bool = False
    quiet: bool = False
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("harness.run"))
    # the run id (its seed, config, data and code): a checkpoint is resumed only by the run that saved it
    run_key: str = ""
    # live trackers (harness.run.tracking: TensorBoard, W&B, MLflow) that log_scalars hands its scalars to
    trackers: Sequence[Any] = ()
    # why the run should stop (a signal, a time limit), or None: the harness's; read at each step boundary
    stop_reason: Callable[[], str | None] = field(default=lambda: None, repr=False, compare=False)
    # What the domain's data step found for the run, by the domain's own keys: the harness hands data_fingerprint and
    # prepare of one run the same context, so what both read and is costly to find is found once (Domain.prepare)
    found: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # Called once a resumed run goes ahead from its checkpoint: restore_checkpoint has restored it, its last check
    # passed, or, for a domain that restores none, its training has begun (its first progress loop or log_scalars).
    # The harness opens a resumed run's log and trackers then, so that a checkpoint refused as it is restored leaves
    # the results folder as it was. Its seconds are left out of the run's clock (:meth:`clock`).
    on_going_ahead: Callable[[], None] = field(default=lambda: None, repr=False, compare=False)
    # the checkpoint read by saved_extras, kept until restore_checkpoint takes it (the file is read once)
    _pending: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _checkpointed: bool = field(default=False, init=False, repr=False, compare=False)  # saved during this step
    # Seconds of the run before this process took it up: its earlier processes', on their clock(), from the start
    # of their attempt to their last checkpoint (what the resumed run keeps of them), read from the checkpoint; the
    # record's timings add them.
    earlier_s: float = field(default=0.0, init=False, repr=False, compare=False)
    _gone_ahead: bool = field(default=False, init=False, repr=False, compare=False)  # on_going_ahead was called
    # Seconds on_going_ahead took: opening the trackers (seconds for W&B) is no work of the run, and a fresh run's,
    # before its attempt starts, is no part of its timings either.
    _outside_s: float = field(default=0.0, init=False, repr=False, compare=False)
    _clock: float = field(default_factory=time.perf_counter, init=False, repr=False, compare=False)  # start_clock

    def progress(self, iterable: Iterable[T], desc: str, total: int | None = None, steady_from: int = 0,
                 **kw) -> Iterator[T]:
        """A tqdm progress bar, silent under ``--quiet``, over the steps of a training loop (``steady_from``: the
        first step whose time is typical of the rest, past a cheap first phase such as CURL's random-action steps;
        the harness's time estimate waits for it); where a stop is
        requested it raises :class:`RunStopped` at the first step boundary where the checkpoint holds the run's
        state: before the loop's first step (the state a loop starts from is the restored checkpoint's, or a
        fresh start's), or right after a step that called :meth:`save_checkpoint`. A loop that checkpoints
        every step stops at the next one; one that checkpoints every few steps saves early when
        :attr:`stop_requested` says so. A resumed run whose domain restored no checkpoint goes ahead here
        (:attr:`on_going_ahead`)."""
        from tqdm.auto import tqdm

        self._go_ahead()
        # No bar over nothing (a resumed run whose training had ended): tqdm would show an empty "0it", or a full
        # bar where the loop starts at its end (``initial``: the steps a resumed run had done, which its bar counts).
        hidden = self.quiet or total == kw.get("initial", 0)
        return self._stoppable(tqdm(iterable, desc=desc, total=total, disable=hidden, leave=False,
                                    mininterval=bar_refresh_s(), **kw))

    def _stoppable(self, bar: Any) -> Iterator[T]:
        resumable = True
        for item in bar:
            reason = self._agreed_stop(resumable)
            if reason is not None:
                bar.close()
                raise RunStopped(reason)
            self._checkpointed = False
            yield item
            resumable = self._checkpointed

    def _agreed_stop(self, resumable: bool) -> str | None:
        """The stop reason where the run stops at this boundary. Under torch.distributed every rank stops at the
        same boundary (else the others would wait for it in their next collective): any rank's stop stops all,
        and rank 0's checkpoint (the only one written) makes the boundary resumable for all."""
        reason = self.stop_reason()
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized() and \
            torch.distributed.get_world_size() > 1
        if not distributed:
            return reason if resumable else None
        flags = torch.tensor([reason is not None, resumable], dtype=torch.float32, device=self.device)
        torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
        return (reason or "another rank's stop") if bool(flags.all()) else None

    @property
    def stop_requested(self) -> bool:
        """Whether the run is asked to stop: a loop that does not checkpoint every step saves one now."""
        return self.stop_reason() is not None

    def log(self, message: str) -> None:
        self.logger.info(message)

    def clock(self) -> float:
        """``time.perf_counter()`` less the seconds :attr:`on_going_ahead` took: the clock of the record's timings
        and of a checkpoint's ``elapsed_s``, which stands still while a resumed run's log and trackers open."""
        return time.perf_counter() - self._outside_s

    def start_clock(self) -> float:
        """Start timing the run's work (seeding, pretraining, evaluation: what a checkpoint's ``elapsed_s`` counts,
        as the record's ``total_s`` does); :meth:`clock` now. The harness's, as a run's attempt starts."""
        self._clock = self.clock()
        return self._clock

    def _go_ahead(self) -> None:
        """Call :attr:`on_going_ahead` the first time a resumed run goes ahead, its seconds kept off the clock."""
        if self._gone_ahead:
            return
        self._gone_ahead = True
        began = time.perf_counter()
        try:
            self.on_going_ahead()
        finally:
            self._outside_s += time.perf_counter() - began

    def log_scalars(self, step: int, scalars: Mapping[str, Any]) -> None:
        """Hand the scalars of training ``step`` (the domain's own unit, increasing: an optimizer step, an
        environment step) to the run's live trackers (``--tracker``) as the run trains; a no-op without any.

        Pass values already on the host (a loss read with ``.item()``, a curve point): a tensor is refused, since
        reading it would wait for the device. Whatever is not a number (None, a list, text) is left out, so a curve
        point goes as it is. On CUDA the memory the caching allocator holds for tensors is added (host counters,
        no synchronisation). A resumed run whose domain restored no checkpoint goes ahead here at the latest
        (:attr:`on_going_ahead`), so that its trackers are open to take them."""
        self._go_ahead()
        if not self.trackers:
            return
        values = {}
        for key, value in scalars.items():
            if isinstance(value, torch.Tensor):
                raise TypeError(f"log_scalars: '{key}' is a tensor; pass a number already on the host")
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                values[key] = float(value)
        if not values:
            return
        if self.device.type == "cuda":
            values["gpu_memory_gib"] = torch.cuda.memory_allocated(self.device) / 2**30
            values["gpu_peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        for tracker in self.trackers:
            tracker.log(step, values)

    @property
    def checkpoint_path(self) -> Path:
        return self.work_dir / "checkpoint.pt"

    def save_checkpoint(self, objects: dict[str, Any], **extra: Any) -> None:
        """Atomically save (a kill never leaves half a file) what resuming needs to go on as if never stopped:
        the ``state_dict()`` of each of ``objects`` (model, optimizer, scheduler, the bound loss, a replay
        buffer; a None is skipped, e.g. a method without a loss), the state of every random generator
        (:func:`rng_state`) and the plain values ``extra`` (epoch, step, curve, a generator's own state...)."""
        state = {"objects": {name: obj.state_dict() for name, obj in objects.items() if obj is not None},
                 "rng": rng_state(), "extra": extra, "run": self.run_key,
                 "elapsed_s": self.earlier_s + self.clock() - self._clock}
        write_atomic(self.checkpoint_path, lambda fh: torch.save(state, fh))
        self._checkpointed = True

    def restore_checkpoint(self, objects: dict[str, Any], counters: Mapping[str, int] | None = None,
                           extras: type[CheckpointExtras] | None = None) -> dict[str, Any] | None:
        """When resuming from a checkpoint: load each of ``objects`` (named as they were saved), restore the
        random generators and return the extras; None on a fresh start. Call it once the objects are built:
        building them draws random numbers, and the saved state must be what the next step draws from.

        ``counters`` names the extras that count the training done (epoch, step) with the configured total
        each: each must be a whole number from 0 to its total. ``extras`` declares the type of each extra the
        loop reads (:class:`CheckpointExtras`). A state that does not load into the objects or the generators, a
        counter out of its range or an extra of another type is a damaged checkpoint: a :class:`ResumeRefused`
        saying so, before anything is restored."""
        state, self._pending = self._pending or self._saved(), None
        if state is None:
            return None
        given = {name: obj for name, obj in objects.items() if obj is not None}
        missing = sorted(set(given) - set(state["objects"]))
        if missing:
            raise ResumeRefused(f"the checkpoint {self.checkpoint_path} holds no {', '.join(missing)}; {START_OVER}")
        extra = state["extra"]
        for name, total in (counters or {}).items():
            value = extra.get(name)
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or not 0 <= value <= total:
                raise self._damaged(f"its {name} {value!r} is not a whole number from 0 to {total}")
        self._check_extras(extra, extras)
        for name, obj in given.items():
            try:
                obj.load_state_dict(state["objects"][name])
            except Exception as exc:  # noqa: BLE001 - wrong keys, shapes or types: not what this run saves
                raise self._damaged(f"{type(exc).__name__} loading its {name}") from None
        try:
            set_rng_state(state["rng"])
        except Exception as exc:  # noqa: BLE001 - a generator state of the wrong kind or size
            raise self._damaged(f"{type(exc).__name__} restoring the random generators") from None
        self._go_ahead()
        return extra

    @property
    def restoring(self) -> bool:
        """Whether a checkpoint read (:meth:`check_resume`, :meth:`saved_extras`) waits for
        :meth:`restore_checkpoint`."""
        return self._pending is not None

    def check_resume(self) -> None:
        """Read the checkpoint a resumed run goes on from, as :meth:`saved_extras` does, before the run writes
        anything (its log, its trackers, its record): a checkpoint refused here (:class:`ResumeRefused`) leaves
        the results folder as it was. Kept for :meth:`saved_extras` and :meth:`restore_checkpoint`."""
        self._pending = self._saved()

    def saved_extras(self, extras: type[CheckpointExtras] | None = None) -> dict[str, Any] | None:
        """The extras of the checkpoint a resumed run goes on from, restoring nothing: for what the training
        objects are built from (the text domain's vocabulary); None on a fresh start. ``extras``: their types,
        checked as :meth:`restore_checkpoint` checks them. The checkpoint is kept for :meth:`restore_checkpoint`,
        which then does not read the file again."""
        self._pending = self._pending or self._saved()
        if self._pending is None:
            return None
        self._check_extras(self._pending["extra"], extras)
        return self._pending["extra"]

    def _check_extras(self, extra: dict[str, Any], extras: type[CheckpointExtras] | None) -> None:
        if extras is not None and (problem := mistyped(extra, extras)):
            raise self._damaged(problem)

    def _saved(self) -> dict[str, Any] | None:
        """The checkpoint when resuming, else None. ``weights_only``: tensors, plain Python and the numpy types
        of :func:`_checkpoint_globals` load; any other class (a tampered file) is refused, never run."""
        path = self.checkpoint_path
        if not self.resume or not (path.exists() or path.is_symlink()):
            return None
        try:
            refuse_link(path, self.work_dir.parent)
        except UserError as exc:
            raise ResumeRefused(str(exc)) from None
        try:
            with torch.serialization.safe_globals(_checkpoint_globals()):
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001 - truncated, not a torch file, or a class that is refused
            raise self._damaged(type(exc).__name__) from None
        # elapsed_s: absent from checkpoints written before records timed a resumed run whole
        if not isinstance(state, dict) or not {"objects", "rng", "extra", "run"} <= set(state) <= \
                {"objects", "rng", "extra", "run", "elapsed_s"}:
            raise ResumeRefused(f"{path} is not a checkpoint of this version of the harness; {START_OVER}")
        if state["run"] != self.run_key:
            raise ResumeRefused(f"the checkpoint {path} was saved by another run (another config, data or code); "
                                f"{START_OVER}")
        if problem := _malformed(state):
            raise self._damaged(problem)
        self.earlier_s = float(state.get("elapsed_s", 0.0))
        return state

    def _damaged(self, why: str) -> ResumeRefused:
        """The error for a checkpoint that cannot be used, ``why`` saying what is wrong with it."""
        return ResumeRefused(f"the checkpoint {self.checkpoint_path} cannot be read ({why}: it is damaged or not a "
                             f"checkpoint the harness wrote); {START_OVER}")

    def check_loss(self, value: float, step: int, hint: str = "", *, first: str = "") -> None:
        """Stop at once on a NaN or infinite loss, naming the step and the value; the harness writes a failed
        record saying so. ``hint`` names what to change (default: a lower learning rate). ``value`` may sum a
        window of steps ending at ``step``.

        A loss at step 1 is of the initial weights: nothing was updated, so it is no divergence (which
        the pages count as a non-finite seed) and no learning rate helps; it is a plain failure that says so.
        ``first`` marks the first loss read where that comes later than step 1, saying what ``step`` is
        (rl: "at the first contrastive update (agent step N), after ..."): a plain failure too."""
        if math.isfinite(value):
            return
        if step == 1 or first:
            where = first or "at training step 1, on the initial weights before any update"
            raise UserError(f"the loss is {value} {where}: not a divergence (no learning rate helps); the loss, or "
                            "the scores it was given, is not finite from the start: a loss of your own "
                            "(HARNESS_PLUGINS) may return one")
        raise NonFiniteLossError(f"the loss is {value} at training step {step}: training diverged; "
                                 f"{hint or 'try a lower learning rate (--set lr=...)'}")
