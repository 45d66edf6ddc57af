"""Every committed record (``leaderboards/results``, ``leaderboards/prior``), read raw and through
``harness.records.load_record`` (schema migrations, ``Domain.recorded_config``, today's defaults): a migration
keeps what the record says it ran. Reading only; about two seconds for the ~2,200 files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.records import load_record

REPO = Path(__file__).resolve().parent.parent
FOLDERS = (REPO / "leaderboards" / "results", REPO / "leaderboards" / "prior")


def _records() -> list[tuple[Path, dict, object]]:
    loaded: dict = {}
    out = [(path, json.loads(path.read_text()), load_record(path, loaded))
           for folder in FOLDERS for path in sorted(folder.glob("*.json"))]
    assert len(out) > 1000  # the folders were found
    return out


@pytest.fixture(scope="module")
def records() -> list[tuple[Path, dict, object]]:
    return _records()


def test_protocol_classifier_and_loss_parameters_survive_the_migration(records):
    for path, raw, record in records:
        assert (record.loss, record.loss_params) == (raw["loss"], raw["loss_params"]), path.name
        if "protocol" in raw["details"]:
            assert record.details["protocol"] == raw["details"]["protocol"], path.name
        if "classifier" in raw["config"]:
            assert record.config["classifier"] == raw["config"]["classifier"], path.name


def _classifiers_said(details: dict) -> set[str]:
    """What a text record's details say ran, read from its protocol label (and each task's classifier where
    recorded), independently of the domain's code."""
    said = {r["classifier"] for r in [*details.get("tasks", {}).values(), details.get("synthetic", {})]
            if "classifier" in r}
    label = details.get("protocol", "")
    if "(torch)" in label:
        said.add("torch")
    if "scikit-learn" in label or label == "senteval package":
        said.add("sklearn")
    return said


def test_text_records_are_configured_as_their_protocol_says(records):
    """A text record's migrated config names the classifier its protocol label says ran (a record with neither
    label nor per-task classifier predates the torch classifier: scikit-learn), and z-scored features only where
    a torch classifier ran with probe_standardize on, before the option reached scikit-learn (or where
    ``details["standardized"]`` says so, since)."""
    text = [(path, raw, record) for path, raw, record in records if raw["domain"] == "text"]
    assert len(text) > 200
    for path, raw, record in text:
        said = _classifiers_said(raw["details"])
        assert len(said) <= 1, path.name
        if not said:
            assert "classifier" not in raw["config"], path.name
        assert record.config["classifier"] == (said.pop() if said else "sklearn"), path.name
        if "standardized" in raw["details"]:
            standardized = raw["details"]["standardized"]
        else:
            standardized = raw["config"].get("probe_standardize", False) and record.config["classifier"] == "torch"
        assert record.config["probe_standardize"] == standardized, path.name
