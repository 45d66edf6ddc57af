"""The loss registry: ``losses.get(name, **hparams)`` and ``losses.available()``.

Each loss module registers a :class:`LossSpec`: its function, its hyper-parameters with defaults
and ranges, whether it needs labels, and its paper. Hyper-parameters are validated when the loss
is built, so a bad value fails before any training starts.

A class prior (DCL's and HCL's ``tau_plus``, PUCL's ``alpha``) may be ``"auto"``: the bound
:class:`Loss` then starts from the paper's default and takes an estimate from the data on a schedule
(:mod:`losses.prior`), which the domain's training loop asks for through :meth:`Loss.refresh_prior`.
The estimator's own settings (``prior_estimator``, ``prior_every``, ``prior_momentum``) exist only
beside an ``auto`` value, so a run with a fixed prior keeps the hyper-parameters (and the identity) it
had before ``auto`` existed.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from losses.scores import Scores

AUTO = "auto"


@dataclass(frozen=True)
class HParam:
    """A hyper-parameter with its default and its allowed range (or set of choices). ``auto``: it is a
    class prior that may be estimated from the data (the value ``"auto"``, through :func:`get` only);
    ``integer``: whole numbers only; ``prior_setting``: a setting of that estimate, accepted only beside
    an ``"auto"`` value."""

    name: str
    default: Any
    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    auto: bool = False
    integer: bool = False
    prior_setting: bool = False

    def describe(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        left = "(" if self.low_open else "["
        right = ")" if self.high_open else "]"
        kind = "an integer in " if self.integer else ""
        return f"{kind}{left}{self.low:g}, {self.high:g}{right}" + (" or auto" if self.auto else "")

    def check(self, value: Any, *, allow_auto: bool = False) -> Any:
        """Return ``value`` if allowed, else raise ValueError naming the parameter and its range.
        ``"auto"`` passes only with ``allow_auto`` (a bound :class:`Loss` resolves it; a direct call of a
        loss function cannot)."""
        if self.auto and value == AUTO:
            if allow_auto:
                return AUTO
            raise ValueError(f"{self.name}=auto needs a prior estimated during training: build the loss with "
                             f"losses.get(..., {self.name}='auto')")
        if self.integer and not (isinstance(value, (int, float)) and not isinstance(value, bool)
                                 and math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{self.name} must be {self.describe()}, got {value!r}")
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
        return int(value) if self.integer else float(value)


def prior_settings() -> tuple[HParam, ...]:
    """The settings of an estimated class prior, for the losses with an ``auto`` hyper-parameter."""
    from losses.prior import ESTIMATORS

    return (HParam("prior_estimator", ESTIMATORS[0], choices=ESTIMATORS, prior_setting=True),
            HParam("prior_every", 1, low=1, integer=True, prior_setting=True),
            HParam("prior_momentum", 0.5, low=0.0, high=1.0, high_open=True, prior_setting=True))


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
        object.__setattr__(self, "defaults", {h.name: h.default for h in self.hparams if not h.prior_setting})

    def resolve(self, **hparams: Any) -> dict[str, Any]:
        """Defaults overridden by ``hparams``, each validated; an unknown name is an error. The prior's
        settings are filled in (and accepted) only when a class prior is ``"auto"``."""
        known = {h.name: h for h in self.hparams}
        unknown = sorted(set(hparams) - set(known))
        if unknown:
            valid = ", ".join(known) or "none"
            raise ValueError(f"loss '{self.name}' has no hyper-parameter {', '.join(unknown)}; valid: {valid}")
        prior = self.prior_hparam
        auto = prior is not None and hparams.get(prior.name) == AUTO
        settings = {h.name for h in self.hparams if h.prior_setting}
        if not auto and set(hparams) & settings:
            raise ValueError(f"{', '.join(sorted(set(hparams) & settings))} of loss '{self.name}' only apply "
                             f"to an estimated prior: add {prior.name}=auto")
        return {name: h.check(hparams.get(name, h.default), allow_auto=True) for name, h in known.items()
                if auto or not h.prior_setting}

    @property
    def prior_hparam(self) -> HParam | None:
        """The hyper-parameter of this loss that is a class prior and may be ``"auto"`` (None without one)."""
        return next((h for h in self.hparams if h.auto), None)


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
    """A loss with its hyper-parameters bound: ``loss(scores) -> scalar tensor``.

    With an ``"auto"`` class prior, ``prior`` is the :class:`losses.prior.PriorTracker` that holds the
    current (smoothed) estimate, which the loss uses in place of ``"auto"``; before the first estimate it is
    the paper's default. The training loop hands it the embeddings it computes anyway (:meth:`observe`, a
    no-op for every other loss) and calls :meth:`refresh_prior` at the end of every epoch: the estimate
    costs no extra forward pass. Nothing here reads a label."""

    SAMPLE = 1024  # embeddings kept per epoch for the estimate: the first rows of its shuffled batches

    def __init__(self, spec_: LossSpec, hparams: dict[str, Any]):
        self.spec = spec_
        self.hparams = hparams
        self.prior = None
        prior = spec_.prior_hparam
        self._auto = prior if prior is not None and hparams.get(prior.name) == AUTO else None
        self._settings = {h.name for h in spec_.hparams if h.prior_setting}
        self._last_scores: tuple[Tensor, Tensor, Tensor] | None = None
        self._sample: list[Tensor] = []
        self._sampled = 0
        if self._auto is not None:
            from losses.prior import PriorTracker

            self.prior = PriorTracker(hparams["prior_estimator"], self._auto.default, every=hparams["prior_every"],
                                      momentum=hparams["prior_momentum"])
        self._bind()

    def _bind(self) -> None:
        bound = {k: v for k, v in self.hparams.items() if k not in self._settings}
        if self._auto is not None:
            bound[self._auto.name] = self._auto.check(self.prior.value)
        self._fn = functools.partial(self.spec.fn, **bound)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, scores: Scores) -> Tensor:
        if self.prior is not None and self.prior.uses_scores:
            # kept by reference (views: no copy, no device sync) for the next estimate
            self._last_scores = (scores.logits.detach(), scores.pos_mask, scores.neg_mask)
        return self._fn(scores)

    def observe(self, embeddings: Tensor) -> None:
        """Offer a batch's embeddings [B, d] (those the scores compare) to the prior's estimate; kept,
        detached, until :data:`SAMPLE` rows this epoch. Does nothing unless an estimator needs them."""
        if self.prior is None or self.prior.uses_scores or self._sampled >= self.SAMPLE:
            return
        rows = embeddings.detach()[: self.SAMPLE - self._sampled]
        self._sample.append(rows)
        self._sampled += rows.shape[0]

    def refresh_prior(self, epoch: int) -> dict[str, float]:
        """At the end of ``epoch`` (counted from 1): when an estimate is due, take it from this epoch's
        embeddings or from the last batch's scores, and bind the smoothed value (under torch.distributed,
        rank 0's, so every rank trains with one prior). Returns what the learning curve records of it (the
        smoothed and raw estimates and their cost in seconds), else ``{}``."""
        sample, self._sample, self._sampled = self._sample, [], 0
        if self.prior is None or not self.prior.due(epoch):
            return {}
        tic = time.perf_counter()
        if self.prior.uses_scores:
            if self._last_scores is None:
                raise RuntimeError(f"{self.name}: no batch was scored before the prior's estimate at epoch {epoch}")
            self.prior.update(epoch, scores=Scores(*self._last_scores))
        else:
            if not sample:
                raise RuntimeError(f"{self.name}: no embeddings were observed before the prior's estimate at "
                                   f"epoch {epoch}; the training loop must call loss.observe(...)")
            self.prior.update(epoch, embeddings=torch.cat(sample).float())
        from losses.distributed import is_distributed

        if is_distributed():
            shared = [self.prior.state_dict()]
            torch.distributed.broadcast_object_list(shared, src=0)
            self.prior.load_state_dict(shared[0])
        self._bind()
        entry = self.prior.history[-1]
        point = {"prior": entry["smoothed"], "prior_raw": entry["raw"], "prior_seconds": time.perf_counter() - tic}
        if "clusters" in entry:
            point["prior_clusters"] = entry["clusters"]
        return point

    def prior_summary(self) -> dict[str, Any] | None:
        """What the record keeps of an estimated prior: which, its start and final value, how many estimates."""
        if self.prior is None:
            return None
        return {"param": self._auto.name, "estimator": self.prior.estimator, "initial": self._auto.default,
                "final": self.prior.value, "estimates": len(self.prior.history)}

    def state_dict(self) -> dict[str, Any]:
        """The estimated prior's state, for checkpoints (empty without one)."""
        return {} if self.prior is None else {"prior": self.prior.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.prior is not None and state.get("prior"):
            self.prior.load_state_dict(state["prior"])
            self._bind()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hparams.items())
        return f"{self.name}({args})"


def get(name: str, **hparams: Any) -> Loss:
    """The loss ``name`` with ``hparams`` validated and bound."""
    entry = spec(name)
    return Loss(entry, entry.resolve(**hparams))

