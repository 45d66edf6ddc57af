""""Evaluation only" is one thing: ``PretrainResult.loss_used``, written by the runner as the record's ``loss_used``
and read by the groups; records of schema 2, which said it as ``info["loss_ignored"]``, migrate to it."""

from __future__ import annotations

import dataclasses
import json

import tiny_domain
from tiny_domain import synthetic_record

from domains.base import PretrainResult
from harness.cli import main
from harness.groups import group_records
from harness.records import SCHEMA_VERSION, parse_record


def _v2(**info) -> dict:
    record = {**synthetic_record("infonce", 0, 90.0, method="linear2"), "schema": 2, "info": info}
    record.pop("loss_used", None)
    return record


def test_a_schema_2_record_says_evaluation_only_as_loss_used():
    old = parse_record(_v2(trained=False, loss_ignored=True))
    assert old.schema_version == SCHEMA_VERSION and old.loss_used is False and old.info == {"trained": False}
    assert parse_record(_v2(trained=True)).loss_used is True
    [group] = group_records([old])
    assert not group.loss_used and group.loss_label() == "none (evaluation only)"


def test_a_current_record_keeps_loss_used():
    record = parse_record({**synthetic_record("infonce", 0, 90.0), "loss_used": False})
    assert record.to_json()["loss_used"] is False and parse_record(record.to_json()).loss_used is False
    assert parse_record(synthetic_record("infonce", 0, 90.0)).loss_used is True  # the default: the loss was used


def test_the_runner_writes_what_pretrain_says(tmp_path, monkeypatch):
    assert PretrainResult(model=None).loss_used is True
    original = tiny_domain.TinyDomain.pretrain

    def evaluation_only(self, *args, **kwargs):
        return dataclasses.replace(original(self, *args, **kwargs), loss_used=False)

    monkeypatch.setattr(tiny_domain.TinyDomain, "pretrain", evaluation_only)
    assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                 "--results", str(tmp_path), "--quiet"]) == 0
    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert record["loss_used"] is False and record["schema"] == SCHEMA_VERSION
