"""One tarball of what a campaign produced on the GPU machine, for its way back into the repository.

The campaign's staging folder mirrors the repository: ``<stage>/leaderboards/<folder>/`` holds the records of
that folder (``results``, ``prior``), their logs and, in ``.work/<run id>/``, the checkpoints of unfinished runs;
``<stage>/leaderboards/bench/`` the files ``harness bench --out`` wrote there. :func:`pack` puts what is new into
one ``.tar.gz`` with a ``MANIFEST.json`` (each member's kind, size and sha256):

- ``record`` and ``log``: each completed record that the repository does not hold byte for byte, and its log;
  so is a failed run's whose training diverged (``RunRecord.diverged``), which the pages count as a seed;
- ``bench``: each benchmark file that differs from the repository's;
- ``checkpoint`` (``checkpoints=True``): the checkpoints of unfinished runs that the repository does not hold
  byte for byte, for a later session to resume;
- ``side``: what explains a run that did not complete (its failed record, its log) and the campaign's own log,
  under ``campaign/``; they never go into ``leaderboards/``.

The device tool brings back files of at most 16 MiB. Records, logs, bench files and side files must fit together
(one record is tens of KiB, so this fails only with thousands); then checkpoints are added, smallest first, while
their raw size fits in what is left (a checkpoint of weights hardly compresses). Those that do not fit are listed
in the manifest and the output as left out: their runs start over in a later session.

:func:`pack` reads no file of the stage through a symbolic link: it refuses the stage. It writes, for each
log, bench file and checkpoint that replaces a file of the GPU machine's repository or that the stage's previous
tarball held (:data:`PACKED`), that file's sha256 (``replaces`` in the manifest), which :mod:`harness.suites.unpack`
checks. :func:`harness.suites.unpack.unpack` brings a tarball back into the repository.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from domains.errors import UserError
from domains.files import refuse_link, write_atomic
from harness.records import read_record

MANIFEST = "MANIFEST.json"
PACKED = ".packed.json"  # in the stage: path -> sha256 of the files its tarballs held, for the next one's replaces
BENCH = PurePosixPath("leaderboards/bench")
SIDE = PurePosixPath("campaign")
CAMPAIGN_LOG = "campaign.log"
MIB = 1024 * 1024
MARGIN = 64 * 1024  # room for the manifest and the tar headers of the last members
REPO_KINDS = ("record", "log", "bench", "checkpoint")
CHUNK = MIB  # a file's bytes are hashed (and a member's read) this many at a time
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Member:
    """A file of the tarball: where it lies in the stage, its path in the tarball (the repository's path for
    the repository's kinds, ``campaign/...`` for side files) and its kind."""

    source: Path
    path: PurePosixPath
    kind: str
    replaces: str | None = None  # the sha256 of the repository's file at ``path`` that this one replaces


def _replacing(member: Member, repo: Path, packed: dict[str, str]) -> Member:
    """``member`` with the digest of the file it would replace here: the one an earlier tarball of this stage
    brought back (``packed``: a checkpoint that moved on between two calls, whose first version the GPU machine's
    repository never held), else the repository's (a carried checkpoint, a bench file measured again). Unpack
    replaces that file, and no other, of the same name."""
    if member.kind == "side":
        return member
    if member.path.as_posix() in packed:
        return Member(member.source, member.path, member.kind, packed[member.path.as_posix()])
    there = repo.joinpath(*member.path.parts)
    if there.is_symlink() or not there.is_file():
        return member
    return Member(member.source, member.path, member.kind, _file_digest(there))


def _packed(stage: Path) -> dict[str, str]:
    """What the stage's earlier tarballs held (:data:`PACKED`): path -> sha256 of each file but the records."""
    ledger = stage / PACKED
    try:
        found = json.loads(ledger.read_text()) if ledger.is_file() and not ledger.is_symlink() else {}
    except (OSError, ValueError):
        found = {}
    return {k: v for k, v in found.items() if isinstance(v, str) and SHA256.fullmatch(v)} \
        if isinstance(found, dict) else {}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _same_file(a: Path, b: Path) -> bool:
    return b.is_file() and a.read_bytes() == b.read_bytes()


def records_folders(stage: Path) -> list[Path]:
    """The records folders of a stage: every ``leaderboards/<folder>/`` but the bench folder."""
    root = stage / "leaderboards"
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != BENCH.name) if root.is_dir() else []


def _staged(stage: Path, paths) -> list[Path]:
    """The regular files among ``paths`` of the stage, sorted. UserError when one of them, or a folder between the
    stage and it, is a symbolic link: pack reads no file through a link (a staged ``<run id>.log`` linked to
    ``/etc/passwd`` was packed as that file's content)."""
    found = sorted(paths)
    for path in found:
        refuse_link(path, stage)
    return [path for path in found if path.is_file()]


def collect(stage: Path, repo: Path, checkpoints: bool) -> tuple[list[Member], list[Member]]:
    """What the stage holds that the repository lacks: (records, logs, bench and side files; checkpoints).
    UserError when a file of the stage is a symbolic link (:func:`_staged`)."""
    members: list[Member] = []
    saved: list[Member] = []
    for folder in records_folders(stage):
        rel = PurePosixPath(folder.relative_to(stage).as_posix())
        logs = _staged(stage, folder.glob("*.log"))
        finished = set()
        for path in _staged(stage, folder.glob("*.json")):
            if _same_file(path, repo / rel / path.name):  # the repository's own (the stage starts with a copy)
                finished.add(path.stem)
                continue
            record = read_record(path)
            if record is None:
                continue
            finished.add(path.stem)
            log = path.with_suffix(".log")
            if not record.has_result:
                members += [Member(p, SIDE / "failed" / p.name, "side") for p in (path, log) if p in (path, *logs)]
            else:
                members.append(Member(path, rel / path.name, "record"))
                if log in logs:
                    members.append(Member(log, rel / log.name, "log"))
        members += [Member(log, SIDE / "unfinished" / log.name, "side") for log in logs if log.stem not in finished]
        if checkpoints:
            # Not one the repository holds as it is (the stage starts with a copy of the carried ones): it would
            # take the room of a checkpoint that moved on.
            saved += [Member(p, rel / ".work" / p.parent.name / p.name, "checkpoint")
                      for p in _staged(stage, (folder / ".work").glob("*/checkpoint.pt"))
                      if p.parent.name not in finished
                      and not _same_file(p, repo / rel / ".work" / p.parent.name / p.name)]
    bench = stage / BENCH
    members += [Member(p, BENCH / p.name, "bench") for p in _staged(stage, bench.glob("*.json"))
                if not _same_file(p, repo / BENCH / p.name)]
    members += [Member(p, SIDE / CAMPAIGN_LOG, "side") for p in _staged(stage, [stage / CAMPAIGN_LOG])]
    packed = _packed(stage)
    members, saved = [_replacing(m, repo, packed) for m in members], [_replacing(m, repo, packed) for m in saved]
    return members, sorted(saved, key=lambda m: m.source.stat().st_size)


def _write(tarball: Path, members: list[Member], left_out: list[str]) -> int:
    """Write the tarball with its manifest; its size in bytes."""
    entries = []
    with tarfile.open(tarball, "w:gz") as tar:
        for m in members:
            data = m.source.read_bytes()
            entries.append({"path": m.path.as_posix(), "kind": m.kind, "bytes": len(data), "sha256": _digest(data),
                            **({"replaces": m.replaces} if m.replaces else {})})
            _add(tar, m.path.as_posix(), data)
        manifest = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "members": entries,
                    "left_out": left_out}
        _add(tar, MANIFEST, json.dumps(manifest, indent=1).encode())
    return tarball.stat().st_size


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o644
    tar.addfile(info, io.BytesIO(data))


def _new_tarball(out: Path) -> Path:
    """``out/campaign-<UTC time>.tar.gz``, created empty here (``-2``, ``-3``, ... after the time where the name is
    taken): the time is to the second, and a second pack into the same folder within it wrote over the first's
    tarball (and removed it, where its own did not fit)."""
    stamp, n = f"campaign-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}", 1
    while True:
        tarball = out / f"{stamp}{'' if n == 1 else f'-{n}'}.tar.gz"
        try:
            tarball.open("x").close()
            return tarball
        except FileExistsError:
            n += 1


def pack(stage: Path, out: Path, repo: Path, checkpoints: bool = False, max_mib: float = 16.0) -> Path:
    """Pack what is new in ``stage`` into a new tarball ``out/campaign-<UTC time>.tar.gz`` (:func:`_new_tarball`;
    at most ``max_mib``); UserError when nothing new is there or the records alone do not fit."""
    members, saved = collect(stage, repo, checkpoints)
    kinds = [m.kind for m in members]
    failed = any(m.path.parent == SIDE / "failed" for m in members)
    if "record" not in kinds and "bench" not in kinds and not saved and not failed:  # a session whose runs all
        # stopped made its checkpoints; one whose runs all failed, the records and logs that say why
        hint = "" if checkpoints else " (--checkpoints also packs the checkpoints of unfinished runs)"
        raise UserError(f"nothing to pack: {stage} holds no completed or failed record, no bench file"
                        f"{' and no checkpoint' if checkpoints else ''} that {repo / 'leaderboards'} does not already "
                        f"have{hint}")
    out.mkdir(parents=True, exist_ok=True)
    tarball = _new_tarball(out)
    limit = int(max_mib * MIB)
    size = _write(tarball, members, [])
    if size > limit:
        tarball.unlink()
        raise UserError(f"the records, logs and bench files take {size / MIB:.1f} MiB packed, over the "
                        f"{max_mib:g} MiB that comes back from the GPU machine: pack them in parts")
    chosen, left_out = [], []
    room = limit - size - MARGIN
    for m in saved:
        raw = m.source.stat().st_size
        if raw <= room:
            chosen.append(m)
            room -= raw
        else:
            left_out.append(f"{m.path} ({raw / MIB:.1f} MiB: over the room left)")
    if chosen or left_out:  # written again with them; the raw sizes were a safe estimate
        while (size := _write(tarball, members + chosen, left_out)) > limit:
            dropped = chosen.pop()
            left_out.append(f"{dropped.path} ({dropped.source.stat().st_size / MIB:.1f} MiB: over the room left)")
    # Remembered for this stage's next tarball: a file packed again replaces the version this one brings back.
    write_atomic(stage / PACKED, json.dumps({**_packed(stage), **{m.path.as_posix(): _file_digest(m.source)
                                                                  for m in members + chosen if m.kind != "side"}}))
    counts = {kind: kinds.count(kind) for kind in ("record", "log", "bench", "side")}
    print(f"packed {tarball} ({size / MIB:.2f} MiB of {max_mib:g}): {counts['record']} records, {counts['log']} "
          f"logs, {counts['bench']} bench files, {len(chosen)} checkpoints, {counts['side']} side files (failed or "
          "unfinished runs, the campaign log)")
    for line in left_out:
        print(f"left out: {line}; its run starts over in a later session")
    return tarball


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
