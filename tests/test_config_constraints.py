"""Every numeric field of a built-in domain's config has a declared range: a bad ``--set`` value is a one-line
``error:`` naming the key, exit 2, before any work (nothing under --results), never a traceback, a crash after
training or a silently wrong metric. The ranges follow what the code does with the field: learning rates and
temperatures > 0 (a division, a log, ``lr or task.lr``), weight decays >= 0, Adam's beta1 in [0, 1), seeds in
0..2**32 - 1 (numpy's seeding), counts >= 0 where 0 means off or all, else >= 1."""

from __future__ import annotations

import typing
from typing import Annotated

import annotated_types as at
import pytest
from pydantic import ValidationError

import domains
from harness.cli import main
from harness.run import config as cfg

# Numeric fields with no range of their own, and why: any finite value (``--set`` reads floats finite) is a setting.
UNBOUNDED = {
    # the policy's log std is squashed into [min, max] (domains/rl/models.py): any real pair, and the pair's order
    # is CurlConfig._check_combinations's rule (tested below)
    ("rl", "actor_log_std_min"),
    ("rl", "actor_log_std_max"),
}

# (domain, assignment, what the one line says after "error: ")
BAD = [
    # vision
    ("vision", "weight_decay=-1e-4", "--set weight_decay=-1e-4: must be greater than or equal to 0"),
    ("vision", "linear_lr=-5", "--set linear_lr=-5: must be greater than 0"),
    ("vision", "linear_lr=0", "--set linear_lr=0: must be greater than 0"),
    ("vision", "linear_weight_decay=-1", "--set linear_weight_decay=-1: must be greater than or equal to 0"),
    ("vision", "knn_temperature=0", "--set knn_temperature=0: must be greater than 0"),
    ("vision", "knn_temperature=-0.1", "--set knn_temperature=-0.1: must be greater than 0"),
    ("vision", "knn_every=-1", "--set knn_every=-1: must be greater than or equal to 0"),
    ("vision", "num_workers=-3", "--set num_workers=-3: must be greater than or equal to 0"),
    # rl
    ("rl", "lr=-1", "--set lr=-1: must be greater than 0"),
    ("rl", "lr=0", "--set lr=0: must be greater than 0"),  # was silently the task's (``cfg.lr or task.lr``)
    ("rl", "beta=1", "--set beta=1: must be less than 1"),
    ("rl", "beta=-0.1", "--set beta=-0.1: must be greater than or equal to 0"),
    ("rl", "init_temperature=0", "--set init_temperature=0: must be greater than 0"),
    ("rl", "alpha_lr=-1e-4", "--set alpha_lr=-1e-4: must be greater than 0"),
    ("rl", "alpha_beta=1.5", "--set alpha_beta=1.5: must be less than 1"),
    ("rl", "seed_agent_steps=0", "--set seed_agent_steps=0: must be greater than 0"),  # the buffer would be empty
    ("rl", "actor_log_std_min=5", "invalid config for domain 'rl' preset 'quick': actor_log_std_min (5.0) must not "
                                  "exceed actor_log_std_max (2.0)"),
    # text
    ("text", "synthetic_seed=-1", "--set synthetic_seed=-1: must be greater than or equal to 0"),
    ("text", "synthetic_seed=4294967296", "--set synthetic_seed=4294967296: must be less than or equal to 4294967295"),
    ("text", "eval_seed=-1", "--set eval_seed=-1: must be greater than or equal to 0"),
    ("text", "eval_seed=4294967296", "--set eval_seed=4294967296: must be less than or equal to 4294967295"),
    # graph: every field was already constrained; its lr is the model
    ("graph", "lr=-1", "--set lr=-1: must be greater than 0"),
    # the typed fields' other checks: a Literal, a bool, an int, a tuple's items, and the checks across fields
    ("graph", "epochs=-1", "--set epochs=-1: must be greater than or equal to 0"),
    ("vision", "crop_min_scale=0", "--set crop_min_scale=0: must be greater than 0"),
    ("text", "senteval_tasks=MR,XX", "--set senteval_tasks=MR,XX: item 1: must be 'MR', 'CR', 'SUBJ'"),
    ("rl", "discount=2", "--set discount=2: must be less than or equal to 1"),
    ("graph", "anchor=edge", "--set anchor=edge: must be 'node' or 'graph'"),
    ("vision", "bf16=maybe", "--set bf16=maybe: must be a valid boolean"),
    ("rl", "batch_size=1.5", "--set batch_size=1.5: must be a valid integer, got a number with a fractional part"),
    ("text", "batch_size=2", "invalid config for domain 'text' preset 'quick': batch_size must be >= 2*context+1"),
    ("rl", "crop_size=120", "invalid config for domain 'rl' preset 'quick': crop_size (120) must not exceed "
                            "image_size (100)"),
]


@pytest.mark.parametrize(("name", "assignment", "expected"), BAD, ids=[f"{n}-{a}" for n, a, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_key_before_any_work(tmp_path, capsys, name, assignment, expected):
    results = tmp_path / "results"
    argv = ["run", "--domain", name, "--loss", "infonce", "--seeds", "0", "--set", assignment, "--results",
            str(results)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {expected}") and len(err.strip().splitlines()) == 1, err
    assert assignment.partition("=")[0] in err
    assert not results.exists() or not any(results.iterdir())


@pytest.mark.parametrize(("name", "sets"), [
    ("vision", {"weight_decay": "0", "linear_weight_decay": "0", "knn_every": "0", "num_workers": "0",
                "knn_temperature": "1e-3", "linear_lr": "1e-5"}),
    ("rl", {"lr": "none", "beta": "0", "alpha_beta": "0.999", "init_temperature": "1e-6", "alpha_lr": "1e-6",
            "seed_agent_steps": "1", "actor_log_std_min": "-1", "actor_log_std_max": "-1"}),
    ("text", {"synthetic_seed": "0", "eval_seed": "4294967295"}),
])
def test_the_edges_of_each_range_are_accepted(name, sets):
    config, overrides = cfg.resolve_config(domains.get(name), "quick", sets)
    assert set(overrides) == set(sets)
    for key in sets:
        assert cfg.format_value(getattr(config, key)) == cfg.format_value(overrides[key])


def _numeric(tp) -> bool:
    """Whether ``tp`` holds a number: int or float, alone, optional or in a tuple (bool and Literal do not)."""
    if typing.get_origin(tp) is Annotated:
        return _numeric(typing.get_args(tp)[0])
    if tp in (int, float):
        return True
    if typing.get_origin(tp) is typing.Literal:
        return False
    return any(_numeric(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _lower_bounds(tp) -> list:
    """The ``Gt``/``Ge`` constraints anywhere in ``tp`` (``PositiveInt``, ``Field(ge=...)``, ``X | None``)."""
    found = []
    if typing.get_origin(tp) is Annotated:
        base, *meta = typing.get_args(tp)
        for m in meta:
            for c in (m, *(getattr(m, "metadata", None) or ())):  # a FieldInfo holds annotated_types constraints
                if isinstance(c, (at.Gt, at.Ge)) or (isinstance(c, at.Interval) and (c.gt, c.ge) != (None, None)):
                    found.append(c)
        return found + _lower_bounds(base)
    for arg in typing.get_args(tp):
        if arg is not Ellipsis:
            found += _lower_bounds(arg)
    return found


def _below(bound) -> str:
    """A value just outside a lower bound, as ``--set`` writes it."""
    if isinstance(bound, at.Interval):
        bound = at.Gt(bound.gt) if bound.gt is not None else at.Ge(bound.ge)
    return str(bound.gt) if isinstance(bound, at.Gt) else str(bound.ge - 1)


def _builtin_configs() -> dict[str, type]:
    """Every registered domain's config class shipped in ``domains`` (a test's plugged-in domain, a plain
    dataclass such as tests/tiny_domain.py's, makes no promise)."""
    out = {}
    for name in domains.available():
        cls = domains.get(name).config_class
        if cls.__module__.startswith("domains."):
            out[name] = cls
    return out


def test_every_numeric_field_of_every_domain_has_a_lower_bound_unless_it_says_why():
    """Walks every field of every built-in domain's config: a number (int or float, optional or not) declares a
    lower bound that ``--set`` enforces, or is in UNBOUNDED with its reason."""
    configs = _builtin_configs()
    assert {"graph", "rl", "text", "vision"} <= set(configs)
    unbounded, checked = set(), 0
    for name, cls in configs.items():
        for key, tp in cfg.config_fields(cls).items():
            if not _numeric(tp):
                continue
            bounds = _lower_bounds(tp)
            if not bounds:
                unbounded.add((name, key))
                continue
            for bound in bounds:  # the bound is what --set enforces: just outside it is refused
                with pytest.raises(ValidationError):
                    cfg.parse_value(_below(bound), tp)
            checked += 1
    assert unbounded == UNBOUNDED, f"a numeric field with no range: {sorted(unbounded - UNBOUNDED)}; " \
                                   f"stale in UNBOUNDED: {sorted(UNBOUNDED - unbounded)}"
    assert checked >= 100  # 108 when written


def test_the_unbounded_pair_is_ordered():
    domain = domains.get("rl")
    with pytest.raises(ValueError, match="actor_log_std_min .* must not exceed actor_log_std_max"):
        domain.config_class(actor_log_std_min=0.0, actor_log_std_max=-1.0)
    assert domain.config_class(actor_log_std_min=-3.0, actor_log_std_max=-3.0).actor_log_std_min == -3.0
