"""The errors a domain raises and the harness tells apart: a mistake the user can fix (:class:`UserError`, printed as
one line), a missing dataset, a file that cannot be written, a refused ``--resume``, a diverged loss, and a requested
stop (:class:`RunStopped`, not a failure)."""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """A mistake the user can fix; the CLI prints it as one line, without a traceback."""


class DatasetMissingError(UserError):
    """A dataset is not on disk and could not be downloaded; the message says where to put it."""


class UnwritableFileError(UserError, OSError):
    """A file the harness could not write (a full disk, a folder turned read-only): the file there, if any, is
    unchanged. Also an OSError (``strerror`` the system's reason), so callers that handle a failed write as one
    still do; the CLI prints it as one line, like any UserError."""

    def __init__(self, path: Path, cause: OSError):
        super().__init__(f"cannot write {path}: {cause.strerror or cause}; the file there, if any, is unchanged")
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, str(path)

    def __str__(self) -> str:  # OSError's would be "[Errno 28] ...", without what the file there kept
        return str(self.args[0])


class ResumeRefused(UserError):
    """``--resume`` found a checkpoint it cannot go on from (another run's, unreadable, damaged): a mistake about the
    command, not a result of the run. No record is written for it and the checkpoint stays, for the user to act
    on; the message says how to start over."""


class NonFiniteLossError(UserError):
    """Training produced a NaN or infinite loss; raised at once by :meth:`RunContext.check_loss`."""


class RunStopped(BaseException):
    """The run was asked to stop (a signal, a time limit) and did, at a step boundary where its checkpoint holds
    its state: resuming goes on from there. A BaseException, like KeyboardInterrupt, so that a domain's
    ``except Exception`` never takes it for a failure; the message is the reason."""
