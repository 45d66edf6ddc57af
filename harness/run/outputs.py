"""The log file and the live trackers of one run, opened once the run goes ahead: a fresh run's at once, a resumed
run's once its domain has restored the checkpoint, the last check a checkpoint meets, or, for a domain that restores
none, once its training begins (``RunContext.on_going_ahead``: its first progress loop or ``log_scalars``). A
checkpoint refused as the domain restores it (:class:`~domains.errors.ResumeRefused`: an object it lacks, a
counter out of range, a state that does not load) is a mistake about the command, as one refused before the run
starts (``RunContext.check_resume``): the results folder stays as it was, with no log line and no tracker run. What
the run logs before its log opens (its command, what the domain says as it builds the run) is held, and written
first once it opens."""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path

from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from harness import records
from harness.run import tracking

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _Held(logging.handlers.MemoryHandler):
    """Holds every line until :meth:`setTarget` gives it the log file, then passes on the held lines and each
    later one as it comes; closed before that, it drops them."""

    def __init__(self) -> None:
        super().__init__(capacity=0, flushLevel=logging.CRITICAL + 1, target=None, flushOnClose=False)

    def shouldFlush(self, record: logging.LogRecord) -> bool:
        return self.target is not None


def _log_file(path: Path) -> logging.FileHandler:
    """The run's log, appended to; UserError where it cannot be (a folder in its place, no permission)."""
    try:
        log = logging.FileHandler(path)
    except OSError as exc:
        raise UserError(f"cannot write the run's log {path}: {exc.strerror or exc}") from None
    log.setFormatter(logging.Formatter(FORMAT))
    return log


class RunOutputs:
    """What ``harness run`` writes of one run as it goes, beside the record: the log ``<run id>.log`` and the
    trackers (``--tracker``), which go to ``ctx.trackers`` as they open. ``write`` False (a secondary rank under
    torchrun): nothing."""

    def __init__(self, path: Path, rid: str, spec: RunSpec, ctx: RunContext, trackers: list[str], resume: bool,
                 announce: bool, write: bool) -> None:
        self.handler: logging.Handler = _Held() if write else logging.NullHandler()
        self.trackers: list[tracking.Tracker] = []
        self._path, self._rid, self._spec, self._ctx = path, rid, spec, ctx
        self._names, self._resume, self._announce = trackers, resume, announce
        self._opened = not write
        self._error: BaseException | None = None

    def open(self) -> None:
        """Set aside a damaged record in the way, open the trackers, then the log with the lines held so far; once
        (a second call does nothing, or raises again the error the first one met: a tracker that cannot open stops
        the run before its record, wherever the open was)."""
        if self._error is not None:
            raise self._error
        if self._opened:
            return
        self._opened = True
        try:
            records.set_aside_damaged(self._path)
            self.trackers = tracking.open_trackers(self._names, self._path.parent, self._rid, self._spec,
                                                   self._resume, self._ctx.work_dir, announce=self._announce)
            self._ctx.trackers = self.trackers
            log = _log_file(self._path.with_suffix(".log"))
            self.handler.setTarget(log)
            self.handler.flush()
        except BaseException as exc:
            tracking.close(self.trackers)  # those that opened end as failed, never left running
            self._error = exc
            raise

    def close(self, ending: tracking.Ending = tracking.FAILED) -> None:
        """Close the trackers, telling them how the run ended (``ending``), and the log (after an interruption too:
        what was logged stays readable); a second call does nothing more."""
        tracking.close(self.trackers, ending)
        log = getattr(self.handler, "target", None)
        self.handler.close()
        if log is not None:
            log.close()
