"""``tools/campaign pack`` and ``unpack`` against hostile or unlucky input (an adversarial audit): pack reads no
file of the stage through a symbolic link; unpack reads no member beyond its manifest's size nor beyond a cap on
the whole, replaces no file of the repository that the GPU machine did not start from, and checks every
destination before it writes the first file, so a refusal writes nothing."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from tiny_domain import synthetic_record

from domains.errors import UserError
from harness.suites.pack import MANIFEST, pack


def _tarball(path: Path, *members: tuple, manifest: object = None) -> Path:
    """Members ``(name, kind, data)`` or ``(name, kind, data, entry)`` with the manifest entry's fields to change
    (``None`` kind: a member the manifest does not list); ``manifest`` replaces the whole manifest."""
    entries = []
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data, *change in members:
            if kind is not None:
                entries.append({"path": name, "kind": kind, "bytes": len(data),
                                "sha256": hashlib.sha256(data).hexdigest(), **(change[0] if change else {})})
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        text = json.dumps({"members": entries} if manifest is None else manifest).encode()
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(text)
        tar.addfile(info, io.BytesIO(text))
    return path


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
            and not p.is_symlink()} if root.exists() else {}


def _record(seed: int = 0) -> tuple[str, bytes]:
    record = synthetic_record("infonce", seed, 0.5)
    return f"leaderboards/results/{record['run_id']}.json", json.dumps(record).encode()


# pack: no link of the stage is followed


@pytest.mark.parametrize("where", ["log", "checkpoint", "bench", "campaign log", "folder"])
def test_pack_refuses_a_symbolic_link_in_the_stage_and_writes_no_tarball(tmp_path, where):
    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0\n")
    name, data = _record()
    staged = stage / "leaderboards" / "results"
    staged.mkdir(parents=True)
    (staged / Path(name).name).write_bytes(data)
    links = {"log": staged / Path(name).with_suffix(".log").name,
             "checkpoint": staged / ".work" / "tiny-blobs-linear-infonce-0123abcd-s9" / "checkpoint.pt",
             "bench": stage / "leaderboards" / "bench" / "tiny-cpu.json",
             "campaign log": stage / "campaign.log"}
    if where == "folder":  # a run's .work folder that is a link to a folder holding a checkpoint.pt
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "checkpoint.pt").write_text("root:x:0:0\n")
        (staged / ".work").mkdir()
        (staged / ".work" / "tiny-blobs-linear-infonce-0123abcd-s9").symlink_to(elsewhere)
    else:
        links[where].parent.mkdir(parents=True, exist_ok=True)
        links[where].symlink_to(secret)
    with pytest.raises(UserError, match="is a symbolic link"):
        pack(stage, out, repo, checkpoints=True)
    assert not list(out.glob("*")) if out.exists() else True
