"""Bringing a campaign's tarball (:mod:`harness.suites.pack`) back into the repository.

:func:`unpack` checks every member's header against the manifest before it reads one (a member the manifest does
not list, or of another size, is refused unread; all members together may hold at most :data:`MAX_UNPACKED_MIB`),
validates each record, then checks every destination before it writes the first file. It refuses the whole
tarball, writing nothing, when a destination cannot take its file (a symbolic link, a folder, a file where a folder
goes) or a file there would be lost: a record that differs from the repository's of the same run (a completed
record is the truth of its run, never overwritten), or any other file whose bytes differ from those the stage
started from (the manifest's ``replaces``): a carried checkpoint that moved on, one that moved on again since the
stage's last tarball, a bench file measured again replace it, while an uncommitted log or the checkpoint of a run
resumed here since are kept and named. An identical file is skipped; every file is written atomically.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath

from domains.errors import UserError
from domains.files import refuse_link, write_atomic
from harness.records import InvalidRecordError, load_record, name_problem, parse_record
from harness.suites.pack import BENCH, CHUNK, MANIFEST, MIB, REPO_KINDS, SHA256, SIDE, _file_digest

# What unpack reads of a tarball, in all: a campaign's tarball comes back through a device call's $OUT, at most
# 16 MiB by default (--max-mib), its checkpoints packed by their raw size; its records and logs (JSON and text) take
# a few times their packed size. 256 MiB is well above any real campaign, and bounds a decompression bomb's memory.
MAX_UNPACKED_MIB = 256.0
MAX_MEMBERS = 100_000


def _checked_path(name: str, kind: str) -> PurePosixPath:
    """A member's path, refused unless it is a plain relative path where its kind belongs: a record
    ``leaderboards/<folder>/<run id>.json``, its log ``leaderboards/<folder>/<run id>.log``, a bench file
    ``leaderboards/bench/<name>.json``, a checkpoint ``leaderboards/<folder>/.work/<run id>/checkpoint.pt``, a side
    file anywhere under ``campaign/``. (A member whose kind and path disagree, a "log" at a record's path, would
    replace that record unchecked, or a page anywhere under ``leaderboards/``.) The name is one spelling of its
    path, as pack writes it: ``leaderboards//results/x.log`` beside ``leaderboards/results/x.log`` would write one
    file twice, the second silently. A run id is a plain name, as a record's is
    (:func:`harness.records.name_problem`: no newline, not too long for a file name)."""
    path = PurePosixPath(name)
    home = SIDE if kind == "side" else PurePosixPath("leaderboards")
    plain = not path.is_absolute() and ".." not in path.parts and path.parts[:1] == home.parts \
        and path.as_posix() == name
    parts = path.parts
    rid = parts[3] if kind == "checkpoint" and len(parts) == 5 else path.stem
    plain &= kind not in ("record", "log", "checkpoint") or name_problem(rid) is None
    folder = parts[1] if len(parts) > 1 else ""
    records_folder = folder != BENCH.name and not folder.startswith(".")
    where = {
        "side": len(parts) >= 2,
        "record": len(parts) == 3 and records_folder and path.suffix == ".json",
        "log": len(parts) == 3 and records_folder and path.suffix == ".log",
        "bench": len(parts) == 3 and folder == BENCH.name and path.suffix == ".json",
        "checkpoint": len(parts) == 5 and records_folder and parts[2] == ".work" and parts[4] == "checkpoint.pt",
    }
    if not plain or not where.get(kind, True) or any(p.startswith(".") for p in parts[2:3] if kind != "checkpoint"):
        shape = {"record": "leaderboards/<folder>/<run id>.json", "log": "leaderboards/<folder>/<run id>.log",
                 "bench": "leaderboards/bench/<name>.json",
                 "checkpoint": "leaderboards/<folder>/.work/<run id>/checkpoint.pt"}.get(kind, f"a path under {home}/")
        raise UserError(f"the tarball's member '{name}' ({kind}) is not {shape}")
    return path


def _manifest_entries(text: bytes) -> dict[str, dict]:
    """The manifest's entries by path, each checked for the shape unpack reads; ValueError saying what is wrong."""
    manifest = json.loads(text)
    if not isinstance(manifest, dict) or not isinstance(manifest.get("members"), list):
        raise ValueError('not an object with a list of "members"')
    entries: dict[str, dict] = {}
    for entry in manifest["members"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
            raise ValueError("a member's entry is not an object with a path")
        name = entry["path"]
        if not isinstance(entry.get("kind"), str):
            raise ValueError(f"member '{name}' has no kind, or one that is not a text")
        if type(entry.get("bytes")) is not int or entry["bytes"] < 0:
            raise ValueError(f"member '{name}' has no size, or one that is not a whole number of bytes")
        if any(not isinstance(entry.get(field), str) or not SHA256.fullmatch(entry[field])
               for field in ("sha256", "replaces") if field == "sha256" or entry.get(field) is not None):
            raise ValueError(f"member '{name}' has no sha256, or a digest that is not 64 hexadecimal digits")
        if name in entries:
            raise ValueError(f"member '{name}' is listed twice")
        entries[name] = entry
    return entries


def _read(tar: tarfile.TarFile, info: tarfile.TarInfo) -> tuple[bytes, str]:
    """A member's bytes and their sha256, read in chunks of at most :data:`CHUNK` bytes and never more than its
    header's size (which the caller compared with the manifest and the cap)."""
    fh = tar.extractfile(info)
    digest, chunks, left = hashlib.sha256(), [], info.size
    while left > 0 and (chunk := fh.read(min(CHUNK, left))):
        digest.update(chunk)
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks), digest.hexdigest()


def read_tarball(tarball: Path, max_mib: float | None = None) -> list[tuple[dict, bytes]]:
    """Every member of a campaign tarball with its manifest entry, checked: regular files only, each name once,
    each listed in the manifest with its size and sha256, each record a valid record named after its run.

    Nothing but the manifest is read before every member's header agrees with it: a member the manifest does not
    list, or whose header's size is not the manifest's, is refused unread, and so are members whose sizes add up
    to more than ``max_mib`` (default :data:`MAX_UNPACKED_MIB`) or more than :data:`MAX_MEMBERS` of them: a few
    MiB of tar.gz can hold gigabytes of zeros, which were read whole into memory before any check."""
    cap = int((MAX_UNPACKED_MIB if max_mib is None else max_mib) * MIB)
    out = []
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            infos: dict[str, tarfile.TarInfo] = {}
            total = 0
            for info in tar:  # the headers alone: no member's data is kept
                if not info.isfile():
                    raise UserError(f"{tarball}: member '{info.name}' is not a regular file")
                if info.name in infos:
                    raise UserError(f"{tarball}: member '{info.name}' is there twice; not a tarball of `campaign pack`")
                if len(infos) >= MAX_MEMBERS:
                    raise UserError(f"{tarball}: more than {MAX_MEMBERS} members; not a tarball of `campaign pack`")
                infos[info.name] = info
                total += info.size
                if total > cap:
                    raise UserError(f"{tarball}: its members hold over the {cap / MIB:g} MiB a campaign tarball may "
                                    "unpack to; not a tarball of `campaign pack` (a decompression bomb?)")
            manifest = infos.pop(MANIFEST, None)
            if manifest is None:
                raise UserError(f"{tarball}: no {MANIFEST}; not a tarball of `campaign pack`")
            try:
                entries = _manifest_entries(_read(tar, manifest)[0])
            except ValueError as exc:  # JSON's errors too
                raise UserError(f"{tarball}: its {MANIFEST} is damaged ({exc})") from None
            if set(entries) != set(infos):
                raise UserError(f"{tarball}: the members and the manifest differ: "
                                f"{', '.join(sorted(set(entries) ^ set(infos)))}")
            for name, info in infos.items():
                entry = entries[name]
                if entry["kind"] not in (*REPO_KINDS, "side"):
                    raise UserError(f"{tarball}: member '{name}' has an unknown kind '{entry['kind']}'")
                _checked_path(name, entry["kind"])
                if info.size != entry["bytes"]:
                    raise UserError(f"{tarball}: member '{name}' does not match its manifest entry ({info.size} bytes, "
                                    f"not {entry['bytes']}; damaged in transfer?)")
            for name, info in infos.items():
                entry = entries[name]
                data, digest = _read(tar, info)
                if len(data) != entry["bytes"] or digest != entry["sha256"]:
                    raise UserError(f"{tarball}: member '{name}' does not match its manifest entry (damaged in "
                                    "transfer?)")
                out.append((entry, data))
    except (OSError, EOFError, zlib.error, tarfile.TarError) as exc:
        raise UserError(f"{tarball}: not a readable campaign tarball ({exc})") from None
    for entry, data in out:
        name = entry["path"]
        if entry["kind"] == "record":
            try:
                record = parse_record(json.loads(data), name)
            except ValueError as exc:  # JSON errors and pydantic's; InvalidRecordError is a UserError
                raise UserError(f"{tarball}: {name} is not a valid record ({' '.join(str(exc).split())})") from None
            if record.run_id != PurePosixPath(name).stem or not record.has_result:
                raise UserError(f"{tarball}: {name} is not the completed (or diverged) record of run "
                                f"'{PurePosixPath(name).stem}'")
    return out


def _existing(root: Path, rel: PurePosixPath) -> str | None:
    """The sha256 of the file at ``root / rel``, None where there is none. UserError when the way there or the
    destination cannot take the file: a symbolic link (none is followed), a file where a folder goes, a folder or
    anything but a regular file where the file goes."""
    target = root.joinpath(*rel.parts)
    refuse_link(target, root)
    here = root
    for part in ("", *rel.parts[:-1]):
        here = here / part if part else here
        if here.exists() and not here.is_dir():
            raise UserError(f"{here} is not a folder, and the tarball's {rel} goes into it")
    if target.is_dir():
        raise UserError(f"{target} is a folder where the tarball's {rel} goes: move it away")
    if not target.exists():
        return None
    if not target.is_file():
        raise UserError(f"{target} is not a regular file, and the tarball's {rel} would replace it: move it away")
    try:
        return _file_digest(target)
    except OSError as exc:
        raise UserError(f"{target} cannot be read to compare it with the tarball's ({exc.strerror})") from None


def unpack(tarball: Path, repo: Path, side: Path | None = None, max_mib: float | None = None) -> Path:
    """Write the tarball's files into ``repo`` (side files into ``side``, default a fresh temporary folder, which
    is returned). Every destination is checked before the first file is written, and the whole tarball is refused
    (UserError), writing nothing, when one cannot take its file (a link, a folder, a file where a folder goes) or
    when a file there would be lost: a record that differs from the repository's of the same run, or any other
    file whose bytes differ from those the GPU machine's stage started from (the manifest's ``replaces``), such as
    a log not committed here or the checkpoint of a run resumed here since. A file already there, identical, is
    skipped; the checkpoint of a run that completed is not written."""
    members = read_tarball(tarball, max_mib)
    names = {entry["path"] for entry, _ in members}
    under = sorted(n for n in names if any(parent.as_posix() in names for parent in PurePosixPath(n).parents))
    if under:
        raise UserError(f"refusing to unpack {tarball}: its member '{under[0]}' lies under another member's file")
    completed = {entry["path"] for entry, data in members
                 if entry["kind"] == "record" and json.loads(data).get("status") == "completed"}
    writes: list[tuple[str, Path | None, PurePosixPath, bytes]] = []  # kind, root (None: the fresh side), path
    records, others, same = [], [], 0
    for entry, data in sorted(members, key=lambda m: m[0]["kind"] != "record"):  # records written first
        kind, path = entry["kind"], PurePosixPath(entry["path"])
        if kind == "checkpoint" and (_completed_beside(repo / path) or (path.parent.parent.parent /
                                                                       f"{path.parent.name}.json").as_posix()
                                     in completed):
            continue  # the run completed since: nothing to resume
        root, rel = (side, path.relative_to(SIDE)) if kind == "side" else (repo, path)
        found = None if root is None else _existing(root, rel)  # a fresh side folder holds nothing yet
        if found is None or (found != entry["sha256"] and kind != "record" and found == entry.get("replaces")):
            writes.append((kind, root, rel, data))
        elif found == entry["sha256"]:
            same += 1
        else:
            (records if kind == "record" else others).append(entry["path"])
    refusals = []
    if records:
        refusals.append(f"{len(records)} record(s) would replace a different record of the same run id "
                        f"({', '.join(records)}); a record is the truth of its run: move the repository's file away "
                        "if it is the wrong one")
    if others:
        refusals.append(f"{len(others)} file(s) would replace a different file, not the one the GPU machine "
                        f"started from ({', '.join(others)}): a log not committed here, or the checkpoint of a run "
                        "resumed here since, would be lost; move it away (or give another --side) to take the "
                        "tarball's")
    if refusals:
        raise UserError(f"refusing to unpack {tarball}: {'; '.join(refusals)}")
    side = side or Path(tempfile.mkdtemp(prefix="campaign-side-"))
    done = {kind: 0 for kind in (*REPO_KINDS, "side")}
    for kind, root, rel, data in writes:
        write_atomic((root or side).joinpath(*rel.parts), data)
        done[kind] += 1
    print(f"unpacked {tarball}: {done['record']} new records, {done['log']} logs, {done['bench']} bench files, "
          f"{done['checkpoint']} checkpoints into {repo}; {same} files already there, identical; "
          f"{done['side']} side files (failed or unfinished runs, the campaign log) in {side}")
    return side


def _completed_beside(checkpoint: Path) -> bool:
    """Whether the records folder of a checkpoint (``<folder>/.work/<run id>/checkpoint.pt``) holds its run's
    completed record."""
    rid = checkpoint.parent.name
    record = checkpoint.parent.parent.parent / f"{rid}.json"
    try:
        return record.is_file() and load_record(record).status == "completed"
    except (OSError, InvalidRecordError):
        return False
