"""Resolving a run's configuration: preset, then ``--set key=value`` overrides, then loss hyper-parameters.

A ``--set`` value is validated by the config class's own field type through pydantic, constraints included
(``Annotated[int, Field(ge=1)]``, ``Literal[...]``, ``X | None``, ``tuple[...]``), after a light reading of the
command-line string (:func:`_wire`): ``none`` for an optional field, comma-separated items for a tuple or list,
JSON for a dict, ``1e3`` for an integer. The preset and the overrides are then checked together by building the
config (a pydantic dataclass validates its cross-field rules on construction). ``--set loss.NAME=V`` sets a
hyper-parameter of a core loss, validated by the loss registry. Every mistake is a one-line UserError.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from typing import Annotated, Any

from pydantic import ConfigDict, TypeAdapter, ValidationError

import domains
import losses
from domains.base import Domain, describe_validation, did_you_mean
from domains.errors import UserError

LOSS_PREFIX = "loss."


def parse_assignments(items: list[str] | None, option: str = "--set", once: bool = False) -> dict[str, str]:
    """``["a=1", "loss.tau_plus=0.1"]`` -> ``{"a": "1", "loss.tau_plus": "0.1"}``: a later key wins, or with
    ``once`` a key given twice is a UserError (``harness run`` and ``sweep`` pass it: keeping one of the two
    without a word would run what the user may not have meant)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key:
            raise UserError(f"{option} expects key=value, got '{item}'")
        if once and key in out:
            how = "once, its values comma-separated" if option == "--grid" else "once"
            raise UserError(f"{option} {key} is given twice ({key}={out[key]} and {key}={value}); give it {how}")
        out[key] = value
    return out


def format_value(value: Any) -> str:
    """The ``--set`` spelling of a validated value; :func:`parse_value` reads it back as the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def config_fields(config_class: type) -> dict[str, Any]:
    """Field name -> the type a value of that field must fit: for a pydantic dataclass the annotation with its
    constraints, else the plain type hint."""
    validated = getattr(config_class, "__pydantic_fields__", {})
    hints = typing.get_type_hints(config_class, include_extras=True) if not validated else {}
    out = {}
    for f in (f for f in dataclasses.fields(config_class) if f.init):
        info = validated.get(f.name)
        if info is None:
            out[f.name] = hints.get(f.name, Any)
        else:
            out[f.name] = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
    return out


def _bare(tp: Any) -> tuple[Any, bool]:
    """``tp`` without ``Annotated``, and without ``None`` when it is ``X | None``; and whether ``None`` is allowed."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    args = typing.get_args(tp)
    if type(None) not in args:
        return tp, False
    rest = [a for a in args if a is not type(None)]
    return (_bare(rest[0])[0] if len(rest) == 1 else tp), True


def _wire(text: str, tp: Any) -> Any:
    """The command-line string ``text`` as the value pydantic validates against ``tp``. Pydantic reads numbers,
    booleans (true/false, yes/no, on/off, 1/0) and choices from a string itself; what it does not read is done
    here: ``none`` for an optional field, comma-separated items for a tuple or list, an integral float (``1e3``)
    for an integer."""
    inner, optional = _bare(tp)
    if optional and text.lower() in ("none", "null"):
        return None
    if typing.get_origin(inner) in (tuple, list):
        args = [a for a in typing.get_args(inner) if a is not Ellipsis] or [Any]
        parts = [p.strip() for p in text.split(",")] if text.strip() else []
        return [_wire(p, args[min(i, len(args) - 1)]) for i, p in enumerate(parts)]
    if inner is int:
        try:
            return int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                return text  # pydantic names the problem
            return number if math.isfinite(number) else text
    return text


# A float read from the command line is finite: ``inf``, ``nan`` and an overflow (``1e309``) would pass pydantic's
# float and make a run diverge at once, or complete with a value JSON cannot hold (``null`` in the record). A
# field that means infinity to be a value says so itself: ``Annotated[float, Field(allow_inf_nan=True)]``.
_FINITE = ConfigDict(allow_inf_nan=False)


def parse_value(text: str, tp: Any) -> Any:
    """The command-line string ``text`` validated as type ``tp`` (floats finite: :data:`_FINITE`); ValidationError
    when it does not fit."""
    adapter = TypeAdapter(tp, config=_FINITE)
    if typing.get_origin(_bare(tp)[0]) is dict:
        return adapter.validate_json(text)
    value = adapter.validate_python(_wire(text, tp))
    return value + 0.0 if isinstance(value, float) else value  # -0 is 0: one value, one run id


def resolve_config(domain: Domain, preset: str, sets: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """The domain's config for ``preset`` with the (non-loss) ``sets`` applied; also the validated overrides."""
    if preset not in domain.presets:
        raise UserError(f"unknown preset '{preset}' for domain '{domain.name}'{did_you_mean(preset, domain.presets)} "
                        f"Available: {', '.join(sorted(domain.presets))}")
    fields = config_fields(domain.config_class)
    overrides: dict[str, Any] = {}
    for key, text in sets.items():
        if key not in fields:
            raise UserError(f"unknown --set key '{key}' for domain '{domain.name}'{did_you_mean(key, fields)} "
                            f"Valid keys: {', '.join(sorted(fields))}, or loss.<hyper-parameter> (harness list options "
                            "says what each does)")
        try:
            overrides[key] = parse_value(text, fields[key])
        except ValidationError as exc:
            raise UserError(f"--set {key}={text}: {describe_validation(exc)}") from None
    try:
        config = domain.config_class(**{**domain.presets[preset].overrides, **overrides})
    except (TypeError, ValueError) as exc:  # ValidationError is a ValueError; the rest, a plain dataclass's checks
        problem = describe_validation(exc) if isinstance(exc, ValidationError) else exc
        raise UserError(f"invalid config for domain '{domain.name}' preset '{preset}': {problem}") from None
    return config, overrides


def split_sets(sets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Config assignments and loss assignments (the latter without the ``loss.`` prefix)."""
    config_sets = {k: v for k, v in sets.items() if not k.startswith(LOSS_PREFIX)}
    loss_sets = {k[len(LOSS_PREFIX):]: v for k, v in sets.items() if k.startswith(LOSS_PREFIX)}
    return config_sets, loss_sets


def plugin_hint(names: list[str]) -> str:
    """Why an unknown loss name may be a loss of the user's own, in words that follow the error: without
    ``HARNESS_PLUGINS``, that its module is named there; with it, that the modules it names register none of
    ``names``."""
    modules = domains.plugin_modules()
    if not modules:
        return ("a loss of your own is known only where HARNESS_PLUGINS names the module that registers it: "
                "HARNESS_PLUGINS=my_losses harness ...")
    return (f"HARNESS_PLUGINS names {', '.join(modules)}, which register{'s' if len(modules) == 1 else ''} no loss "
            f"{', '.join(names)}")


def why_refused(domain: Domain, loss: str) -> str:
    """Why no method of ``domain`` trains with the registered ``loss``: what it needs that the methods do not
    supply (:meth:`domains.base.Supplies.lacks`), e.g. ``it needs class labels, which graph's infograph does not
    supply``."""
    spec = losses.spec(loss)
    by_need: dict[str, list[str]] = {}
    for method in domain.methods:
        need = domain.method_supplies.get(method, domain.supplies).lacks(spec)
        if need:
            by_need.setdefault(need, []).append(method)
    parts = []
    for need, methods in by_need.items():
        who = f"{domain.name}'s {methods[0]} does" if len(methods) == 1 else \
            f"{domain.name}'s methods {', '.join(methods)} do"
        parts.append(f"{need}, which {who} not supply")
    return "it needs " + "; and ".join(parts) if parts else "no method of the domain trains with it"


def resolve_loss(domain: Domain, loss: str, loss_sets: dict[str, str]) -> dict[str, Any]:
    """Check that ``domain`` accepts ``loss`` and return its hyper-parameters from the ``loss.*`` texts, parsed and
    validated by the loss registry, defaults filled."""
    accepted = domain.accepted_losses()
    if loss not in losses.available():
        plugins = "" if loss in losses.available(objective=None) else f" ({plugin_hint([loss])})"
        raise UserError(f"unknown loss '{loss}'{did_you_mean(loss, accepted)} Domain '{domain.name}' accepts: "
                        f"{', '.join(accepted)}{plugins}")
    if loss not in accepted:
        raise UserError(f"domain '{domain.name}' does not accept loss '{loss}': {why_refused(domain, loss)}; "
                        f"accepted: {', '.join(accepted)}")
    spec = losses.spec(loss)
    names = [h.name for h in spec.hparams]
    unknown = sorted(set(loss_sets) - set(names))
    if unknown:  # in the command's spelling (loss.NAME), with a guess
        valid = ", ".join(LOSS_PREFIX + name for name in names) or "none"
        hint = did_you_mean(unknown[0], names, prefix=LOSS_PREFIX)
        raise UserError(f"loss '{loss}' has no hyper-parameter {', '.join(unknown)}{hint} Valid: {valid}")
    try:
        return spec.resolve(**spec.parse(loss_sets))
    except ValueError as exc:
        raise UserError(f"bad hyper-parameter for loss '{loss}': {exc}") from None


MAX_SEED = 2**32 - 1  # numpy's legacy seeding, which every domain calls (np.random.seed), takes no larger seed
MAX_SEEDS = 10_000  # seeds in one range: more is a typo, and would be listed in memory before anything runs


def tolerance_value(text: str) -> float | None:
    """A tolerance as written (``harness compare --tolerance``, a suite's column): a finite number >= 0, else None."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or a range ``"0-4"`` -> a list of seeds (0..:data:`MAX_SEED`, duplicates dropped)."""
    seeds: list[int] = []
    usage = f"--seeds expects comma-separated integers in 0..{MAX_SEED} like 0,1,2 or a range like 0-9"
    parts = [p.strip() for p in text.split(",")]
    if "" in parts and any(parts):  # '0,,1' or '0,1,': a seed left out by mistake would go unnoticed
        raise UserError(f"{usage}, got an empty item in '{text}'")
    for part in filter(None, parts):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise UserError(f"{usage}, got '{part}' in '{text}'") from None
        if last < first:
            raise UserError(f"--seeds range '{part}' is empty: it ends before it starts; write {last}-{first}")
        if last > MAX_SEED:
            raise UserError(f"--seeds {part}: a seed must be at most {MAX_SEED} (2**32 - 1, numpy's limit)")
        if last - first >= MAX_SEEDS:
            raise UserError(f"--seeds range '{part}' holds {last - first + 1} seeds; at most {MAX_SEEDS} a range")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise UserError(f"{usage}; got nothing")
    return list(dict.fromkeys(seeds))
