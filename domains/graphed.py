"""Whole training steps as CUDA graphs: capture a step once, then replay it with one launch.

At the batch sizes of the papers many steps are launch-bound: a small network's forward, backward and
optimizer step issue hundreds of kernels, each microseconds long, and the host's time to launch them is the
step's time (CURL's update dispatches about 800 operations, counted on the CPU). Not every small network is:
the biased track's SimpleConvNet runs 7x7 convolutions at full resolution, 0.64 TFLOP a step at batch 256, so
its step is bound by arithmetic (the bench page's note) and a graph saves only its launches. A CUDA graph
records those launches once; a replay issues them all at once from the device's side. This is PyTorch's
whole-network capture (``torch.cuda.graph``, "CUDA Graphs" in its documentation):

- the step reads its inputs from static buffers, so every call copies its inputs into them (same shapes and
  dtypes every time; a call with other shapes runs eagerly);
- the step's outputs are static too: a replay overwrites them, so a caller reads or accumulates an output
  before the next call;
- a few warm-up steps run first, on a side stream, so that what is built lazily (optimizer state, cuDNN's
  autotuned algorithms, the autograd graph's buffers) exists before capture;
- anything the launches take as a host value is frozen into the graph: the learning rate of a float-lr
  optimizer, a Python-side counter. ``key`` names those values; when it changes, the step is captured anew;
- the step must not read a device value on the host (``.item()``, ``nonzero``, a Python ``if`` on a tensor):
  capture refuses that, and so would the speed. Random numbers of the default CUDA generator are fine.

If capture fails, the step warns once, in one line, and runs eagerly from then on: the same arithmetic,
only slower. A failed capture launches nothing, so no parameter or state has moved. On the CPU, or with
``enabled=False``, the step always runs eagerly.

``backend`` exists for tests: on a machine without CUDA, :class:`ReplayBackend` stands in for the graph (it
re-runs the captured function on the static buffers) so that the buffer handling can be checked against an
eager loop.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Protocol

import torch
from torch import Tensor

Outputs = Tensor | tuple[Tensor, ...]


class Backend(Protocol):
    """How a step is warmed up, captured and replayed (CUDA graphs, or the test stand-in). ``capture`` records
    ``fn`` (reading the static inputs) and returns the graph; ``replay`` runs it and returns its static outputs."""

    def warm(self) -> contextlib.AbstractContextManager: ...

    def capture(self, fn: Callable[[], Outputs]) -> Any: ...

    def replay(self, graph: Any) -> Outputs: ...


class CudaGraphBackend:
    """``torch.cuda.graph`` capture; warm-up on a side stream, as PyTorch's documentation asks. Graphs share one
    memory pool, so a recapture (a new learning rate) reuses the memory of the graph it replaces."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = None

    @contextlib.contextmanager
    def warm(self) -> Iterator[None]:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            yield
        torch.cuda.current_stream(self.device).wait_stream(side)

    def capture(self, fn: Callable[[], Outputs]) -> Any:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            outputs = fn()  # recorded, not run: nothing has moved when capture fails
        self.pool = graph.pool()
        return graph, outputs

    def replay(self, graph: Any) -> Outputs:
        cuda_graph, outputs = graph
        cuda_graph.replay()
        return outputs


class ReplayBackend:
    """A stand-in for CUDA graphs where there is no GPU: "capture" keeps the function without running it, and
    a replay runs it on the static buffers, writing into the first replay's outputs as a graph writes into
    its own. It checks what :class:`GraphedStep` does with buffers, keys and fallbacks; it says nothing about
    what CUDA accepts. ``fail``: an exception every capture raises."""

    def __init__(self, fail: Exception | None = None):
        self.fail, self.captures, self.replays = fail, 0, 0

    def warm(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def capture(self, fn: Callable[[], Outputs]) -> Any:
        if self.fail is not None:
            raise self.fail
        self.captures += 1
        return [fn, None]

    def replay(self, graph: Any) -> Outputs:
        self.replays += 1
        fn, outputs = graph
        fresh = fn()
        if outputs is None:
            graph[1] = fresh = tuple(t.detach() for t in fresh) if isinstance(fresh, tuple) else fresh.detach()
            return fresh
        for static, value in zip(_as_tuple(outputs), _as_tuple(fresh)):
            static.copy_(value)
        return outputs


def _as_tuple(outputs: Outputs) -> tuple[Tensor, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


class _Captured:
    """What a capture leaves: the static inputs and the graph, with the key it froze."""

    def __init__(self, key: Hashable, inputs: tuple[Tensor, ...], graph: Any):
        self.key, self.inputs, self.graph = key, inputs, graph

    def matches(self, inputs: tuple[Tensor, ...]) -> bool:
        return len(inputs) == len(self.inputs) and all(
            a.shape == b.shape and a.dtype == b.dtype and a.device == b.device for a, b in zip(inputs, self.inputs))


class GraphedStep:
    """``step(*inputs)`` as a CUDA graph once warmed up (see the module). Call it like ``step``.

    ``key``: a function of the host values the graph freezes (learning rates, say); a new value recaptures.
    ``warmup``: eager steps before the capture. ``log``: where the one-line fallback message also goes.
    ``captured`` says whether the last call replayed a graph, ``replays`` how many calls did (for the record:
    what the run really did).
    """

    def __init__(self, step: Callable[..., Outputs], device: torch.device, *, enabled: bool = True,
                 key: Callable[[], Hashable] = lambda: None, warmup: int = 3, name: str = "training step",
                 log: Callable[[str], None] | None = None, backend: Backend | None = None):
        if warmup < 1:
            raise ValueError(f"warmup must be at least 1 step (optimizer state is built there), got {warmup}")
        self.step, self.key, self.warmup, self.name, self.log = step, key, warmup, name, log
        if backend is None and enabled and device.type == "cuda" and torch.cuda.is_available():
            backend = CudaGraphBackend(device)
        self.backend = backend if enabled else None
        self.calls, self.replays, self.captured = 0, 0, False
        self._graph: _Captured | None = None

    @property
    def active(self) -> bool:
        """Whether steps are (or will be, after the warm-up) replayed from a graph."""
        return self.backend is not None

    def __call__(self, *inputs: Tensor) -> Outputs:
        self.calls += 1
        self.captured = False
        if self.backend is None:
            return self.step(*inputs)
        if self.calls <= self.warmup:
            with self.backend.warm():
                return self.step(*inputs)
        graph = self._graph
        if graph is not None and not graph.matches(inputs):
            return self.step(*inputs)  # another shape (a last, smaller batch): the graph stays for the next
        key = self.key()
        if graph is None or graph.key != key:
            self._graph = None  # the old graph's memory goes back to the shared pool before the new capture
            graph = self._capture(inputs, key)
            if graph is None:
                return self.step(*inputs)
        for static, value in zip(graph.inputs, inputs):
            static.copy_(value)
        outputs = self.backend.replay(graph.graph)
        self.captured, self.replays = True, self.replays + 1
        return outputs

    def reset(self) -> None:
        """Forget the graph (after the step's tensors were replaced out of place, say)."""
        self._graph = None

    def _capture(self, inputs: tuple[Tensor, ...], key: Hashable) -> _Captured | None:
        static = tuple(x.detach().clone() for x in inputs)
        try:
            graph = self.backend.capture(lambda: self.step(*static))
        except Exception as exc:  # noqa: BLE001 - capture fails with many types (CUDA, autograd, the optimizer)
            self.backend = None
            first_line = (str(exc).strip().splitlines() or [""])[0]
            message = (f"CUDA graph capture of the {self.name} failed ({type(exc).__name__}: {first_line}); "
                       "running it eagerly")
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            if self.log is not None:
                self.log(message)
            return None
        self._graph = _Captured(key, static, graph)
        return self._graph


def make_capturable(optimizer: torch.optim.Optimizer, capturable: bool = True) -> None:
    """Let ``optimizer.step`` be captured: Adam-like optimizers keep their step count on the device then
    (``capturable=True``; PyTorch refuses to capture them otherwise). Optimizers without the flag (SGD) need
    nothing. Step counts already built on the host (a checkpoint of an eager run) move to the parameter's
    device. ``capturable=False`` puts the flag back for a step that runs eagerly: a checkpoint written by a
    graphed run on a GPU says True, and PyTorch refuses a capturable step whose parameters are on the CPU."""
    for group in optimizer.param_groups:
        if "capturable" not in group:
            continue
        group["capturable"] = capturable
        if not capturable:
            continue
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, Tensor) and step.device != p.device:
                optimizer.state[p]["step"] = step.to(p.device, torch.float32)


def learning_rates(*optimizers: torch.optim.Optimizer) -> tuple[float, ...]:
    """The learning rates a captured float-lr optimizer step freezes: the usual ``key`` of a training step."""
    return tuple(float(g["lr"]) for opt in optimizers for g in opt.param_groups)
