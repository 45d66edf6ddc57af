"""The typed configs: every domain's config is a pydantic dataclass whose field constraints give ``--set`` its
parsing and its one error style (its bad values are checked in test_config_constraints.py), whose presets all
build, and whose identity (the hash of ``config_dict()``) and value types are those of the records already
committed."""

from __future__ import annotations

import dataclasses
import json

import pytest

import domains
from domains.base import RunSpec, runtime_fields
from domains.errors import UserError
from domains.files import hash_jsonable
from harness.run import config as cfg

DOMAINS = ("graph", "vision", "text", "rl")

# hash_jsonable(config_dict()) of each domain's default method and dataset, taken before the configs were typed:
# the identity of the committed records must not move.
IDENTITY = {
    ("graph", "paper"): "05e4a3f96db6581d95ee927d957c6e44b9453d973983a9b2274998afa9d437ca",
    ("graph", "quick"): "5764da83b0eec563b260c040a6378295b91839176a653ce794a0ce572dc78d26",
    ("rl", "paper"): "c696aa91f0cf829de12152471fbb18346ac57927f0e44ca15ca4616439e1b5fe",
    ("rl", "quick"): "5d3634699209b4f2a991fd206c8a0d529e9bcec53c86156ebac2f16143c5c3b9",
    ("text", "paper"): "cac65b3869ac552d633b8502231287fa88ea3226be5241d7f2ecae70615f68fd",
    ("text", "quick"): "126f9a7807368e68d10e2f7ff904771ac0bf28d42c2b0a49dcb4c63cace756e4",
    ("vision", "paper"): "613815a529909fb01d9a584ab86d08b64db0eafc72bc720c8a62102691b4409c",
    ("vision", "quick"): "a2032173b15842e525c44a7be235ae6a37a68a4f96c6de3905d140c4d7848f26",
}
# defaults changed since, with the value they had when IDENTITY was taken (text: SentEval's raw features, issue 27)
MOVED = {"text": {"probe_standardize": "true"}}
RUNTIME = {"graph": {"svm_jobs", "download"}, "vision": {"compile", "cuda_graph", "num_workers", "download"},
           "text": {"log_every", "checkpoint_every", "eval_jobs", "eval_batch_size"},
           "rl": {"checkpoint_freq", "cuda_graph"}}


def _spec(name: str, preset: str, sets: dict[str, str] | None = None) -> RunSpec:
    domain = domains.get(name)
    config, _ = cfg.resolve_config(domain, preset, sets or {})
    config = domain.resolve_config(config, domain.default_method, domain.default_dataset)
    return RunSpec(name, domain.default_method, domain.default_dataset, "infonce", {}, preset, 0, config)


def _typed(values: dict) -> dict:
    return {k: (v, type(v)) for k, v in values.items()}


@pytest.mark.parametrize(("name", "preset"), sorted(IDENTITY))
def test_the_identity_of_the_defaults_is_unchanged(name, preset):
    assert hash_jsonable(_spec(name, preset, MOVED.get(name)).config_dict()) == IDENTITY[name, preset]


def test_a_field_added_later_is_hashed_only_away_from_its_default():
    """rl's encoder_bf16 came after the committed records: at its default a run keeps their identity (above);
    set, it is another experiment."""
    default = _spec("rl", "paper", MOVED.get("rl")).config_dict()
    assert "encoder_bf16" not in default
    changed = _spec("rl", "paper", {"encoder_bf16": "true"}).config_dict()
    assert changed["encoder_bf16"] is True and hash_jsonable(changed) != IDENTITY["rl", "paper"]


@pytest.mark.parametrize("name", DOMAINS)
def test_every_preset_builds_and_round_trips_with_its_types(name):
    domain = domains.get(name)
    cls = domain.config_class
    assert runtime_fields(cls) == RUNTIME[name]
    for preset in domain.presets:
        config, _ = cfg.resolve_config(domain, preset, {})
        for method in domain.methods:
            resolved = domain.resolve_config(config, method, domain.default_dataset)
            values = dataclasses.asdict(resolved)
            assert _typed(dataclasses.asdict(cls(**values))) == _typed(values), (preset, method)
            # a record stores JSON (lists for tuples): reading it back gives the same values and types
            assert _typed(dataclasses.asdict(cls(**json.loads(json.dumps(values))))) == _typed(values)


@pytest.mark.parametrize("name", DOMAINS)
def test_format_value_reads_back_as_the_same_value(name):
    cls = domains.get(name).config_class
    types = cfg.config_fields(cls)
    for key, value in dataclasses.asdict(cls()).items():
        assert _typed({key: cfg.parse_value(cfg.format_value(value), types[key])}) == _typed({key: value})


@pytest.mark.parametrize(("name", "sets", "expected"), [
    ("graph", {"epochs": "1e1", "standardize": "yes", "lr": "1"}, {"epochs": 10, "standardize": True, "lr": 1.0}),
    ("vision", {"temperature": "0.5", "arch": "resnet18"}, {"temperature": 0.5, "arch": "resnet18"}),
    ("text", {"books": "a, b", "senteval_tasks": "MR,CR"}, {"books": ("a", "b"), "senteval_tasks": ("MR", "CR")}),
    ("rl", {"action_repeat": "none", "lr": "2e-4"}, {"action_repeat": None, "lr": 2e-4}),
])
def test_a_good_value_gets_the_fields_type(name, sets, expected):
    _, overrides = cfg.resolve_config(domains.get(name), "quick", sets)
    assert _typed(overrides) == _typed(expected)


def test_a_preset_naming_no_field_is_refused():
    domain = domains.get("graph")
    with pytest.raises(ValueError, match="epoch"):
        domain.config_class(epoch=3)  # a typo in a preset is an error, not a silently ignored key
    with pytest.raises(UserError, match="unknown --set key 'epoch' for domain 'graph'; did you mean 'epochs'?"):
        cfg.resolve_config(domain, "quick", {"epoch": "3"})
