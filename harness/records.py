"""Run records: one self-describing JSON file per run and a typed model of it (the machine it notes:
:mod:`harness.machine`; the code: :mod:`harness.version`).

A record is the :class:`RunRecord` model, written atomically (:func:`domains.files.write_atomic`) to
``<results>/<run_id>.json`` with the current :data:`SCHEMA_VERSION`. Reading one validates it against the model
and reads its schema version: an older record is migrated (:data:`MIGRATIONS`), a newer one is refused with a
message naming the file and the version. Every record read is then normalised against its domain's config class
as the code defines it now (:func:`normalize`), so old and new records of the same experiment share one identity.

Schema versions:

1. the first: ``config`` held every field of the domain's config dataclass, as set (``auto`` values unresolved).
2. ``config`` holds the experiment fields with effective values (the domain's ``resolve_config``), ``runtime``
   the runtime fields (:func:`domains.base.runtime_fields`): recorded, never hashed.
3. ``loss_used`` (``PretrainResult.loss_used``): False for a run whose method ignores the loss (evaluation only);
   version 2 said so as ``info["loss_ignored"]``.

Since version 3, ``software`` also holds the code's identity (:func:`harness.version.software_info`): the version,
the git commit, its date, the dirty flag and ``source_digest``, the digest of the packages' sources a run can
execute (:mod:`harness.run_code`) that a run's identity hashes. Records written before it have no digest;
:attr:`RunRecord.code` tells their code apart by commit. A run of a plugin's domain or loss hashes the plugin's
source into ``source_digest`` too, and its ``software`` names it: ``plugins`` (module -> digest) beside
``package_digest`` (the packages' own); so does a run of a dataset that runs the user's code (rl's
``gym:<module>:<id>``), under ``dataset_code`` (module -> digest): no plugin, which ``HARNESS_PLUGINS`` would load.

A record's names never decide a path: ``run_id`` must be a plain file name and ``domain`` a plain name (a page is
named after it), checked on load like every other field; its other names hold no control character
(:data:`CONTROL`): a page prints them as they are, and a newline would forge a row or a heading.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

import domains
from domains.base import Domain, RunSpec, describe_validation, split_config
from domains.errors import UserError
from domains.files import hash_jsonable, read_regular, refuse_link, write_atomic
from harness.version import source_digest

SCHEMA_VERSION = 3
# A name that may become (part of) a file name: no path separator, no leading dot, no control character.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+=@,-]*")
# The longest such name: a file name has 255 bytes, and the atomic writes' temporary ".<run_id>.json.<8>.tmp" must
# fit (a run of a longer id could not write its record either); "<domain>.md" and its temporary do then too.
MAX_NAME = 236
# What no name of a run holds and what would end a line of a page (a heading, a table row) or of a log: the C0 and
# C1 control characters (newline, NUL, ...), DEL, and Unicode's line and paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a file of the harness's (a run id, a domain's page), or None: it must be a
    :data:`PLAIN_NAME` without ``..``, of at most :data:`MAX_NAME` characters."""
    if len(value) > MAX_NAME:
        return (f"{value[:40]!r}... is {len(value)} characters long, more than the {MAX_NAME} a name that names a "
                "file may have")
    if not PLAIN_NAME.fullmatch(value) or ".." in value:
        return f"{value!r} is not a plain name (letters, digits and _.:+=@,- only; it names a file)"
    return None


class InvalidRecordError(UserError):
    """A file that is not a valid run record (not JSON, not an object, a field missing or of the wrong type)."""


class NewerRecordError(UserError):
    """A record of a schema version newer than this harness reads."""


class RunRecord(BaseModel):
    """One run (one seed), as ``harness run`` writes it. Free-form parts (config, details, curve, info) are JSON
    values; the fields the leaderboards, reports and comparisons read are typed."""

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    schema_version: int = Field(default=SCHEMA_VERSION, alias="schema")
    run_id: str = Field(min_length=1)
    status: Literal["completed", "failed"]
    error: str | None = None  # failed records only
    domain: str
    method: str
    dataset: str
    loss: str
    loss_params: dict[str, Any]
    seed: int = Field(ge=0)
    preset: str
    overrides: dict[str, Any]  # the --set values as given (the command's), not resolved
    config: dict[str, Any]  # experiment fields, effective values: the identity
    runtime: dict[str, Any]  # runtime fields: recorded, not hashed
    config_hash: str
    primary_metric: str
    higher_is_better: bool
    baseline_loss: str
    metrics: dict[str, float | None]  # None: not finite
    details: dict[str, Any]
    curve: list[dict[str, Any]]
    timings: dict[str, float]
    throughput: dict[str, float | None]
    info: dict[str, Any]
    loss_used: bool = True  # False: the method ignored the loss (evaluation only); no loss is compared on its row
    hardware: dict[str, Any]
    software: dict[str, Any]
    data_fingerprint: dict[str, Any]
    command: list[str]
    started_at: str
    finished_at: str
    resumed: bool

    @field_validator("run_id", "domain")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if problem := name_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("method", "dataset", "loss", "preset", "primary_metric", "baseline_loss")
    @classmethod
    def _one_line(cls, value: str) -> str:
        # The pages print these names as they are, in headings and prose too: a newline would forge a row or a section.
        if CONTROL.search(value):
            raise ValueError(f"{value!r} holds a control character (a newline, a NUL, ...); a name is one line of text")
        return value

    @field_validator("metrics")
    @classmethod
    def _finite_or_none(cls, value: dict[str, float | None]) -> dict[str, float | None]:
        # The writer stores NaN and infinity as null (``write_json_atomic``); a hand-made file's ``NaN`` literal
        # means the same, so every reader sees one "not finite".
        return {k: v if v is None or math.isfinite(v) else None for k, v in value.items()}

    @model_validator(mode="after")
    def _outcome(self) -> RunRecord:
        if self.status == "completed" and self.primary_metric not in self.metrics:
            raise ValueError(f"a completed record must report its primary metric '{self.primary_metric}' in metrics")
        if self.status == "failed" and not self.error:
            raise ValueError("a failed record must say its error")
        return self

    @property
    def diverged(self) -> bool:
        """A failed run whose training diverged (its loss turned non-finite): its record says so by a primary metric
        of null, where other failures report none; the pages count it as a seed whose metric is not finite."""
        return self.status == "failed" and self.primary_metric in self.metrics \
            and self.metrics[self.primary_metric] is None

    @property
    def has_result(self) -> bool:
        """Completed, or failed with training that diverged: a seed the pages count (its metric finite or not)."""
        return self.status == "completed" or self.diverged

    @property
    def version(self) -> str:
        """The ``contrastive-harness`` version that wrote the record."""
        return str(self.software.get("contrastive_harness", "0+unknown"))

    @property
    def commit(self) -> str | None:
        """The git commit of the code that wrote the record (None outside a checkout)."""
        value = self.software.get("git_commit")
        return value if isinstance(value, str) and value else None

    @property
    def code(self) -> str:
        """The identity of the code that ran: ``src:<source digest>``, or for records written before the digest
        was recorded ``git:<commit>`` (``+dirty`` when the tree was), else ``version:<version>``."""
        digest = self.software.get("source_digest")
        if isinstance(digest, str) and digest:
            return f"src:{digest}"
        if self.commit:
            return f"git:{self.commit}{'+dirty' if self.software.get('git_dirty') else ''}"
        return f"version:{self.version}"

    def code_parts(self) -> dict[str, str]:
        """The code by its parts: ``packages`` (this project's, as :attr:`code` names them) and, where plugins ran,
        ``plugin:<module>`` for each, and ``dataset:<module>`` for each module of the dataset's code. Two rows' code
        differs where a part both name differs: a plugin loss's own module is its loss, not other code."""
        packages = self.software.get("package_digest")
        parts = {f"{kind}:{m}": str(d) for key, kind in (("plugins", "plugin"), ("dataset_code", "dataset"))
                 for m, d in self._user_code(key).items()}
        if parts and isinstance(packages, str) and packages:
            return {"packages": f"src:{packages}", **parts}
        return {"packages": self.code}

    def _user_code(self, key: str) -> dict[str, Any]:
        """``software[key]`` (``plugins``, ``dataset_code``: module -> digest), or empty where there is none."""
        value = self.software.get(key)
        return value if isinstance(value, dict) else {}

    def code_label(self) -> str:
        """A short name of the code for pages: the abbreviated commit (``+dirty``, ``~<digest>`` where the
        sources differed from it), else the version; then each plugin's module and digest and the dataset's code's,
        which the commit does not name (an edited plugin in a clean tree is other code)."""
        digest = self.software.get("source_digest")
        if self.commit:
            dirty = "+dirty" if self.software.get("git_dirty") else ""
            label = f"{self.commit[:7]}{dirty}" + (f" (src {digest[:7]})" if dirty and digest else "")
        else:
            label = f"src {digest[:7]}" if isinstance(digest, str) and digest else self.version
        for key, name in (("plugins", "plugins"), ("dataset_code", "dataset code")):
            if modules := self._user_code(key):
                label += f" ({name} " + ", ".join(f"{m} {str(d)[:7]}" for m, d in sorted(modules.items())) + ")"
        return label

    @property
    def commit_date(self) -> str | None:
        """When the code's commit was made, as git gave it (None outside a checkout)."""
        date = self.software.get("git_commit_date")
        return date if isinstance(date, str) and date else None

    def code_time(self) -> str:
        """When the code was committed, else when the record was written: the order of code versions. ISO 8601 in
        UTC, so that times compare as text (git gives a commit's date in its committer's own UTC offset)."""
        return utc_iso(self.commit_date or self.finished_at)

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object written to its file."""
        return jsonable(self.model_dump(by_alias=True, exclude={"error"} if self.error is None else None))


REQUIRED_FIELDS = tuple(f.alias or name for name, f in RunRecord.model_fields.items() if f.is_required())


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    # Version 1 kept the runtime fields inside ``config``; normalize() moves them to ``runtime``.
    return {**data, "schema": 2, "runtime": {}}


def _from_v2(data: dict[str, Any]) -> dict[str, Any]:
    # Version 2 marked an evaluation-only run with info["loss_ignored"] (the text domain's bow and hf methods).
    info = data.get("info")
    if not isinstance(info, dict):
        return {**data, "schema": 3}  # validation names what is wrong
    ignored = info.get("loss_ignored", False)
    info = {k: v for k, v in info.items() if k != "loss_ignored"}
    return {**data, "schema": 3, "info": info, "loss_used": not ignored}


# version -> the function that turns a record of that version into one of the next
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1, 2: _from_v2}


def identity_hash(domain: str, method: str, dataset: str, loss: str, loss_params: dict[str, Any],
                  config: dict[str, Any]) -> str:
    """sha256 of the experiment: everything that defines a run except its seed, runtime fields, data and code."""
    return hash_jsonable({"domain": domain, "method": method, "dataset": dataset, "loss": loss,
                          "loss_params": loss_params, "config": config})


def config_hash(spec: RunSpec) -> str:
    """The :func:`identity_hash` of a run spec (its config is resolved: effective values)."""
    return identity_hash(spec.domain, spec.method, spec.dataset, spec.loss, spec.loss_params, spec.config_dict())


def _run_hash(experiment: str, data_fingerprint: dict[str, Any], code: str) -> str:
    return hash_jsonable({"config_hash": experiment, "data_fingerprint": jsonable(data_fingerprint), "code": code})


def run_hash(spec: RunSpec, data_fingerprint: dict[str, Any]) -> str:
    """sha256 of the experiment, the data's fingerprint and the code (:func:`harness.version.source_digest`): the
    identity of a run but for its seed. After a dataset's files, the package's sources or a plugin's change,
    neither the skip of a completed record nor ``--resume`` may reuse what was computed before."""
    return _run_hash(config_hash(spec), data_fingerprint, source_digest(spec.domain, spec.loss, spec.dataset))


def record_run_hash(record: RunRecord) -> str | None:
    """The run hash of what ``record`` says it ran (None for a record without a source digest)."""
    digest = record.software.get("source_digest")
    if not isinstance(digest, str):
        return None
    return _run_hash(record.config_hash, record.data_fingerprint, digest)


def run_id(spec: RunSpec, data_fingerprint: dict[str, Any]) -> str:
    """A readable, unique id: ``domain-dataset-method-loss-<8 hex of the run hash>-s<seed>``, a plain file name
    whatever the dataset is called (an ``hf:`` folder, a ``gym:`` id). Names past :data:`MAX_NAME` characters (an
    ``hf:`` folder deep in a file system) are cut to fit, the dataset's first: the files a run writes are named
    after its id, and the hash, which covers the whole dataset name, still tells two such runs apart."""
    domain, dataset, method, loss = [re.sub(r"[^A-Za-z0-9_.:+=@,-]", "_", str(p)).replace("..", "__")
                                     for p in (spec.domain, spec.dataset, spec.method, spec.loss)]
    tail = f"-{run_hash(spec, data_fingerprint)[:8]}-s{spec.seed}"
    dataset = dataset[:max(0, MAX_NAME - len(f"{domain}--{method}-{loss}{tail}"))]
    return f"{domain}-{dataset}-{method}-{loss}"[:MAX_NAME - len(tail)] + tail


def utc_now(timespec: str = "seconds") -> str:
    """Now, in UTC, as ISO 8601 to ``timespec``: a record's times take ``"microseconds"``, which order two runs
    made within one second (the newest of two codes, a seed's latest record), where the second alone tied them."""
    return datetime.now(timezone.utc).isoformat(timespec=timespec)


def utc_iso(stamp: str) -> str:
    """An ISO 8601 time in UTC, to the second or, where it has them, the microsecond; a time without an offset is
    taken as UTC, and text that is not a time is returned as it is. Such times compare as text: a whole second
    (``...:05+00:00``) sorts before any fraction of it (``...:05.000001+00:00``)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
    return moment.isoformat()


def jsonable(obj: Any) -> Any:
    """Numpy/torch scalars and arrays, paths and other objects -> plain JSON types; NaN/inf -> None."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, torch.Tensor):
        return jsonable(obj.detach().cpu().tolist())
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return jsonable(obj.tolist())
    return str(obj)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON (NaN/inf as null) atomically (:func:`domains.files.write_atomic`)."""
    write_atomic(path, json.dumps(jsonable(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def record_path(results: Path, rid: str) -> Path:
    return results / f"{rid}.json"


def domain_or_none(name: str) -> Domain | None:
    """The domain, for its config class, published rows, columns, labels and baselines; None when its code cannot
    be loaded here (a page must still be written from the records alone)."""
    try:
        return domains.get(name)
    except Exception:  # noqa: BLE001
        return None


def parse_record(data: Any, source: str | Path = "record") -> RunRecord:
    """Validate one record's JSON, migrating an older schema version. InvalidRecordError (naming ``source``, the
    field and the problem) when it is not a valid record, NewerRecordError when its version is newer."""
    if not isinstance(data, dict):
        raise InvalidRecordError(f"{source}: not a run record (a JSON object is expected)")
    version = data.get("schema")
    if type(version) is not int or version < 1:
        raise InvalidRecordError(f"{source}: not a run record: 'schema' must be a version number >= 1, got {version!r}")
    if version > SCHEMA_VERSION:
        raise NewerRecordError(f"{source}: written with record schema version {version}, newer than this harness "
                               f"reads ({SCHEMA_VERSION}); upgrade contrastive-harness to read it")
    for old in range(version, SCHEMA_VERSION):
        data = MIGRATIONS[old](data)
    try:
        return RunRecord.model_validate(data)
    except ValidationError as exc:
        raise InvalidRecordError(f"{source}: invalid run record: {describe_validation(exc, whole='record')}") from None


def normalize(record: RunRecord, domain: Domain | None, source: str | Path = "record") -> RunRecord:
    """``record`` against its domain's config class as the code defines it now: the domain first says what the
    record ran where its fields predate the class (``Domain.recorded_config``), then fields added to the class since
    the record was written take their defaults (a new field must default to the behaviour before it existed),
    ``auto`` values are resolved (``Domain.resolve_config``), each field sits in ``config`` or ``runtime`` as the
    class marks it now, and ``config_hash`` is recomputed. Unchanged when the domain cannot be loaded here, or
    cannot resolve the record's method or dataset (it does not know them, or cannot import what resolving needs);
    fields since removed from the class stay in ``config``.

    InvalidRecordError, naming ``source`` and the field where the class says which, when the class cannot build the
    recorded values (``"epochs": "x"``): kept as written, such a record would reach the pages without the fields
    the domain's code reads of every config (its setting note, its columns) and fail there."""
    if domain is None:
        return record
    values = domain.recorded_config({**record.runtime, **record.config}, record.details)
    cls = domain.config_class
    names = set().union(*split_config(cls()))  # every field has a default (the Domain protocol)
    try:
        built = cls(**{k: v for k, v in values.items() if k in names})
    except ValidationError as exc:
        raise InvalidRecordError(f"{source}: invalid run record: its config does not build the {record.domain} "
                                 f"domain's config: {describe_validation(exc, whole='config')}") from None
    try:
        experiment, runtime = split_config(domain.resolve_config(built, record.method, record.dataset))
    except (TypeError, ValueError, KeyError, ImportError, UserError):  # a task, method or dataset this code does
        return record  # not know (a collaborator's newer code, one since removed): the record is not at fault
    removed = {k: v for k, v in values.items() if k not in names}
    config = jsonable({**experiment, **removed})
    return record.model_copy(update={
        "config": config, "runtime": jsonable(runtime),
        "config_hash": identity_hash(record.domain, record.method, record.dataset, record.loss, record.loss_params,
                                     config)})


def load_record(path: Path, loaded: dict[str, Domain | None] | None = None) -> RunRecord:
    """The record at ``path``, validated, migrated and normalised. OSError when it cannot be opened, UserError when
    it is a link or no regular file (a FIFO would block the read for ever), InvalidRecordError / NewerRecordError
    (naming the file) otherwise. ``loaded`` caches domains across calls."""
    refuse_link(path, Path(path).parent)
    raw = read_regular(path)  # a FIFO or a device would hang the read: refused, naming the file
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep, an integer of 4300+ digits
        raise InvalidRecordError(f"{path}: not JSON (truncated or corrupted)") from None
    record = parse_record(data, path)
    loaded = {} if loaded is None else loaded
    if record.domain not in loaded:
        loaded[record.domain] = domain_or_none(record.domain)
    return normalize(record, loaded[record.domain], path)


def read_record(path: Path) -> RunRecord | None:
    """The record at ``path``, or None when it is absent or damaged (a run then runs again); NewerRecordError
    when it was written by a newer harness (running again would overwrite it)."""
    try:
        return load_record(path)
    except (OSError, InvalidRecordError):
        return None


def set_aside_damaged(path: Path) -> Path | None:
    """Move the record file at ``path`` to ``<name>.damaged`` (``.damaged.1``, ... if taken) when it cannot be read
    as a record (truncated, or edited into an invalid one), with a warning naming both: a run about to write its
    record there must not lose what the file held. The new path; None when there is nothing to set aside."""
    try:
        load_record(path)
        return None
    except OSError:
        return None  # absent (or unreadable: writing the record will say so)
    except InvalidRecordError as exc:
        aside, n = path.with_name(f"{path.name}.damaged"), 0
        while aside.exists():
            n += 1
            aside = path.with_name(f"{path.name}.damaged.{n}")
        os.replace(path, aside)
        warnings.warn(f"{exc}; moved it to {aside.name} before the run writes its record", UserWarning, stacklevel=2)
        return aside


def is_completed(results: Path, rid: str) -> bool:
    """Whether a completed record is stored under ``rid`` (whatever run it holds: see :func:`reusable`)."""
    record = read_record(record_path(results, rid))
    return record is not None and record.status == "completed"


def reusable(results: Path, spec: RunSpec, data_fingerprint: dict[str, Any]) -> RunRecord | None:
    """The completed record of exactly this run (seed, experiment, data and code), which a run may reuse instead
    of running; None when there is none (absent, failed, damaged: the run runs and writes it).

    The file name is not trusted: the record's own contents must give this run's hash. UserError, naming the file
    and what differs, when it holds another run's record (copied or edited under this run's id); replacing it
    would lose a file, reusing it would report a run that never happened."""
    rid = run_id(spec, data_fingerprint)
    path = record_path(results, rid)
    record = read_record(path)
    if record is None or record.status != "completed":
        return None
    expected = {"run id": rid, "seed": spec.seed, "experiment (config)": config_hash(spec),
                "data": hash_jsonable(jsonable(data_fingerprint)),
                "code": source_digest(spec.domain, spec.loss, spec.dataset),
                "run hash": run_hash(spec, data_fingerprint)}
    actual = {"run id": record.run_id, "seed": record.seed, "experiment (config)": record.config_hash,
              "data": hash_jsonable(record.data_fingerprint), "code": record.software.get("source_digest"),
              "run hash": record_run_hash(record)}
    differ = [name for name in expected if expected[name] != actual[name]]
    if differ:
        raise UserError(f"{path} holds a record that is not this run's (its {', '.join(differ)} differ): move it "
                        "away, or rerun with --force to replace it")
    return record


def load_record_files(results: Iterable[Path] | Path, *, completed_only: bool = True) -> list[tuple[Path, RunRecord]]:
    """(path, record) of every record (``*.json``, not hidden) in the results folders, sorted by run id.

    UserError, naming them and why, when a folder does not exist or a file cannot be read as a record (truncated,
    corrupted, not a run record, a newer schema, or a file not named after its run id, as a copy would be): a page
    or a gate built without them would silently lose results, and one built with a copy would count a run twice.
    """
    dirs = [Path(results)] if isinstance(results, (str, Path)) else [Path(d) for d in results]
    out, unreadable = [], []
    loaded: dict[str, Domain | None] = {}
    for directory in dirs:
        if not directory.is_dir():
            raise UserError(f"results folder '{directory}' does not exist (or is not a folder); nothing was written")
        for path in sorted(directory.glob("*.json")):
            if path.name.startswith("."):
                continue
            try:
                refuse_link(path, directory)
                record = load_record(path, loaded)
            except (OSError, UserError) as exc:
                unreadable.append(str(exc) if isinstance(exc, UserError) else f"{path}: {exc.strerror or exc}")
                continue
            if path.name != f"{record.run_id}.json":
                unreadable.append(f"{path}: holds the record of run {record.run_id}, whose file is "
                                  f"{record.run_id}.json (a copy or a renamed file)")
                continue
            if not completed_only or record.status == "completed":
                out.append((path, record))
    if unreadable:
        raise UserError(f"{len(unreadable)} record file(s) cannot be read: {'; '.join(unreadable)}. Repair or "
                        "remove them (a damaged record's own harness run, run again, moves it aside to <file>.damaged "
                        "and writes it anew); nothing was written")
    return sorted(out, key=lambda pr: (pr[1].run_id, pr[1].version))


def load_records(results: Iterable[Path] | Path, *, completed_only: bool = True) -> list[RunRecord]:
    """The records of :func:`load_record_files`, without their paths."""
    return [record for _, record in load_record_files(results, completed_only=completed_only)]
