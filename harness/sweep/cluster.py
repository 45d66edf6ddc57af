"""The cluster executors of ``harness sweep``: Slurm job arrays through submitit (``map_array``), and Ray tasks.
No scheduler of our own."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from domains.base import counted, require
from domains.errors import UserError
from domains.files import refuse_link
from harness.run import stopping
from harness.run.runner import RunRequest, default_data_root
from harness.sweep.jobs import POLL_S, SlurmJob, failed, not_started, progress, report, run_job, stopped
from harness.sweep.local import threads

# What a job on another machine (Ray) needs of this environment to import the harness and find the data.
FORWARDED_ENV = ("PYTHONPATH", "HARNESS_PLUGINS", "HARNESS_DATA_ROOT", "HARNESS_CACHE_DIR")
RAY_AUTH_MODE = "RAY_AUTH_MODE"  # Ray's: "token" makes a driver send its token (:func:`refused_token`)
SUBMITIT_LOG_LEVEL = "SUBMITIT_LOG_LEVEL"  # read once, when submitit is imported (:func:`import_submitit`)


def _cpus_per_job(args: argparse.Namespace) -> int:
    if args.cpus_per_job is not None and args.cpus_per_job < 1:
        raise UserError("--cpus-per-job must be at least 1")
    return args.cpus_per_job or threads(args.workers)


def _absolute(request: RunRequest) -> RunRequest:
    """The request with absolute folders: a job on another machine or under a scheduler starts elsewhere."""
    return dataclasses.replace(request, results=str(Path(request.results).resolve()),
                               data_root=str(default_data_root(request.data_root).resolve()))


def import_submitit() -> Any:
    """submitit, imported without its logging set-up. On import it runs ``logging.config.dictConfig``, which closes
    every logging handler the process has (a host program's; absl's, which closes the stream it was given: under
    pytest a capture file, under ``harness.run.output`` a wrapper of the real stderr), and binds its own handlers to
    the ``sys.stdout`` and ``sys.stderr`` of that moment. Here its logger is configured by nobody: its warnings
    reach the root logger, which the harness's output settings (:mod:`harness.run.output`) govern like any other.
    A level given in ``SUBMITIT_LOG_LEVEL`` still applies."""
    if "submitit" in sys.modules:
        return require("submitit", "sweep")
    given = os.environ.get(SUBMITIT_LOG_LEVEL)
    os.environ[SUBMITIT_LOG_LEVEL] = "NOCONFIG"
    try:
        submitit = require("submitit", "sweep")
    finally:
        if given is None:
            os.environ.pop(SUBMITIT_LOG_LEVEL, None)
        else:
            os.environ[SUBMITIT_LOG_LEVEL] = given
    if given and given.upper() != "NOCONFIG":
        try:
            logging.getLogger("submitit").setLevel(int(given) if given.isdigit() else given.upper())
        except ValueError:
            raise UserError(f"{SUBMITIT_LOG_LEVEL}='{given}' is not a logging level (DEBUG, INFO, WARNING, ERROR, "
                            "a number, or NOCONFIG)") from None
    return submitit


def executor_library(executor: str) -> Any:
    """The library ``--executor`` runs its jobs with (None for ``local``), imported: a missing one is a UserError
    naming the install command (:func:`domains.base.require`), which a dry run gives as the sweep itself would."""
    if executor == "slurm":
        return import_submitit()
    return require("ray", "ray") if executor == "ray" else None


def run_slurm(requests: list[RunRequest], workers: int, args: argparse.Namespace, varying: list[str],
              stop_file: Path | None = None) -> list[dict[str, Any]] | None:
    """Slurm job arrays through submitit; None when submitit detects no Slurm here. ``varying``: as
    :func:`harness.sweep.local.run_local`'s."""
    # submitit reads each job's result back by unpickling it from this folder: it must be ours, not a link.
    refuse_link(Path(args.results) / ".submitit", Path(args.results))
    submitit = import_submitit()
    executor = submitit.AutoExecutor(folder=str(Path(args.results) / ".submitit" / "%j"))
    if executor.cluster != "slurm":
        print(f"no Slurm cluster found (submitit detected '{executor.cluster}'); running with the local executor")
        return None
    cpus = _cpus_per_job(args)
    params: dict[str, Any] = {"timeout_min": args.timeout_min, "slurm_array_parallelism": workers,
                              "cpus_per_task": cpus, "gpus_per_node": 1 if args.device.startswith("cuda") else 0}
    if args.slurm_partition:
        params["slurm_partition"] = args.slurm_partition
    executor.update_parameters(**params)
    requests = [_absolute(r) for r in requests]
    utils = submitit.core.utils
    try:
        # submitit prints a refusing sbatch's stderr before it raises; the error line below gives it once
        with contextlib.redirect_stderr(io.StringIO()):
            jobs = executor.map_array(SlurmJob(), requests, [str(stop_file) if stop_file else None] * len(requests),
                                      [cpus] * len(requests))
    except (OSError, utils.FailedJobError, utils.FailedSubmissionError) as exc:
        raise UserError(_submission_error(exc, Path(args.results) / ".submitit")) from None
    print(f"submitted {counted(len(jobs), 'job')} as Slurm array {jobs[0].job_id.split('_')[0]}")
    results: list[dict[str, Any]] = []
    waiting = dict(zip(jobs, requests))
    left_queue = LeftQueue(args.slurm_lost_after)
    with progress(len(jobs)) as bar:
        while waiting:
            gone = left_queue(list(waiting))
            for job in [j for j in waiting if j in gone or j.done()]:
                request = waiting.pop(job)
                if job in gone:
                    error = (f"Slurm job {job.job_id} left the queue without a result, and sacct cannot say how it "
                             "ended (no accounting here): cancelled, killed, out of memory, or requeued and not "
                             f"started (its log: {job.paths.stderr}); rerun the sweep with --resume")
                else:
                    try:
                        results += report(job.result(), bar, request, varying)
                        continue
                    except Exception as exc:  # noqa: BLE001 - raised, cancelled, killed, out of memory: the others go on
                        error = _failure(job, exc, submitit)
                cancelled = stop_file is not None and stopping.stop_reason() is not None
                results += not_started([request]) if cancelled else report([failed(request, error)], bar, request,
                                                                             varying)
            if stop_file is not None and stopped(stop_file):
                for job in waiting:
                    if job.state == "PENDING":
                        job.cancel(check=False)
            if waiting:
                time.sleep(POLL_S)
    return results


class LeftQueue:
    """The jobs that left Slurm's queue without writing their result. submitit learns how a job ended from sacct;
    where Slurm keeps no accounting, sacct fails and a job killed before it wrote its result (cancelled, out of
    memory, a node lost, a requeued job that could not start) would be waited on for ever. squeue still lists every
    job that is pending, running or completing: one that submitit cannot place (state UNKNOWN), absent from squeue
    for ``gone_s`` (``--slurm-lost-after``) and still without a result, has ended without one. The wait covers a
    result file that a shared filesystem shows late. squeue is asked at most every ``CHECK_S`` (or ``gone_s`` when
    shorter); one that does not answer is no sign."""

    CHECK_S = 10.0

    def __init__(self, gone_s: float) -> None:
        self.gone_s = gone_s
        self.check_s = min(self.CHECK_S, gone_s)
        self._checked = 0.0
        self._absent_since: dict[Any, float] = {}

    def __call__(self, jobs: list[Any]) -> set[Any]:
        now = time.monotonic()
        if now - self._checked < self.check_s:
            return set()
        self._checked = now
        unknown = [job for job in jobs if job.state == "UNKNOWN"]
        listed = _squeue() if unknown else None
        if listed is None:
            return set()
        for job in unknown:
            if job.job_id in listed:
                self._absent_since.pop(job, None)
            else:
                self._absent_since.setdefault(job, now)
        return {job for job in unknown
                if now - self._absent_since.get(job, now) >= self.gone_s and not job.done(force_check=True)}


def _squeue() -> set[str] | None:
    """The ids of this user's jobs in Slurm's queue, array tasks one by one (``5_0``); None when squeue fails."""
    try:
        # --user, not --me: Slurm before 20.11 has no --me
        out = subprocess.run(["squeue", f"--user={os.getuid()}", "--noheader", "--array", "--format=%i"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.split()) if out.returncode == 0 else None


def _submission_error(exc: Exception, folder: Path) -> str:
    """One line for an array that sbatch did not take: not started (OSError: no sbatch here), refused (submitit's
    FailedJobError holds sbatch's stderr) or answered without a job id (FailedSubmissionError): then the array may
    be queued after all."""
    said = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, OSError):
        return (f"--executor slurm: sbatch could not be started ({exc.strerror or exc}: "
                f"{exc.filename or 'sbatch'}); nothing was submitted: run where Slurm's commands are on the PATH")
    if type(exc).__name__ == "FailedSubmissionError":
        return (f"--executor slurm: sbatch answered without a job id ({said}); the array may be queued anyway: "
                f"see squeue before submitting again; its script is in {folder}")
    return f"--executor slurm: sbatch refused the job array ({said}); nothing was submitted; its script is in {folder}"


def _failure(job: Any, exc: Exception, submitit: Any) -> str:
    """One line for a job whose result could not be read: the exception it raised, or how it ended."""
    raised = _raised(exc) if isinstance(exc, submitit.core.utils.FailedJobError) else None
    if raised:
        return f"Slurm job {job.job_id} raised {raised} (its traceback: {job.paths.stderr})"
    return f"Slurm job {job.job_id} ended without a result ({type(exc).__name__}); rerun the sweep with --resume"


def _raised(failed: Exception) -> str | None:
    """The exception a Slurm job raised (outside :func:`run_job`, which returns its own failures: a node that
    cannot import the harness), in one line, ``Type: message``. submitit's FailedJobError carries only the job's
    traceback, as text: the exception is the lines after its last frame (``  File ...`` and the indented source
    lines under it), up to submitit's closing rule. None where the text holds no traceback."""
    lines = str(failed).splitlines()
    frames = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not frames:
        return None
    after = itertools.dropwhile(lambda line: line.startswith("    "), lines[frames[-1] + 1:])
    text = " ".join(itertools.takewhile(lambda line: not line.startswith("-----"), after))
    return " ".join(text.split()) or None


def _answers(address: str, given_by: str) -> None:
    """UserError where nothing listens at the Ray ``address`` (``host:port``, or ``ray://host:port``; another form,
    such as ``auto``, is Ray's to resolve): Ray would retry it without end, printing warnings, and a sweep waiting
    there is deaf to Ctrl-C and SIGTERM (its stop handlers only note them), so that only a kill -9 ended it."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise UserError(f"{given_by} {address}: no Ray cluster answers there ({exc.strerror or exc}); start one "
                        "with ray start --head and give the address it prints, or leave out --ray-address (and "
                        "RAY_ADDRESS) to start one for the sweep") from None


def refused_token(exc: BaseException, refusal: type[BaseException], address: str, given_by: str) -> str | None:
    """The error line for a ``ray.init`` at ``address`` (named by ``given_by``) that Ray's token authentication
    failed: the cluster there wants a token and did not get its own, or ``RAY_AUTH_MODE=token`` found none here;
    None for any other failure.

    Ray's ``ray start`` turns token authentication on where ``RAY_AUTH_MODE`` is unset and a token exists
    (``~/.ray/auth_token``, which Ray writes the first time it starts an instance of its own), but a driver given an
    address sends a token only with ``RAY_AUTH_MODE=token`` (``ray._private.worker.init``). The driver cannot tell
    beforehand how the cluster was started (``RAY_AUTH_MODE=disabled`` turns it off there), so this reads the
    failure: Ray raises ``refusal`` (``ray.exceptions.AuthenticationError``) at once where ``RAY_AUTH_MODE=token``
    finds no token here; where the cluster refuses the token sent, or its absence, it retries for about 20 s and
    raises a ConnectionError whose cause holds the last attempt's traceback only as text
    (``ray._private.node.Node._init_gcs_client``), which names that class."""
    named = f"{refusal.__module__}.{refusal.__qualname__}:"
    chain: BaseException | None = exc
    while chain is not None and not (isinstance(chain, refusal) or named in str(chain)):
        chain = chain.__cause__ or chain.__context__
    if chain is None:
        return None
    mode = os.environ.get(RAY_AUTH_MODE)
    if (mode or "").lower() != "token":
        said = "is not set" if mode is None else f"is '{mode}'"
        return (f"{given_by} {address}: the Ray cluster there requires token authentication and this sweep sent no "
                f"token ({RAY_AUTH_MODE} {said}); run it with {RAY_AUTH_MODE}=token and the cluster's token in "
                "~/.ray/auth_token (or RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH)")
    return (f"{given_by} {address}: Ray's token authentication ({RAY_AUTH_MODE}=token) failed: no token here, or "
            "not the cluster's; put the cluster's own token (ray get-auth-token on its head prints it) in "
            "~/.ray/auth_token, RAY_AUTH_TOKEN or the file RAY_AUTH_TOKEN_PATH names")


def _amount(value: float, name: str) -> str:
    return f"{value:g} {name}{'' if value == 1 else 's'}"


def unplaceable(nodes: list[dict[str, Any]], cpus: int, gpus: int, cpus_given: bool) -> str | None:
    """The warning line where no alive node of ``nodes`` (``ray.nodes()``) has the ``cpus`` and ``gpus`` a task asks
    for; None where one has. Ray waits for such a node without a word, and the sweep would sit at 0 jobs done for
    ever; an autoscaling cluster may yet add one, so this warns and the sweep goes on waiting."""
    alive = [node.get("Resources") or {} for node in nodes if node.get("Alive")]
    if any(r.get("CPU", 0) >= cpus and r.get("GPU", 0) >= gpus for r in alive):
        return None
    asked = _amount(cpus, "CPU") + (f" and {_amount(gpus, 'GPU')}" if gpus else "")
    if alive:
        largest = max(alive, key=lambda r: (r.get("GPU", 0) >= gpus, r.get("CPU", 0), r.get("GPU", 0)))
        has = (f"its largest of {counted(len(alive), 'alive node')} has {_amount(largest.get('CPU', 0), 'CPU')} "
               f"and {_amount(largest.get('GPU', 0), 'GPU')}")
    else:
        has = "it has no alive node"
    cpu_fix = ("lower --cpus-per-job" if cpus_given else
               "give --cpus-per-job (its default is this machine's CPUs over --workers), or more --workers")
    fixes = cpu_fix + (", or --device cpu" if gpus else "")
    return (f"warning: each Ray task asks for {asked}, but no node of the Ray cluster has them ({has}): the sweep "
            f"waits until such a node joins; to run on the nodes there, {fixes}")


class Unplaced:
    """The warning of :func:`unplaceable` at the first call, and again every ``remind_s`` while it holds (until a node
    that can take a task joins, nothing starts and the sweep shows no other sign of life); None otherwise. Once a
    node can take a task, the cluster is not asked again. ``nodes``: ``ray.nodes``."""

    REMIND_S = 60.0

    def __init__(self, nodes: Callable[[], list[dict[str, Any]]], cpus: int, gpus: int, cpus_given: bool,
                 remind_s: float = REMIND_S) -> None:
        self._nodes, self._asked, self.remind_s = nodes, (cpus, gpus, cpus_given), remind_s
        self._checked: float | None = None
        self._placeable = False

    def __call__(self) -> str | None:
        now = time.monotonic()
        if self._placeable or (self._checked is not None and now - self._checked < self.remind_s):
            return None
        self._checked = now
        try:
            warning = unplaceable(self._nodes(), *self._asked)
        except Exception:  # noqa: BLE001 - a cluster that cannot list its nodes: no sign either way
            return None
        self._placeable = warning is None
        return warning


def _on_cancel(signum: int, frame: object) -> None:
    """Only a stopped sweep cancels its tasks: the job's line names that reason, as the stop file's would."""
    stopping.request_stop(stopping.SWEEP_STOPPED)


def _ray_job(request: RunRequest, stop_file: str, threads: int) -> list[dict[str, Any]]:
    """:func:`run_job` as a Ray task. ``ray.cancel`` (force=False) interrupts a running task as SIGINT would
    (``_thread.interrupt_main``: its Python handler, by default a KeyboardInterrupt, which would end the job short
    of its checkpoint, reported as cancelled); here it asks the job to stop at its next checkpoint, as the stop
    file does. Kept for the worker's life: a cancel that lands as the job returns must not become the
    KeyboardInterrupt that drops its result."""
    signal.signal(signal.SIGINT, _on_cancel)
    return run_job(request, stop_file, threads)


def run_ray(requests: list[RunRequest], args: argparse.Namespace, stop_file: Path,
            varying: list[str]) -> list[dict[str, Any]]:
    """Ray tasks, at most ``--workers`` at once, each asking for ``--cpus-per-job`` CPUs and, with ``--device
    cuda``, one GPU. A task whose worker dies is reported failed (no retry: a rerun, with ``--resume``, goes
    on from its checkpoint); the others go on. Where no node can take a task, a warning says so (:class:`Unplaced`)
    and the sweep waits for one. A stopped sweep cancels its tasks that have not started, reported not started.
    ``varying``: as :func:`harness.sweep.local.run_local`'s."""
    ray = executor_library("ray")
    env = {name: os.environ[name] for name in FORWARDED_ENV if os.environ.get(name)}
    # Without an address Ray would join the cluster the last `ray start` on this machine named in its temp folder,
    # even one long dead (its head killed, not stopped), and retry it for minutes on end: "local" starts one here, as
    # --ray-address's help says. RAY_ADDRESS, Ray's own way to name a cluster (`ray job submit` sets it), still counts.
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or "local"
    given_by = "--ray-address" if args.ray_address else "RAY_ADDRESS"
    if address != "local":
        _answers(address, given_by)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=args.verbose,
                 runtime_env={"env_vars": env} if env else None)
    except Exception as exc:
        # a Ray release older than its token authentication has no AuthenticationError, and no such refusal
        refusal = getattr(ray.exceptions, "AuthenticationError", None)
        line = refused_token(exc, refusal, address, given_by) if refusal and address != "local" else None
        if line is None:
            raise
        raise UserError(line) from None
    finally:
        # ray.init sets a SIGTERM handler of its own (sys.exit, and its core worker logs a crash): a SIGTERM ended
        # the sweep at once, exit 1, and with it its job, whose running tasks died short of their checkpoint
        signal.signal(signal.SIGTERM, sigterm)
    cpus, gpus = _cpus_per_job(args), 1 if args.device.startswith("cuda") else 0
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(_ray_job)
    queued, running, results, cancelled = [_absolute(r) for r in requests], {}, [], False
    unplaced = Unplaced(ray.nodes, cpus, gpus, args.cpus_per_job is not None)
    try:
        with progress(len(queued)) as bar:
            while queued or running:
                warning = unplaced()
                if warning:
                    bar.write(warning)
                while queued and len(running) < args.workers:
                    request = queued.pop(0)
                    running[remote.remote(request, str(stop_file), cpus)] = request
                ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    request = running.pop(ref)
                    try:
                        results += report(ray.get(ref), bar, request, varying)
                    except ray.exceptions.TaskCancelledError:  # cancelled below before it started
                        results += report(not_started([request]), bar, request, varying)
                    except ray.exceptions.RayError as exc:  # the worker died (killed, out of memory, node lost)
                        error = f"its Ray worker was lost ({type(exc).__name__}); rerun the sweep with --resume"
                        results += report([failed(request, error)], bar, request, varying)
                if not cancelled and stopped(stop_file):
                    results += not_started(queued)
                    queued = []
                    # A task still waiting for a node reads the stop file only once it starts: where no node can
                    # take it (Unplaced), never, and the sweep waited on it for ever. Ray cannot say which tasks
                    # have started; a running one is asked to stop (_ray_job), as by the stop file.
                    for ref in running:
                        ray.cancel(ref)
                    cancelled = True
    finally:
        if address == "local":
            ray.shutdown()  # the cluster ray.init started here
    return results
