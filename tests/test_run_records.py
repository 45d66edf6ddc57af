"""Run records as a typed model (harness.records.RunRecord): what a run writes reads back unchanged, a bad
record is named with its field, an old schema migrates, a newer one is refused, and a run's identity covers
effective experiment values only (runtime fields and ``auto`` values never split a setting)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_domain import TinyDomain, synthetic_record, write_records

import domains
from domains.base import RUNTIME
from domains.errors import UserError
from domains.files import write_atomic
from harness.cli import main
from harness.groups import group_key, group_records
from harness.pages.leaderboard import MANIFEST
from harness.records import (
    MAX_NAME,
    SCHEMA_VERSION,
    InvalidRecordError,
    NewerRecordError,
    RunRecord,
    config_hash,
    identity_hash,
    load_record,
    load_record_files,
    name_problem,
    normalize,
    parse_record,
    run_id,
)
from harness.run.runner import RunRequest, plan
from harness.tables import markdown

COMMITTED = Path(__file__).resolve().parents[1] / "leaderboards"


@dataclass
class ProbeConfig:
    """A config with an ``auto`` value (temperature 0: 0.5) and a runtime field, for a domain never registered."""

    epochs: int = 3
    temperature: float = 0.0
    workers: int = field(default=1, metadata={RUNTIME: True})


class ProbeDomain(TinyDomain):
    config_class = ProbeConfig

    def resolve_config(self, config: ProbeConfig, method: str, dataset: str) -> ProbeConfig:
        return replace(config, temperature=config.temperature or 0.5)


def test_a_run_record_reads_back_as_written(tmp_path):
    assert main(["run", "--domain", "tiny", "--loss", "dcl", "--seeds", "0", "--set", "epochs=1", "--results",
                 str(tmp_path), "--quiet"]) == 0
    [path] = tmp_path.glob("*.json")
    written = json.loads(path.read_text())
    assert written["schema"] == SCHEMA_VERSION and "error" not in written
    record = load_record(path)
    assert record.to_json() == written
    assert RunRecord.model_validate(record.to_json()) == record


@pytest.mark.parametrize("damage, field_name, message", [
    (lambda r: r["metrics"].update(accuracy="high"), "metrics.accuracy", "valid number"),
    (lambda r: r.pop("seed"), "seed", "Field required"),
    (lambda r: r.update(seed=-1), "seed", "greater than or equal to 0"),
    (lambda r: r.update(status="done"), "status", "'completed' or 'failed'"),
    (lambda r: r.update(surprise=1), "surprise", "Extra inputs"),
    (lambda r: r.update(metrics={"other": 1.0}), "record", "primary metric 'accuracy'"),
])
def test_an_invalid_record_is_named_with_its_field(tmp_path, damage, field_name, message):
    records = [synthetic_record("infonce", s, 80.0 + s) for s in range(2)]
    damage(records[1])
    write_records(tmp_path, records)
    with pytest.raises(UserError) as err:
        load_record_files(tmp_path)
    text = str(err.value)
    assert f"{records[1]['run_id']}.json: invalid run record: {field_name}: " in text and message in text
    assert "1 record file(s) cannot be read" in text


def test_a_failed_record_says_its_error():
    record = synthetic_record("infonce", 0, 0.0, status="failed")
    assert parse_record(record).error
    with pytest.raises(InvalidRecordError, match="a failed record must say its error"):
        parse_record({**record, "error": ""})


def test_a_newer_schema_is_refused_naming_the_file_and_the_version(tmp_path):
    write_records(tmp_path, [{**synthetic_record("infonce", 0, 80.0), "schema": SCHEMA_VERSION + 1}])
    with pytest.raises(UserError, match=rf"written with record schema version {SCHEMA_VERSION + 1}, newer than "
                                        rf"this harness reads \({SCHEMA_VERSION}\); upgrade") as err:
        load_record_files(tmp_path)
    assert "tiny-blobs-linear-infonce" in str(err.value)
    with pytest.raises(NewerRecordError):
        parse_record({"schema": SCHEMA_VERSION + 1})
    with pytest.raises(InvalidRecordError, match="'schema' must be a version number"):
        parse_record({"run_id": "x"})


def _v1(config: dict) -> dict:
    """A record as schema version 1 wrote it: no ``runtime``, the runtime fields inside ``config``."""
    record = synthetic_record("dcl", 0, 80.0, loss_params={"tau_plus": 0.1}, config=config)
    del record["runtime"]
    return {**record, "schema": 1}


def test_an_old_record_migrates_to_the_identity_of_a_new_one():
    domain = ProbeDomain()
    # Written before `temperature` existed (its default, 0 = auto, reproduces what ran) with a runtime field set.
    old = normalize(parse_record(_v1({"epochs": 3, "workers": 4})), domain)
    assert old.schema_version == SCHEMA_VERSION
    assert old.config == {"epochs": 3, "temperature": 0.5} and old.runtime == {"workers": 4}
    assert old.config_hash == identity_hash("tiny", "linear", "blobs", "dcl", {"tau_plus": 0.1}, old.config)
    # The same experiment written now, with the temperature set explicitly and another runtime value.
    new = synthetic_record("dcl", 1, 81.0, loss_params={"tau_plus": 0.1}, config={"epochs": 3, "temperature": 0.5})
    new = normalize(parse_record({**new, "runtime": {"workers": 1}}), domain)
    assert new.config_hash == old.config_hash and new.runtime == {"workers": 1}
    [group] = group_records([old, new])
    assert group.values == {0: 80.0, 1: 81.0}
    # Another temperature is another experiment.
    other = normalize(parse_record(_v1({"epochs": 3, "temperature": 0.2})), domain)
    assert other.config_hash != old.config_hash


def test_a_record_of_a_domain_not_installed_is_kept_as_written():
    record = parse_record(_v1({"epochs": 3, "workers": 4}))
    assert normalize(record, None) == record and record.config == {"epochs": 3, "workers": 4}


def _spec(domain: str, **sets: str):
    return plan(RunRequest(domain=domain, loss="infonce", seeds=[0], sets=dict(sets))).specs[0]


def test_runtime_fields_do_not_change_a_runs_identity():
    default, busy = _spec("graph"), _spec("graph", svm_jobs="4", download="false")
    assert busy.runtime_dict() == {"svm_jobs": 4, "download": False}
    assert "svm_jobs" not in busy.config_dict() and busy.config_dict() == default.config_dict()
    assert config_hash(busy) == config_hash(default)
    fingerprint = {"dataset": "synthetic-motifs"}
    assert run_id(busy, fingerprint) == run_id(default, fingerprint)
    assert config_hash(_spec("graph", epochs="6")) != config_hash(default)


def test_vision_temperature_default_and_its_explicit_value_are_one_setting():
    default, explicit = _spec("vision"), _spec("vision", temperature="0.5")
    assert default.config.temperature == explicit.config.temperature == 0.5  # SimCLR's (Chuang et al. 2020)
    assert default.config.arch == "small" and default.config.augment == "simclr"  # auto, resolved as it runs
    assert config_hash(default) == config_hash(explicit)
    assert run_id(default, {"d": 1}) == run_id(explicit, {"d": 1})
    [key] = {group_key(s.domain, s.dataset, s.method, s.loss, s.loss_params, s.config_dict())
             for s in (default, explicit)}
    assert config_hash(_spec("vision", temperature="0.2")) != config_hash(default)


def _listed() -> list[str]:
    lines = (COMMITTED / MANIFEST).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.skipif(not (COMMITTED / MANIFEST).is_file(), reason="no committed leaderboards")
def test_committed_records_share_the_identity_of_the_command_that_reproduces_them():
    """Each committed group's latest record, migrated and normalised, hashes like a new run of the command it
    records, with the values its domain says it ran where a default has changed since (``recorded_config``): a
    config field added without a default that reproduces the old runs, or an ``auto`` value left unresolved, would
    split the committed settings from the ones a user runs now."""
    records = {}
    for path, record in load_record_files([COMMITTED / "results"]):
        if record.run_id + ".json" in _listed():
            records[group_key(record.domain, record.dataset, record.method, record.loss, record.loss_params,
                              record.config)] = path, record
    assert records
    for path, record in records.values():
        args = dict(zip(record.command[2::2], record.command[3::2]))
        sets = dict(v.split("=", 1) for k, v in zip(record.command[2::2], record.command[3::2]) if k == "--set")
        raw = json.loads(path.read_text())
        said = domains.get(record.domain).recorded_config({**raw.get("runtime", {}), **raw["config"]}, raw["details"])
        sets.update({k: json.dumps(v) if isinstance(v, bool) else str(v) for k, v in said.items()
                     if raw["config"].get(k) != v})
        try:
            spec = plan(RunRequest(domain=args["--domain"], loss=args["--loss"], method=args["--method"],
                                   dataset=args["--dataset"], seeds=[record.seed], preset=args["--preset"],
                                   sets=sets)).specs[0]
        except UserError as exc:  # a domain whose extra is not installed here
            pytest.skip(str(exc))
        assert config_hash(spec) == record.config_hash, record.run_id


def test_the_atomic_writer_takes_text_bytes_or_a_writer(tmp_path):
    write_atomic(tmp_path / "a.txt", "π ± 1\n")
    write_atomic(tmp_path / "b.bin", b"\x00\x01")
    write_atomic(tmp_path / "c.pt", lambda fh: torch.save({"x": torch.arange(3)}, fh))
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "π ± 1\n"
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert torch.equal(torch.load(tmp_path / "c.pt", weights_only=True)["x"], torch.arange(3))
    with pytest.raises(ZeroDivisionError):
        write_atomic(tmp_path / "a.txt", lambda fh: 1 / 0)
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "π ± 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin", "c.pt"]


def test_markdown_cells_cannot_break_the_table():
    assert markdown(["a", "b"], [["x|y", "two\nlines"]]) == ["| a | b |", "|---|---|", "| x\\|y | two lines |"]


def _image_folder(folder: Path) -> Path:
    """An ``hf:`` image folder of a few random 8x8 PNGs, two classes (12 a split: the evaluation takes 10 or more)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for i in range(12):
            (folder / split / str(i % 2)).mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(folder / split / str(i % 2) /
                                                                                  f"{i}.png")
    return folder


def test_a_dataset_named_by_a_long_path_runs_and_its_id_fits_a_file_name(tmp_path, monkeypatch, capsys):
    """A run id is a file name: an ``hf:`` folder 250 characters deep made one too long to write (OSError, a
    traceback, after the data was read). The id is cut to fit, the dataset's name first, keeping the method, loss,
    hash and seed; two folders that differ only past the cut get two ids (the hash covers the whole name)."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    deep = tmp_path / ("d" * 120) / ("e" * 120)
    folder, twin = _image_folder(deep / "set1"), deep / "set2"
    specs = [plan(RunRequest("vision", "infonce", dataset=f"hf:{f}", seeds=[0])).specs[0] for f in (folder, twin)]
    ids = [run_id(spec, {"d": 1}) for spec in specs]
    assert ids[0] != ids[1] and all(len(rid) <= MAX_NAME and name_problem(rid) is None for rid in ids), ids
    assert all(rid.startswith("vision-hf:_") and rid.endswith("-s0") and "-simclr-infonce-" in rid for rid in ids)
    results = tmp_path / "results"
    assert main(["run", "--domain", "vision", "--dataset", f"hf:{folder}", "--loss", "infonce", "--seeds", "0",
                 "--results", str(results), "--tracker", "none", "--quiet", "--set", "epochs=1",
                 "--set", "batch_size=8"]) == 0, capsys.readouterr().err
    [path] = results.glob("*.json")
    record = load_record(path)
    assert record.dataset == f"hf:{folder}" and path.name == f"{record.run_id}.json" and len(record.run_id) <= MAX_NAME
