"""Reading a file the harness was handed (a record, a bench file) only where it is a regular file.

Opening a FIFO for reading blocks until something writes to it, and a device can be read for ever: a results
folder holding either would hang every command that reads it. :func:`read_regular` opens without blocking, asks
the opened file (not its name, which could be swapped between a check and the open) what it is, and reads only a
regular file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from domains.errors import UserError


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
