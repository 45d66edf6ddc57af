"""The loss registry: ``losses.get(name, **hparams)`` and ``losses.available()``.

Each loss module registers a :class:`LossSpec`: its function, its hyper-parameters with defaults
and ranges, whether it needs labels, and its paper. Hyper-parameters are validated when the loss
is built, so a bad value fails before any training starts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from losses.scores import Scores


@dataclass(frozen=True)
class HParam:
    """A hyper-parameter with its default and its allowed range (or set of choices)."""

    name: str
    default: Any
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        return f"{left}{self.low:g}, {self.high:g}{right}"

    def check(self, value: Any) -> Any:
        """Return ``value`` if allowed, else raise ValueError naming the parameter and its range."""
        if self.choices:
            if value not in self.choices:
                raise ValueError(f"{self.name} must be {self.describe()}, got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{self.name} must be a number in {self.describe()}, got {value!r}")
        too_low = value <= self.low if self.low_open else value < self.low
        too_high = value >= self.high if self.high_open else value > self.high
        if not math.isfinite(value):
            raise ValueError(f"{self.name} must be a finite number in {self.describe()}, got {value!r}")
        if too_low or too_high:
            raise ValueError(f"{self.name} must lie in {self.describe()}, got {value!r}")
        return float(value)


@dataclass(frozen=True)
class LossSpec:
    name: str
    fn: Callable[..., Tensor]
    hparams: tuple[HParam, ...] = ()
    needs_labels: bool = False
    paper: str = ""
    summary: str = ""
    defaults: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", {h.name: h.default for h in self.hparams})

    def resolve(self, **hparams: Any) -> dict[str, Any]:
        """Defaults overridden by ``hparams``, each validated; an unknown name is an error."""
        known = {h.name: h for h in self.hparams}
        unknown = sorted(set(hparams) - set(known))
        if unknown:
            valid = ", ".join(known) or "none"
            raise ValueError(f"loss '{self.name}' has no hyper-parameter {', '.join(unknown)}; valid: {valid}")
        return {name: h.check(hparams.get(name, h.default)) for name, h in known.items()}


_REGISTRY: dict[str, LossSpec] = {}


def register(spec: LossSpec) -> LossSpec:
    _REGISTRY[spec.name] = spec
    return spec


def spec(name: str) -> LossSpec:
    """The registry entry of ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown loss '{name}'; available: {', '.join(available())}")
    return _REGISTRY[name]


def available(*, needs_labels: bool | None = None) -> list[str]:
    """Names of the registered losses, optionally only the (un)supervised ones."""
    return sorted(n for n, s in _REGISTRY.items() if needs_labels is None or s.needs_labels == needs_labels)


class Loss:
    """A loss with its hyper-parameters bound: ``loss(scores) -> scalar tensor``."""

    def __init__(self, spec_: LossSpec, hparams: dict[str, Any]):
        self.spec = spec_
        self.hparams = hparams
        self._fn = functools.partial(spec_.fn, **hparams)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, scores: Scores) -> Tensor:
        return self._fn(scores)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hparams.items())
        return f"{self.name}({args})"


def get(name: str, **hparams: Any) -> Loss:
    """The loss ``name`` with ``hparams`` validated and bound."""
    entry = spec(name)
    return Loss(entry, entry.resolve(**hparams))


def check(spec_name: str, **hparams: Any) -> dict[str, Any]:
    """Validate hyper-parameters for a direct call of a loss function."""
    return spec(spec_name).resolve(**hparams)
