"""Run records: one self-describing JSON file per run, written atomically, and the environment they note.

A record is written to a unique temporary file in the results directory and renamed over
``<run_id>.json`` (``os.replace`` is atomic on POSIX), so a reader or a crash never sees half a record
and several processes can write into one directory at once.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from domains.base import RunSpec, UserError, hash_jsonable
from harness.version import package_version

SCHEMA_VERSION = 1
REQUIRED_FIELDS = (
    "schema", "run_id", "status", "domain", "method", "dataset", "loss", "loss_params", "seed", "preset",
    "overrides", "config", "config_hash", "metrics", "primary_metric", "higher_is_better", "baseline_loss",
    "details", "curve", "timings", "throughput", "info", "hardware", "software", "data_fingerprint", "command",
    "started_at", "finished_at",
)


def config_hash(spec: RunSpec, version: str | None = None) -> str:
    """sha256 of everything that defines a run except its seed, including the package version."""
    return hash_jsonable({
        "domain": spec.domain, "method": spec.method, "dataset": spec.dataset, "loss": spec.loss,
        "loss_params": spec.loss_params, "config": spec.config_dict(),
        "version": version or package_version(),
    })


def run_hash(spec: RunSpec, data_fingerprint: dict[str, Any]) -> str:
    """sha256 of the config hash and the data's fingerprint: the identity of a run but for its seed.

    The data belongs to it: after a dataset's files change, neither the skip of a completed record nor
    ``--resume`` may reuse what was computed on the old files.
    """
    return hash_jsonable({"config_hash": config_hash(spec), "data_fingerprint": jsonable(data_fingerprint)})


def run_id(spec: RunSpec, data_fingerprint: dict[str, Any]) -> str:
    """A readable, unique id: ``domain-dataset-method-loss-<8 hex of the run hash>-s<seed>``."""
    safe = [str(p).replace("/", "_").replace(" ", "_") for p in (spec.domain, spec.dataset, spec.method, spec.loss)]
    return "-".join([*safe, run_hash(spec, data_fingerprint)[:8], f"s{spec.seed}"])


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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


def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a unique temporary file in the same directory and a rename.

    A crash or a failed write leaves the old file intact. The file gets the mode any other new file
    would (0666 less the umask), not mkstemp's private 0600, so a shared results folder stays readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON (NaN/inf as null) atomically, as :func:`write_text_atomic` does."""
    write_text_atomic(path, json.dumps(jsonable(data), indent=2, sort_keys=True, allow_nan=False) + "\n")


def record_path(results: Path, rid: str) -> Path:
    return results / f"{rid}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or None when it is absent or unreadable."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, json.JSONDecodeError):
        return None


def is_completed(results: Path, rid: str) -> bool:
    record = read_record(record_path(results, rid))
    return bool(record) and record.get("status") == "completed"


def load_record_files(results: Iterable[Path] | Path, *,
                      completed_only: bool = True) -> list[tuple[Path, dict[str, Any]]]:
    """(path, record) of every record (``*.json``, not hidden) in the results folders, sorted by run id.

    UserError, naming them, when a folder does not exist or a file cannot be read as a record (truncated,
    corrupted, not a run record): a page or a gate built without them would silently lose results.
    """
    dirs = [Path(results)] if isinstance(results, (str, Path)) else [Path(d) for d in results]
    out, unreadable = [], []
    for directory in dirs:
        if not directory.is_dir():
            raise UserError(f"results folder '{directory}' does not exist (or is not a folder); nothing was written")
        for path in sorted(directory.glob("*.json")):
            record = read_record(path)
            if not isinstance(record, dict) or not isinstance(record.get("run_id"), str):
                unreadable.append(path)
            elif not completed_only or record.get("status") == "completed":
                out.append((path, record))
    if unreadable:
        names = ", ".join(str(p) for p in unreadable)
        raise UserError(f"{len(unreadable)} record file(s) cannot be read (truncated, corrupted or not a run "
                        f"record): {names}; repair or remove them (rerun a run with --force to rewrite its "
                        "record); nothing was written")
    return sorted(out, key=lambda pr: (pr[1]["run_id"], record_version(pr[1])))


def load_records(results: Iterable[Path] | Path, *, completed_only: bool = True) -> list[dict[str, Any]]:
    """The records of :func:`load_record_files`, without their paths."""
    return [record for _, record in load_record_files(results, completed_only=completed_only)]


def record_version(record: dict[str, Any]) -> str:
    return str(record.get("software", {}).get("contrastive_harness", "0+unknown"))


def _git(*args: str) -> str | None:
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def software_info() -> dict[str, Any]:
    """Package version, and the git commit (with a dirty flag) when the code is a git checkout."""
    commit = _git("rev-parse", "HEAD")
    dirty = None if commit is None else bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {"contrastive_harness": package_version(), "git_commit": commit, "git_dirty": dirty}


def hardware_info(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = platform.processor() or platform.machine()
    return {
        "device": str(device), "device_name": name, "cpu_count": os.cpu_count(),
        # CPU results depend slightly on the thread count (the order of float reductions), so it is recorded.
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "platform": platform.platform(),
    }
