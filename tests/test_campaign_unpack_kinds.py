"""``tools/campaign unpack`` takes each member only where its kind belongs. A tarball whose manifest called a
member a "log" (or a bench file, or a checkpoint) at a record's path replaced that record unchecked: the refusal to
overwrite a different record looked at members of kind "record" only; and a "bench" file could land on any page
under ``leaderboards/``. Now such a tarball is refused whole, with one line, and nothing is written; so is a member
whose name is not the one spelling pack writes, or whose run id no record could have."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from tiny_domain import synthetic_record

from domains.errors import UserError
from harness.suites.pack import MANIFEST
from harness.suites.unpack import unpack

RECORD = "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s0.json"


def _tarball(path: Path, *members: tuple[str, str, bytes]) -> Path:
    entries = []
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, data in [*members, (MANIFEST, "", b"")]:
            if name == MANIFEST:
                data = json.dumps({"members": entries}).encode()
            else:
                entries.append({"path": name, "kind": kind, "bytes": len(data),
                                "sha256": hashlib.sha256(data).hexdigest()})
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(("name", "kind"), [
    (RECORD, "log"),  # a record replaced by a "log"
    (RECORD, "bench"),
    ("leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s0.log", "bench"),
    ("leaderboards/index.md", "bench"),  # a page
    ("leaderboards/results.md", "log"),
    ("leaderboards/bench/tiny-cpu.json", "log"),
    ("leaderboards/bench/tiny-cpu.log", "log"),
    ("leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-s0.json", "checkpoint"),
    ("leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s0.json", "checkpoint"),
    ("leaderboards/bench/.work/x/checkpoint.pt", "checkpoint"),
    ("leaderboards/results/sub/x.log", "log"),
    ("leaderboards/results/../index.md", "log"),
    ("/etc/x.log", "log"),
    # one file under two spellings: beside its plain twin, the second member silently replaced the first
    ("leaderboards//results/tiny-blobs-linear-infonce-0123abcd-s0.log", "log"),
    ("leaderboards/./results/tiny-blobs-linear-infonce-0123abcd-s0.log", "log"),
    ("campaign//failed/x.json", "side"),
    # a run id no record can have: a newline, a leading dash, too long for the file names a run writes beside it
    ("leaderboards/results/tiny\nforged.log", "log"),
    ("leaderboards/results/-rf .log", "log"),
    ("leaderboards/results/.work/tiny\nforged/checkpoint.pt", "checkpoint"),
    (f"leaderboards/results/{'x' * 240}.log", "log"),
])
def test_a_member_away_from_where_its_kind_belongs_is_refused_and_nothing_is_written(tmp_path, name, kind):
    repo = tmp_path / "repo"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    record = repo / RECORD
    record.write_text('{"the": "record"}\n')
    ok = ("leaderboards/bench/other.json", "bench", b"{}\n")  # a good member beside it is not written either
    tarball = _tarball(tmp_path / "t.tar.gz", ok, (name, kind, b"overwritten\n"))
    with pytest.raises(UserError, match=f"member '{name}' \\({kind}\\) is not "):
        unpack(tarball, repo, tmp_path / "side")
    assert record.read_text() == '{"the": "record"}\n'
    assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()) == [RECORD]


def test_members_where_their_kinds_belong_are_written(tmp_path):
    repo = tmp_path / "repo"
    tarball = _tarball(tmp_path / "t.tar.gz",
                       ("leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log", "log", b"log\n"),
                       ("leaderboards/bench/tiny-cpu.json", "bench", b"{}\n"),
                       ("leaderboards/prior/.work/tiny-blobs-linear-dcl-0123abcd-s2/checkpoint.pt", "checkpoint",
                        b"ck"),
                       ("campaign/failed/x.json", "side", b"{}"), ("campaign/campaign.log", "side", b"log"))
    unpack(tarball, repo, tmp_path / "side")
    assert (repo / "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log").read_bytes() == b"log\n"
    assert (repo / "leaderboards/prior/.work/tiny-blobs-linear-dcl-0123abcd-s2/checkpoint.pt").read_bytes() == b"ck"
    assert (tmp_path / "side" / "failed" / "x.json").is_file() and (tmp_path / "side" / "campaign.log").is_file()


def test_pack_leaves_out_the_checkpoints_the_repository_already_holds(tmp_path):
    """The stage starts with a copy of the carried checkpoints; one that did not move on is already in the
    repository, and packing it again took the room (16 MiB in all) of one that did."""
    from harness.suites.pack import pack

    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    for root, runs in ((repo, {"carried": b"old"}), (stage, {"carried": b"old", "moved": b"new", "fresh": b"x"})):
        for rid, data in runs.items():
            path = root / "leaderboards" / "results" / ".work" / f"tiny-blobs-linear-infonce-0123abcd-{rid}"
            path.mkdir(parents=True)
            (path / "checkpoint.pt").write_bytes(data)
    (repo / "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-moved").mkdir()
    (repo / "leaderboards/results/.work/tiny-blobs-linear-infonce-0123abcd-moved/checkpoint.pt").write_bytes(b"older")
    (stage / "leaderboards" / "bench").mkdir()
    (stage / "leaderboards" / "bench" / "tiny-cpu.json").write_text("{}\n")
    tarball = pack(stage, out, repo, checkpoints=True)
    with tarfile.open(tarball) as tar:
        saved = sorted(n.split("/")[3] for n in tar.getnames() if n.endswith("checkpoint.pt"))
    assert saved == ["tiny-blobs-linear-infonce-0123abcd-fresh", "tiny-blobs-linear-infonce-0123abcd-moved"]


def test_a_session_whose_runs_all_stopped_packs_their_checkpoints(tmp_path, capsys):
    """No run completed in the call (each stopped at --time): its checkpoints, the unfinished runs' logs and the
    campaign log are all it made. `pack --checkpoints` refused with "nothing to pack", and they were lost with the
    machine; now they come back and unpack where `run` resumes them."""
    from harness.suites.pack import CAMPAIGN_LOG, pack

    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    rid = "tiny-blobs-linear-infonce-0123abcd-s0"
    work = stage / "leaderboards" / "results" / ".work" / rid
    work.mkdir(parents=True)
    (work / "checkpoint.pt").write_bytes(b"weights")
    (stage / "leaderboards" / "results" / f"{rid}.log").write_text("stopped at epoch 3\n")
    (stage / CAMPAIGN_LOG).write_text("exit 75: tiny ... seed 0\n")
    with pytest.raises(UserError, match="nothing to pack: .* no bench file that .*--checkpoints also packs"):
        pack(stage, out, repo)  # without --checkpoints there is still nothing to bring back
    tarball = pack(stage, out, repo, checkpoints=True)
    unpack(tarball, repo, tmp_path / "side")
    assert (repo / "leaderboards" / "results" / ".work" / rid / "checkpoint.pt").read_bytes() == b"weights"
    assert (tmp_path / "side" / "unfinished" / f"{rid}.log").is_file()
    assert (tmp_path / "side" / CAMPAIGN_LOG).is_file()


def test_a_session_whose_runs_all_failed_packs_their_records_and_logs(tmp_path):
    """Three Biased-MNIST runs trained for 8 minutes and failed in their evaluation (2026-11-28): `pack` said
    "nothing to pack", and the records and logs that said why stayed on the machine. They come back now, to the
    side folder, never into leaderboards/."""
    from harness.suites.pack import CAMPAIGN_LOG, pack

    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    record = synthetic_record("infonce", 0, 0.0, status="failed")
    rid = record["run_id"]
    staged = stage / "leaderboards" / "results"
    staged.mkdir(parents=True)
    (staged / f"{rid}.json").write_text(json.dumps(record))
    (staged / f"{rid}.log").write_text("Traceback ...\n")
    (stage / CAMPAIGN_LOG).write_text("exit 1: tiny ... seed 0\n")
    unpack(pack(stage, out, repo), repo, tmp_path / "side")
    assert json.loads((tmp_path / "side" / "failed" / f"{rid}.json").read_text())["status"] == "failed"
    assert (tmp_path / "side" / "failed" / f"{rid}.log").is_file()
    assert not list((repo / "leaderboards" / "results").iterdir())
    (staged / f"{rid}.json").unlink()  # the campaign log and an orphan log alone are nothing to bring back
    (staged / f"{rid}.log").unlink()
    with pytest.raises(UserError, match="nothing to pack"):
        pack(stage, out, repo)


def test_a_run_whose_training_diverged_comes_back_as_a_record(tmp_path):
    """Its failed record holds a null primary metric (RunRecord.diverged): the pages count it as a seed, so it goes
    into leaderboards/ with its log, where another failure's record goes to the side folder."""
    from harness.suites.pack import pack

    repo, stage, out = tmp_path / "repo", tmp_path / "stage", tmp_path / "out"
    (repo / "leaderboards" / "results").mkdir(parents=True)
    staged = stage / "leaderboards" / "results"
    staged.mkdir(parents=True)
    diverged = synthetic_record("infonce", 0, 0.0, status="failed")
    diverged["metrics"] = {"accuracy": None}
    crashed = synthetic_record("infonce", 1, 0.0, status="failed")
    for record in (diverged, crashed):
        (staged / f"{record['run_id']}.json").write_text(json.dumps(record))
        (staged / f"{record['run_id']}.log").write_text("the loss is nan at training step 3: training diverged\n")
    unpack(pack(stage, out, repo), repo, tmp_path / "side")
    results = repo / "leaderboards" / "results"
    assert sorted(p.name for p in results.iterdir()) == [f"{diverged['run_id']}.json", f"{diverged['run_id']}.log"]
    assert sorted(p.name for p in (tmp_path / "side" / "failed").iterdir()) == [f"{crashed['run_id']}.json",
                                                                               f"{crashed['run_id']}.log"]


def test_a_manifest_entry_without_its_kind_or_size_is_named_damaged(tmp_path):
    data = b"log\n"
    name = "leaderboards/results/tiny-blobs-linear-infonce-0123abcd-s1.log"
    path = tmp_path / "t.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for member, payload in ((name, data), (MANIFEST, json.dumps({"members": [{"path": name}]}).encode())):
            info = tarfile.TarInfo(member)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(UserError, match="MANIFEST.json is damaged"):
        unpack(path, tmp_path / "repo", tmp_path / "side")
    assert not (tmp_path / "repo").exists()
