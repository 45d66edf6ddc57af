"""The files of the harness's folders and caches: atomic writes (:func:`write_atomic`), no link followed
(:func:`refuse_link`), only regular files read where a record or bench file was handed in (:func:`read_regular`:
a FIFO or a device there would hang every command that reads the folder), the user's own cache (:func:`cache_dir`),
and the digests of data files and JSON objects that fingerprint a run's data (:func:`hash_files`,
:func:`hash_jsonable`)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from domains.errors import UnwritableFileError, UserError


def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: str | bytes | Callable[[Any], None]) -> None:
    """Write ``data`` (text as UTF-8, bytes, or a function that writes into the binary file object it gets, e.g.
    ``lambda fh: torch.save(state, fh)``) to ``path`` through a unique temporary file in the same folder, fsync
    and ``os.replace`` (atomic on POSIX). A reader, a crash or a concurrent writer never sees half a file, and a
    failed write leaves the old file intact. The file gets the mode any other new file would (0666 less the
    umask), not mkstemp's private 0600, so a shared results folder stays readable. UnwritableFileError, naming
    ``path``, when the system refuses (no space, no permission): a write error alone does not name the file."""
    path, tmp = Path(path), None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            if callable(data):
                data(fh)
            else:
                fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except Exception as exc:
        # A writer may wrap the system's refusal: torch.save raises a RuntimeError in handling the OSError.
        refusal = exc if isinstance(exc, OSError) else exc.__context__
        if isinstance(refusal, OSError):
            raise UnwritableFileError(path, refusal) from exc
        raise
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be read as a folder, as the end of a sentence naming it ("does not exist", "is a file,
    not a folder"), or None when it is one."""
    if path.is_dir():
        return None
    if not path.exists():
        return "does not exist"
    return f"is {'a file, ' if path.is_file() else ''}not a folder"


def refuse_link(path: Path, folder: Path) -> None:
    """UserError when ``path``, or a folder between ``folder`` and it, is a symbolic link: the harness opens no
    file of its own folders (records, logs, checkpoints) through a link, which could point anywhere."""
    path, folder = Path(path), Path(folder)
    try:
        parts = path.relative_to(folder).parts
    except ValueError:
        raise UserError(f"{path} is not inside {folder}") from None
    for depth in range(len(parts), 0, -1):
        here = folder.joinpath(*parts[:depth])
        if here.is_symlink():
            raise UserError(f"{here} is a symbolic link; the harness does not read or write through links in its "
                            "folders: replace it with the file itself, or remove it")


def cache_dir() -> Path:
    """The writable cache for derived files (processed datasets, split corpora): ``$HARNESS_CACHE_DIR``
    or ``~/.cache/contrastive-harness``; never the data root, which may be read-only. A cache read as data must be
    the user's alone: UserError where the folder exists and belongs to another user or anyone may write it
    (a file planted there, with the digest its name promises, would be read as the data)."""
    env = os.environ.get("HARNESS_CACHE_DIR")
    path = Path(env) if env else Path.home() / ".cache" / "contrastive-harness"
    try:
        st = path.stat()
    except OSError:
        return path  # not there yet: whoever creates it first is this process
    if st.st_uid != os.getuid() or st.st_mode & stat.S_IWOTH:
        whose = "belongs to another user" if st.st_uid != os.getuid() else "is writable by every user"
        raise UserError(f"the cache folder {path} {whose}: a file planted there would be read as data; "
                        "set HARNESS_CACHE_DIR to a folder of your own")
    return path


_FILE_HASHES: dict[tuple[tuple[str, int, int], ...], str] = {}
"""The digests :func:`hash_files` computed in this process, keyed by each file's resolved path, size and
modification time in nanoseconds: a run fingerprints its data before deciding whether it has work left, then
loads it, and a sweep's worker fingerprints every job's, so the same files would be read again each time."""


def hash_files(paths: Iterable[Path]) -> str:
    """sha256 over the names and bytes of ``paths`` (sorted), for data fingerprints. Computed once per process
    for files that have not changed since (:data:`_FILE_HASHES`): a rewritten file has another size, mtime,
    ctime or inode (``rsync -t`` or ``touch -r`` puts the mtime back, not the ctime, which moves at the file
    system's resolution). UserError naming the file that cannot be read."""
    ordered = sorted(Path(p) for p in paths)
    try:
        key = tuple((str(p.resolve()), (st := p.stat()).st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                    for p in ordered)
        if key not in _FILE_HASHES:
            digest = hashlib.sha256()
            for path in ordered:
                digest.update(path.name.encode())
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        digest.update(chunk)
            _FILE_HASHES[key] = digest.hexdigest()
    except OSError as exc:
        raise UserError(f"cannot read data file {exc.filename or ''}: {exc.strerror or exc}") from None
    return _FILE_HASHES[key]


def hash_jsonable(obj: Any) -> str:
    """A stable sha256 of a JSON-serialisable object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


class NotRegularFileError(UserError):
    """A path that names a FIFO, a device, a socket or a folder where a file was expected."""


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file at ``path``. OSError when it cannot be opened, NotRegularFileError (naming
    the file and what it is) when it is no regular file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "not a regular file")
            raise NotRegularFileError(f"{path}: is {kind}, not a regular file; the harness reads only regular files "
                                      "here: remove it or replace it with the file itself")
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            return fh.read()
    finally:
        if fd >= 0:
            os.close(fd)
