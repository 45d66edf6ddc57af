"""The loss registry: ``losses.get(name, **hparams)`` and ``losses.available()``.

Each loss module decorates its kernel with :func:`register_loss`, which registers a :class:`LossSpec` (the
kernel, its hyper-parameters with defaults and ranges, its paper, and its capabilities: how it scores, what a
positive is to it, whether it needs labels, whether it is a training objective) and returns the public function.
Hyper-parameters are validated once: by :func:`get` when the loss is built (so a bad value fails before any
training starts; the bound :class:`Loss` then calls the kernel with no check per step), or by the public function
on each direct call (``losses.dcl(scores, tau_plus=0.2)``).

A class prior (DCL's and HCL's ``tau_plus``, PUCL's ``alpha``) may be ``"auto"``: the bound
:class:`Loss` then starts from the paper's default and takes an estimate from the data on a schedule
(:mod:`losses.prior`), which the domain's training loop asks for through :meth:`Loss.refresh_prior`.
The estimator's own settings (``prior_estimator``, ``prior_every``, ``prior_momentum``) exist only
beside an ``auto`` value, so a run with a fixed prior keeps the hyper-parameters (and the identity) it
had before ``auto`` existed.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from losses.scores import Scores

AUTO = "auto"

# How a loss reads the logits of its Scores (LossSpec.scoring).
PROBABILITIES = "probabilities"  # similarities / temperature, normalised over the anchor's candidates (softmax)
LOGITS = "logits"  # raw logits, each pair scored on its own (jsd's softplus; no temperature)
SCORINGS = (PROBABILITIES, LOGITS)
# What a positive is to a loss (LossSpec.positives): what the Scores a domain builds must mean by pos_mask.
VIEWS = "views"  # another view of the anchor's own sample (instance discrimination)
CLASSMATES = "classmates"  # another sample of the anchor's class (supervised contrastive)
CLASS = "class"  # the anchor's class, among candidates that are the classes (a classifier's logits)
POSITIVES = (VIEWS, CLASSMATES, CLASS)


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
        """The allowed values, short (``harness list losses``): ``one of a, b``, ``[0, 1)``, ``>= 0``, ``an
        integer >= 1``, each with ``or auto`` where the value may be estimated."""
        if self.choices:
            return "one of " + ", ".join(self.choices) + (" or auto" if self.auto else "")
        return self._allowed("an integer" if self.integer else "")

    def expected(self, finite: bool = False) -> str:
        """What a value must be, as the object of "must be": ``a number in [0, 1)``, ``an integer >= 1``,
        ``a finite number >= 0`` (``finite``: said to an infinite or NaN value, which ``>= 0`` alone would not
        rule out), ``one of a, b``."""
        if self.choices:
            return self.describe()
        return self._allowed("an integer" if self.integer else "a finite number" if finite else "a number")

    def _allowed(self, kind: str) -> str:
        """``kind`` with the range: ``in [0, 1)`` between two finite bounds (the interval alone without a kind),
        ``>= 1`` or ``< 1`` with one, nothing with none; an interval with an infinite end would read ``[1, inf]``."""
        low, high = math.isfinite(self.low), math.isfinite(self.high)
        if low and high:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            bounds = f"{'in ' if kind else ''}{left}{self.low:g}, {self.high:g}{right}"
        elif low:
            bounds = f"{'>' if self.low_open else '>='} {self.low:g}"
        elif high:
            bounds = f"{'<' if self.high_open else '<='} {self.high:g}"
        else:
            bounds = "" if kind else "any number"
        return " ".join(filter(None, (kind, bounds))) + (" or auto" if self.auto else "")

    def _refuse(self, value: Any, finite: bool = False) -> ValueError:
        return ValueError(f"{self.name} must be {self.expected(finite)}, got {_shown(value)}")

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
            raise self._refuse(value)
        if self.choices:
            if value not in self.choices:
                raise self._refuse(value)
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._refuse(value)
        if not math.isfinite(value):
            raise self._refuse(value, finite=True)
        too_low = value <= self.low if self.low_open else value < self.low
        too_high = value >= self.high if self.high_open else value > self.high
        if too_low or too_high:
            raise self._refuse(value)
        return int(value) if self.integer else float(value)

    def parse(self, text: str) -> Any:
        """The checked value that the command-line ``text`` (``--set loss.NAME=TEXT``) stands for: a choice or
        ``auto`` as written, a number otherwise. ValueError, worded as :meth:`check` words it, when it is none."""
        if self.choices or (self.auto and text == AUTO):
            return self.check(text, allow_auto=True)
        try:
            number = float(text) + 0.0  # (+ 0.0: -0 is 0, one value and one run id)
        except ValueError:
            raise self._refuse(text) from None
        return self.check(number, allow_auto=True)


def _shown(value: Any) -> str:
    """A refused value as the user wrote it: ``0``, not the ``0.0`` that the command line's text was read as; a
    fraction or a text as Python writes it (``0.1``, ``'often'``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def prior_settings() -> tuple[HParam, ...]:
    """The settings of an estimated class prior, for the losses with an ``auto`` hyper-parameter."""
    from losses.prior import ESTIMATORS

    return (HParam("prior_estimator", ESTIMATORS[0], choices=ESTIMATORS, prior_setting=True),
            HParam("prior_every", 1, low=1, integer=True, prior_setting=True),
            HParam("prior_momentum", 0.5, low=0.0, high=1.0, high_open=True, prior_setting=True))


@dataclass(frozen=True)
class LossSpec:
    """A registered loss. ``fn`` is its kernel, which takes its hyper-parameters as given (checked by whoever
    calls it: :func:`get`, or the public function). Capabilities, which decide the domains and methods that can
    train with it (``domains.base.Supplies``): ``scoring`` (:data:`SCORINGS`) and ``positives``
    (:data:`POSITIVES`), ``needs_labels`` (it reads class labels from the Scores), ``objective`` (False for a
    regulariser added to an objective, e.g. FairKL, which takes embeddings rather than Scores: it has no scoring
    and no positives)."""

    name: str
    fn: Callable[..., Tensor]
    hparams: tuple[HParam, ...] = ()
    needs_labels: bool = False
    paper: str = ""
    summary: str = ""
    scoring: str | None = PROBABILITIES
    positives: str | None = VIEWS
    objective: bool = True
    defaults: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "defaults", {h.name: h.default for h in self.hparams if not h.prior_setting})
        if self.objective and (self.scoring not in SCORINGS or self.positives not in POSITIVES):
            raise ValueError(f"loss '{self.name}': scoring must be one of {', '.join(SCORINGS)} and positives one "
                             f"of {', '.join(POSITIVES)}, got {self.scoring!r} and {self.positives!r}")
        if not self.objective and (self.scoring, self.positives) != (None, None):
            raise ValueError(f"loss '{self.name}' is no objective: it takes no Scores, so no scoring or positives")
        for h in self.hparams:  # a default its own range refuses would fail the first run that sets nothing
            try:
                h.check(h.default, allow_auto=True)
            except ValueError as exc:
                raise ValueError(f"loss '{self.name}': the default of its hyper-parameter {h.name} is not an allowed "
                                 f"value ({exc}); give it a default within its range") from None

    def parse(self, texts: dict[str, str]) -> dict[str, Any]:
        """Command-line texts (``{"tau_plus": "0.2"}``) as checked values (:meth:`HParam.parse`); a name the loss
        does not have is passed on as written, for :meth:`resolve` to refuse."""
        known = {h.name: h for h in self.hparams}
        return {name: known[name].parse(text) if name in known else text for name, text in texts.items()}

    def resolve(self, **hparams: Any) -> dict[str, Any]:
        """Defaults overridden by ``hparams``, each validated; an unknown name is an error. The prior's
        settings are filled in (and accepted) only when a class prior is ``"auto"``."""
        known = {h.name: h for h in self.hparams}
        unknown = sorted(set(hparams) - set(known))
        if unknown:
            valid = ", ".join(known) or "none, it takes no hyper-parameters"
            raise ValueError(f"loss '{self.name}' has no hyper-parameter {', '.join(unknown)}; valid: {valid}")
        prior = self.prior_hparam
        auto = prior is not None and hparams.get(prior.name) == AUTO
        settings = {h.name for h in self.hparams if h.prior_setting}
        given = sorted(set(hparams) & settings)
        if not auto and given:
            # "can only apply": a verb that agrees with one setting and with several
            raise ValueError(f"{', '.join(given)} of loss '{self.name}' can only apply to an estimated prior: add "
                             f"{prior.name}=auto")
        return {name: h.check(hparams.get(name, h.default), allow_auto=True) for name, h in known.items()
                if auto or not h.prior_setting}

    @property
    def prior_hparam(self) -> HParam | None:
        """The hyper-parameter of this loss that is a class prior and may be ``"auto"`` (None without one)."""
        return next((h for h in self.hparams if h.auto), None)


_REGISTRY: dict[str, LossSpec] = {}


# A loss's or a domain's name: sweeps take them comma-separated (--losses a,b), run ids and page names carry them.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
NAME_RULE = "letters, digits, _ and -, starting with a letter or digit"  # NAME in words, for the errors


class KernelOutputError(TypeError):
    """A loss kernel returned what no loss returns: not a 0-dim floating-point tensor, or one cut off from the
    autograd graph of the scores it was given (:meth:`Loss.__call__`)."""


class NameRefusedError(ValueError):
    """A loss registered under a name that another loss has, or under one that is no plain name (:data:`NAME`)."""


def register(spec: LossSpec) -> LossSpec:
    """Register ``spec`` under its name; NameRefusedError for a name already registered (a loss plugged in from
    outside, ``HARNESS_PLUGINS``, never replaces one, a built-in loss least of all) or no plain name."""
    if not NAME.fullmatch(spec.name):
        raise NameRefusedError(f"loss {spec.name!r} of {spec.fn.__module__} is no plain name ({NAME_RULE})")
    if spec.name in _REGISTRY:
        raise NameRefusedError(f"loss '{spec.name}' of {spec.fn.__module__} is taken by "
                               f"{_REGISTRY[spec.name].fn.__module__}; a plugin's loss needs a name of its own")
    _REGISTRY[spec.name] = spec
    return spec


def register_loss(name: str, *, paper: str, summary: str, hparams: tuple[HParam, ...] = (),
                  needs_labels: bool = False, scoring: str | None = PROBABILITIES, positives: str | None = VIEWS,
                  objective: bool = True) -> Callable[[Callable[..., Tensor]], Callable[..., Tensor]]:
    """Decorate a loss kernel: register it as ``name`` (a :class:`LossSpec` of these fields) and return its public
    function, which checks the hyper-parameters it is given, once per call, and calls the kernel.

    The kernel's parameters with a default are its hyper-parameters: they must be those of ``hparams`` (less a
    prior's settings, which the bound :class:`Loss` consumes), with the same defaults, or the import fails."""

    def decorate(kernel: Callable[..., Tensor]) -> Callable[..., Tensor]:
        entry = LossSpec(name, kernel, hparams, needs_labels=needs_labels, paper=paper, summary=summary,
                         scoring=scoring, positives=positives, objective=objective)
        signature = inspect.signature(kernel)
        defaults = {p.name: p.default for p in signature.parameters.values() if p.default is not p.empty}
        if defaults != entry.defaults:
            raise TypeError(f"loss '{name}': the kernel's defaults {defaults} are not its hyper-parameters' "
                            f"{entry.defaults}")
        register(entry)
        checks = {h.name: h for h in hparams if h.name in entry.defaults}

        @functools.wraps(kernel)
        def public(*args: Any, **kwargs: Any) -> Tensor:
            bound = signature.bind(*args, **kwargs)
            for param, value in bound.arguments.items():
                if param in checks:
                    bound.arguments[param] = checks[param].check(value)
            return kernel(*bound.args, **bound.kwargs)

        return public

    return decorate


def spec(name: str) -> LossSpec:
    """The registry entry of ``name``."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown loss '{name}'; available: {', '.join(available())}")
    return _REGISTRY[name]


def available(*, needs_labels: bool | None = None, objective: bool | None = True) -> list[str]:
    """Names of the registered training objectives, optionally only the (un)supervised ones; ``objective=None``
    adds the regularisers (``objective=False``: those alone)."""
    return sorted(n for n, s in _REGISTRY.items() if (needs_labels is None or s.needs_labels == needs_labels)
                  and (objective is None or s.objective == objective))


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
        self._compile_options: dict[str, Any] | None = None  # torch.compile's options while compiled
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
        if self._compile_options is not None:
            self._fn = torch.compile(self._fn, **self._compile_options)

    def compile(self, **options: Any) -> bool:
        """From now on run the loss through ``torch.compile`` (``options`` are its own), as ``nn.Module.compile``
        does for a network: one graph (``fullgraph=True``: the loss core traces without a break) with static
        shapes (``dynamic=False``: a training run has one or two), in which its elementwise work and reductions
        fuse into a few kernels (``losses.benchmark``'s compiled rows). Compilation happens at the first call.
        Returns whether the loss is compiled: one with an estimated prior stays eager, since the prior it is
        bound to changes between epochs and each value would be a graph of its own."""
        if self._auto is not None:
            return False
        self._compile_options = {"fullgraph": True, "dynamic": False, **options}
        self._bind()
        return True

    def uncompile(self) -> None:
        """Run the loss eagerly again (after :meth:`compile`)."""
        self._compile_options = None
        self._bind()

    @property
    def compiled(self) -> bool:
        return self._compile_options is not None

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *inputs: Any) -> Tensor:
        """The kernel on ``inputs`` (a :class:`Scores`; a regulariser's own: FairKL's embeddings and labels)."""
        if self.prior is not None and self.prior.uses_scores:
            scores = inputs[0]
            # kept by reference (views: no copy, no device sync) for the next estimate
            self._last_scores = (scores.logits.detach(), scores.pos_mask, scores.neg_mask)
        return self._checked(self._fn(*inputs), inputs)

    def _checked(self, out: Any, inputs: tuple[Any, ...]) -> Tensor:
        """``out`` if it is what a loss returns: a 0-dim floating-point tensor that requires grad wherever its
        inputs do (Scores: their logits), else KernelOutputError naming the loss. Host-side metadata only (no value
        read, no device sync): the same under ``torch.compile`` (whose output it is) and CUDA-graph capture."""
        if isinstance(out, Tensor) and out.dim() == 0 and out.is_floating_point():
            if out.requires_grad or not torch.is_grad_enabled() or not any(
                    t.requires_grad for t in _tensors(inputs)):
                return out
            what = "a tensor that does not require grad (detached from the scores' autograd graph)"
        elif isinstance(out, Tensor):
            what = f"a {out.dtype} tensor" if out.dim() == 0 else f"a tensor of shape {tuple(out.shape)}"
        else:
            what = f"a {type(out).__name__}" + (f" ({out!r})" if isinstance(out, (int, float)) else "")
        raise KernelOutputError(
            f"loss '{self.name}' ({self.spec.fn.__module__}) returned {what}; a loss kernel must return a 0-dim "
            "floating-point torch Tensor computed from its inputs, e.g. per_anchor.mean() (no .item(), float() or "
            ".detach(): training takes its gradient)")

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
        from losses.distributed import is_distributed

        tic = time.perf_counter()
        distributed = is_distributed()
        if not distributed or torch.distributed.get_rank() == 0:  # the other ranks take rank 0's estimate
            if self.prior.uses_scores:
                if self._last_scores is None:
                    raise RuntimeError(f"{self.name}: no batch was scored before the prior's estimate at epoch "
                                       f"{epoch}")
                self.prior.update(epoch, scores=Scores(*self._last_scores))
            else:
                if not sample:
                    raise RuntimeError(f"{self.name}: no embeddings were observed before the prior's estimate at "
                                       f"epoch {epoch}; the training loop must call loss.observe(...)")
                self.prior.update(epoch, embeddings=torch.cat(sample).float())
        if distributed:
            shared = [self.prior.state_dict()]
            torch.distributed.broadcast_object_list(shared, src=0)
            self.prior.load_state_dict(shared[0])
        self._bind()
        entry = self.prior.history[-1]
        point = {"prior": entry["smoothed"], "prior_raw": entry["raw"], "prior_seconds": time.perf_counter() - tic}
        if "clusters" in entry:  # the clustering estimate: how many clusters, and how clear (the silhouette
            # near 0 says the embeddings have no cluster structure to read, whatever the estimate)
            point["prior_clusters"] = entry["clusters"]
            point["prior_silhouette"] = entry["silhouette"]
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

    def __getstate__(self) -> dict[str, Any]:
        # A compiled function is not copied (deepcopy, pickle): the copy binds its own, compiled alike.
        return {**self.__dict__, "_fn": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._bind()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.hparams.items())
        return f"{self.name}({args})"


def _tensors(inputs: tuple[Any, ...]) -> list[Tensor]:
    """The tensors a loss reads its gradient through: the logits of Scores, and tensors given as they are."""
    return [x.logits if isinstance(x, Scores) else x for x in inputs if isinstance(x, (Scores, Tensor))]


def get(name: str, **hparams: Any) -> Loss:
    """The loss ``name`` with ``hparams`` validated and bound."""
    entry = spec(name)
    return Loss(entry, entry.resolve(**hparams))

