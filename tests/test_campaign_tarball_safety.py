"""``tools/campaign pack`` and ``unpack`` against hostile or unlucky input (an adversarial audit): pack reads no
file of the stage through a symbolic link; unpack reads no member beyond its manifest's size nor beyond a cap on
the whole, replaces no file of the repository that the GPU machine did not start from, and checks every
destination before it writes the first file, so a refusal writes nothing."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import pytest
from tiny_domain import synthetic_record

from domains.errors import UserError
from harness.suites import pack as pack_module
from harness.suites import unpack as unpack_module
from harness.suites.campaign import main as campaign_main
from harness.suites.pack import MANIFEST, pack
from harness.suites.unpack import unpack


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


# unpack: bounded reading


def test_a_member_whose_size_disagrees_with_its_manifest_entry_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """The audit's bomb: 2.7 MB of tar.gz with a 600 MiB member of zeros reached 1.15 GB of memory before the
    manifest's size was compared. Here a small one: the member is refused on its header, never extracted."""
    extracted = []
    extractfile = tarfile.TarFile.extractfile
    monkeypatch.setattr(tarfile.TarFile, "extractfile",
                        lambda self, member: extracted.append(getattr(member, "name", member))
                        or extractfile(self, member))
    name = "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log"
    tarball = _tarball(tmp_path / "t.tar.gz", (name, "log", bytes(1 << 20), {"bytes": 10}))
    with pytest.raises(UserError, match=f"member '{name}' does not match its manifest entry"):
        unpack(tarball, tmp_path / "repo", tmp_path / "side")
    assert name not in extracted
    assert not (tmp_path / "repo").exists() and not (tmp_path / "side").exists()


def test_a_member_the_manifest_does_not_list_is_refused_before_it_is_read(tmp_path, monkeypatch):
    extracted = []
    extractfile = tarfile.TarFile.extractfile
    monkeypatch.setattr(tarfile.TarFile, "extractfile",
                        lambda self, member: extracted.append(getattr(member, "name", member))
                        or extractfile(self, member))
    tarball = _tarball(tmp_path / "t.tar.gz", ("leaderboards/bench/tiny-cpu.json", "bench", b"{}\n"),
                       ("leaderboards/results/x.log", None, bytes(1 << 20)))
    with pytest.raises(UserError, match="the members and the manifest differ: leaderboards/results/x.log"):
        unpack(tarball, tmp_path / "repo", tmp_path / "side")
    assert extracted == [MANIFEST]
    assert not (tmp_path / "repo").exists()


def test_members_over_the_cap_on_the_whole_are_refused(tmp_path, monkeypatch):
    """Sizes that agree with the manifest, but more than a campaign ever brings back: refused on the headers."""
    monkeypatch.setattr(unpack_module, "MAX_UNPACKED_MIB", 1.0)
    members = [(f"leaderboards/prior/.work/tiny-blobs-linear-dcl-0123abcd-s{i}/checkpoint.pt", "checkpoint",
                bytes(400 * 1024)) for i in range(3)]
    tarball = _tarball(tmp_path / "t.tar.gz", *members)
    with pytest.raises(UserError, match="over the 1 MiB"):
        unpack(tarball, tmp_path / "repo", tmp_path / "side")
    assert not (tmp_path / "repo").exists()
    unpack(_tarball(tmp_path / "u.tar.gz", *members[:2]), tmp_path / "repo", tmp_path / "side")  # under: fine
    assert len(_files(tmp_path / "repo")) == 2


def test_two_members_of_the_same_name_are_refused(tmp_path):
    name = "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log"
    tarball = _tarball(tmp_path / "t.tar.gz", (name, "log", b"first\n"), (name, None, b"second\n"))
    with pytest.raises(UserError, match=f"member '{name}' is there twice"):
        unpack(tarball, tmp_path / "repo", tmp_path / "side")
    assert not (tmp_path / "repo").exists()


@pytest.mark.parametrize("manifest", [
    [],
    {"members": {"a": 1}},
    {"members": ["leaderboards/bench/tiny-cpu.json"]},
    {"members": [{"path": 5, "kind": "bench", "bytes": 3, "sha256": "0" * 64}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": ["bench"], "bytes": 3, "sha256": "0" * 64}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": {"a": 1}, "bytes": 3, "sha256": "0" * 64}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": "bench", "bytes": "3", "sha256": "0" * 64}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": "bench", "bytes": True, "sha256": "0" * 64}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": "bench", "bytes": 3, "sha256": 7}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": "bench", "bytes": 3, "sha256": "0" * 64,
                  "replaces": 1}]},
    {"members": [{"path": "leaderboards/bench/tiny-cpu.json", "kind": "bench", "bytes": 3, "sha256": "0" * 64}] * 2},
])
def test_a_manifest_of_the_wrong_shape_gets_one_line(tmp_path, manifest, capsys):
    tarball = _tarball(tmp_path / "t.tar.gz", ("leaderboards/bench/tiny-cpu.json", None, b"{}\n"), manifest=manifest)
    assert campaign_main(["unpack", str(tarball), "--repo", str(tmp_path / "repo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "MANIFEST.json is damaged" in err and err.count("\n") == 1
    assert not (tmp_path / "repo").exists()


# unpack: nothing of the repository lost, all or nothing


def test_an_existing_log_or_checkpoint_with_other_bytes_is_a_conflict_and_nothing_is_written(tmp_path):
    """An uncommitted log, an unfinished run's checkpoint: unpack replaced them silently."""
    repo = tmp_path / "repo"
    log = "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log"
    checkpoint = "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-s2/checkpoint.pt"
    for path, data in ((log, b"mine\n"), (checkpoint, b"my weights")):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(data)
    before = _files(repo)
    record, data = _record()
    tarball = _tarball(tmp_path / "t.tar.gz", (record, "record", data), (log, "log", b"theirs\n"),
                       (checkpoint, "checkpoint", b"their weights"))
    with pytest.raises(UserError, match=f"2 file\\(s\\) would replace a different file.*{log}.*{checkpoint}"):
        unpack(tarball, repo, tmp_path / "side")
    assert _files(repo) == before and not (tmp_path / "side").exists()
    (repo / log).write_bytes(b"theirs\n")  # the same bytes: skipped, no conflict
    (repo / checkpoint).unlink()
    unpack(tarball, repo, tmp_path / "side")
    assert (repo / record).read_bytes() == data and (repo / checkpoint).read_bytes() == b"their weights"


def test_a_file_the_gpu_machine_started_from_is_replaced(tmp_path):
    """A carried checkpoint that moved on, a bench file measured again: the manifest names the digest of the
    repository's file the stage started from, and only that file is replaced."""
    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    rid = "tiny-blobs-linear-infonce-0123abcd-s0"
    for root, weights, bench in ((repo, b"epoch 1", b'{"rows": []}\n'), (stage, b"epoch 2", b'{"rows": [1]}\n')):
        (root / "leaderboards" / "results" / ".work" / rid).mkdir(parents=True)
        (root / "leaderboards" / "results" / ".work" / rid / "checkpoint.pt").write_bytes(weights)
        (root / "leaderboards" / "bench").mkdir(parents=True)
        (root / "leaderboards" / "bench" / "tiny-cpu.json").write_bytes(bench)
    tarball = pack(stage, out, repo, checkpoints=True)
    unpack(tarball, repo, tmp_path / "side")
    assert (repo / "leaderboards" / "results" / ".work" / rid / "checkpoint.pt").read_bytes() == b"epoch 2"
    assert (repo / "leaderboards" / "bench" / "tiny-cpu.json").read_bytes() == b'{"rows": [1]}\n'
    # The repository's checkpoint moved on here meanwhile (a local resume): not the one the stage started from.
    (repo / "leaderboards" / "results" / ".work" / rid / "checkpoint.pt").write_bytes(b"epoch 3, here")
    (repo / "leaderboards" / "bench" / "tiny-cpu.json").write_bytes(b'{"rows": []}\n')
    with pytest.raises(UserError, match="1 file\\(s\\) would replace a different file"):
        unpack(tarball, repo, tmp_path / "side")
    assert (repo / "leaderboards" / "results" / ".work" / rid / "checkpoint.pt").read_bytes() == b"epoch 3, here"


def test_a_checkpoint_that_moved_on_between_two_calls_replaces_the_one_the_first_brought_back(tmp_path):
    """Two calls of one device session, the second carrying nothing: the GPU machine's repository never holds the
    first call's checkpoint (.work is git-ignored), so its digest was no 'replaces', and the second tarball, its
    records too, was refused as replacing a file resumed here. The stage remembers what it packed (PACKED)."""
    repo, stage, here = tmp_path / "gpu_repo", tmp_path / "stage", tmp_path / "here"
    for root in (repo, here):
        (root / "leaderboards" / "results").mkdir(parents=True)
    checkpoint = stage / "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-s0/checkpoint.pt"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"epoch 3")
    unpack(pack(stage, tmp_path / "out1", repo, checkpoints=True), here, tmp_path / "side1")
    checkpoint.write_bytes(b"epoch 6")  # the run resumed in the stage, and stopped again
    second = pack(stage, tmp_path / "out2", repo, checkpoints=True)
    local = here.joinpath(*checkpoint.relative_to(stage).parts)
    local.write_bytes(b"epoch 4, resumed here")  # not what the first tarball brought: refused, kept
    with pytest.raises(UserError, match="would replace a different file"):
        unpack(second, here, tmp_path / "side2")
    local.write_bytes(b"epoch 3")
    unpack(second, here, tmp_path / "side3")
    assert local.read_bytes() == b"epoch 6"


def test_two_packs_into_one_folder_in_one_second_keep_both_tarballs(tmp_path, monkeypatch):
    """The tarball is named by the time to the second: a second pack (here without the checkpoints) within it
    wrote over the first, and the checkpoint that only the first held was lost."""
    class Frozen(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)

    monkeypatch.setattr(pack_module, "datetime", Frozen)
    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    record, data = _record()
    (stage / record).parent.mkdir(parents=True)
    (stage / record).write_bytes(data)
    checkpoint = "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-s1/checkpoint.pt"
    (stage / checkpoint).parent.mkdir(parents=True)
    (stage / checkpoint).write_bytes(b"epoch 3")
    first = pack(stage, out, repo, checkpoints=True)
    second = pack(stage, out, repo)
    assert sorted(p.name for p in out.iterdir()) == ["campaign-20300102T030405-2.tar.gz",
                                                     "campaign-20300102T030405.tar.gz"]
    with tarfile.open(first) as tar:
        assert checkpoint in tar.getnames() and record in tar.getnames()
    with tarfile.open(second) as tar:
        assert checkpoint not in tar.getnames() and record in tar.getnames()


@pytest.mark.parametrize("obstacle", ["link", "folder", "file above"])
def test_a_bad_destination_of_a_later_member_refuses_the_whole_tarball_before_any_write(tmp_path, obstacle):
    """Records were written first, then a later member's destination (a link) was refused: half a tarball."""
    repo = tmp_path / "repo"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    record, data = _record()
    checkpoint = "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-s2/checkpoint.pt"
    target = repo / checkpoint
    if obstacle == "link":
        target.parent.mkdir(parents=True)
        target.symlink_to(tmp_path / "elsewhere")
    elif obstacle == "folder":
        target.mkdir(parents=True)
    else:
        (repo / "leaderboards" / "results" / ".work").write_text("not a folder")
    before = _files(repo)
    tarball = _tarball(tmp_path / "t.tar.gz", (record, "record", data), (checkpoint, "checkpoint", b"w"))
    with pytest.raises(UserError, match="symbolic link|is a folder|not a folder"):
        unpack(tarball, repo, tmp_path / "side")
    assert _files(repo) == before and not (repo / record).exists() and not (tmp_path / "elsewhere").exists()


def test_a_folder_where_a_record_goes_gets_one_line(tmp_path, capsys):
    repo = tmp_path / "repo"
    record, data = _record()
    (repo / record).mkdir(parents=True)
    tarball = _tarball(tmp_path / "t.tar.gz", (record, "record", data))
    assert campaign_main(["unpack", str(tarball), "--repo", str(repo), "--side", str(tmp_path / "side")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is a folder" in err and err.count("\n") == 1


def test_a_side_file_where_another_side_file_needs_a_folder_is_refused_before_any_write(tmp_path):
    repo = tmp_path / "repo"
    record, data = _record()
    tarball = _tarball(tmp_path / "t.tar.gz", (record, "record", data), ("campaign/failed", "side", b"x"),
                       ("campaign/failed/x.json", "side", b"{}"))
    with pytest.raises(UserError, match="campaign/failed"):
        unpack(tarball, repo, tmp_path / "side")
    assert not (repo / record).exists() and not (tmp_path / "side").exists()
