"""Resolving a run's configuration: preset, then ``--set key=value`` overrides, then loss hyper-parameters.

Config values are coerced by the dataclass field types (``int``, ``float``, ``bool``, ``str``, ``X | None``,
``Literal[...]``, ``tuple[int, ...]`` / ``list[...]`` written comma-separated). ``--set loss.NAME=V`` sets a
hyper-parameter of a core loss, validated by the loss registry. Every mistake is a one-line UserError.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any

import losses
from domains.base import Domain, UserError, did_you_mean

LOSS_PREFIX = "loss."
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """``["a=1", "loss.tau_plus=0.1"]`` -> ``{"a": "1", "loss.tau_plus": "0.1"}`` (later wins)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects key=value, got '{item}'")
        out[key.strip()] = value.strip()
    return out


def format_value(value: Any) -> str:
    """The ``--set`` spelling of a coerced value; coercing it back gives the same value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(format_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def coerce(text: str, tp: Any) -> Any:
    """Convert the command-line string ``text`` to the type ``tp``; ValueError when it does not fit."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(text, arg)
            except ValueError:
                continue
        raise ValueError(_type_name(tp))
    if origin is typing.Literal:
        for choice in args:
            if str(choice) == text:
                return choice
        raise ValueError(f"expected one of {', '.join(map(str, args))}")
    if origin in (tuple, list):
        parts = [p.strip() for p in text.split(",")] if text.strip() else []
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(parts) != len(args):
                raise ValueError(f"expected {len(args)} comma-separated values")
            return tuple(coerce(p, a) for p, a in zip(parts, args))
        items = [coerce(p, args[0]) if args else p for p in parts]
        return tuple(items) if origin is tuple else items
    if tp is bool:
        if text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise ValueError("expected true or false")
    if tp is int:
        number = float(text)
        if not number.is_integer():
            raise ValueError("expected an integer")
        return int(number)
    if tp is float:
        return float(text)
    if tp is str or tp is Any:
        return text
    return json.loads(text)


def config_fields(config_class: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a config dataclass."""
    hints = typing.get_type_hints(config_class)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(config_class) if f.init}


def resolve_config(domain: Domain, preset: str, sets: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """The domain's config for ``preset`` with the (non-loss) ``sets`` applied; also the coerced overrides."""
    if preset not in domain.presets:
        raise UserError(f"unknown preset '{preset}' for domain '{domain.name}'; "
                        f"available: {', '.join(sorted(domain.presets))}")
    fields = config_fields(domain.config_class)
    overrides: dict[str, Any] = {}
    for key, text in sets.items():
        if key not in fields:
            raise UserError(f"unknown --set key '{key}' for domain '{domain.name}'{did_you_mean(key, fields)} "
                            f"Valid keys: {', '.join(sorted(fields))}, or loss.<hyper-parameter>")
        try:
            overrides[key] = coerce(text, fields[key])
        except (ValueError, json.JSONDecodeError):
            raise UserError(f"--set {key}={text}: expected {_type_name(fields[key])}") from None
    try:
        config = domain.config_class(**{**domain.presets[preset].overrides, **overrides})
    except (TypeError, ValueError) as exc:
        raise UserError(f"invalid config for domain '{domain.name}' preset '{preset}': {exc}") from None
    return config, overrides


def split_sets(sets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Config assignments and loss assignments (the latter without the ``loss.`` prefix)."""
    config_sets = {k: v for k, v in sets.items() if not k.startswith(LOSS_PREFIX)}
    loss_sets = {k[len(LOSS_PREFIX):]: v for k, v in sets.items() if k.startswith(LOSS_PREFIX)}
    return config_sets, loss_sets


def is_core_loss(name: str) -> bool:
    return name in losses.available()


def resolve_loss(domain: Domain, loss: str, loss_sets: dict[str, str]) -> dict[str, Any]:
    """Check that ``domain`` accepts ``loss`` and return its validated hyper-parameters (defaults filled)."""
    if loss not in domain.losses:
        raise UserError(f"domain '{domain.name}' does not accept loss '{loss}'; accepted: {', '.join(domain.losses)}")
    if not is_core_loss(loss):
        if loss_sets:
            raise UserError(f"loss '{loss}' is an objective of domain '{domain.name}' and takes no loss.* "
                            f"hyper-parameters (got {', '.join(sorted(loss_sets))})")
        return {}
    spec = losses.spec(loss)
    params: dict[str, Any] = {}
    for hp in spec.hparams:
        if hp.name in loss_sets:
            text = loss_sets[hp.name]
            if hp.choices or (hp.auto and text == losses.registry.AUTO):
                params[hp.name] = text
            else:
                try:
                    params[hp.name] = float(text)
                except ValueError:
                    kind = "" if hp.integer else "a number in "
                    raise UserError(f"--set loss.{hp.name}={text}: expected {kind}{hp.describe()}") from None
    unknown = sorted(set(loss_sets) - {h.name for h in spec.hparams})
    if unknown:
        valid = ", ".join(f"loss.{h.name}" for h in spec.hparams) or "none"
        hint = did_you_mean(unknown[0], [h.name for h in spec.hparams], prefix=LOSS_PREFIX)
        raise UserError(f"loss '{loss}' has no hyper-parameter {', '.join(unknown)}{hint} Valid: {valid}")
    try:
        return spec.resolve(**params)
    except ValueError as exc:
        raise UserError(f"bad hyper-parameter for loss '{loss}': {exc}") from None


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` or a range ``"0-4"`` -> a list of seeds (non-negative, duplicates dropped)."""
    seeds: list[int] = []
    usage = "--seeds expects comma-separated non-negative integers like 0,1,2 or a range like 0-9"
    for part in filter(None, (p.strip() for p in text.split(","))):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise UserError(f"{usage}, got '{part}' in '{text}'") from None
        if last < first:
            raise UserError(f"--seeds range '{part}' is empty: it ends before it starts; write {last}-{first}")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise UserError(f"{usage}; got nothing")
    return list(dict.fromkeys(seeds))
