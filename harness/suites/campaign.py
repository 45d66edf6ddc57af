"""``python -m harness.suites.campaign`` (``tools/campaign``): run a GPU campaign's plan in the time a device
command has, then bring its records back in one tarball.

A plan (``harness/suites/campaign/<name>.txt``, or a path) is a suite file with a cost column: ``domain method
dataset loss preset seeds cost [key=value ...]``, the cost being the estimated device seconds of one seed run
alone on the GPU, and the overrides what ``harness run --set`` takes. A line ``#! records: leaderboards/prior``
sends the plan's records to that folder of the repository (default ``leaderboards/results``).

    run PLAN     every setting's seeds as ``harness run --device cuda``, ``--jobs`` at a time with ``--threads``
                 each, into the staging folder ``<stage>/<records folder>``, which starts with a copy of the
                 repository's records of that folder (so a run already recorded is skipped, not run again) and of any
                 checkpoint carried along. Each run gets ``--time-limit`` = what is left of ``--time``, less 15 s for
                 its start-up (the limit counts from after its imports); one not finished by then stops at its next
                 checkpoint and exits 75, listed as "not finished yet": the same command again resumes it
                 (``--resume`` is passed where a checkpoint waits). No run starts with less than a minute left, and
                 one still going 90 s after ``--time`` is killed (its last checkpoint stays). A run whose checkpoint
                 ``--resume`` refuses (another run's, unreadable or damaged: ``harness run`` exits 2 and writes
                 nothing) is listed as refused and the others go on; its work folder in the stage moves to
                 ``<stage>/<records folder>/.refused/``, and where the call carried it from the repository, the
                 summary gives the command that sets it aside there too: until then every call that carries it
                 refuses it again. ``--dry-run`` prints the commands and the estimated device time: the sum of the
                 costs (runs that keep the GPU busy share it, so their times add up) and the schedule of ``--jobs``
                 workers (perfect overlap, the least it can take). It also reads the checkpoint waiting in the
                 repository's records folder for each chosen run, under its run id, as ``--resume`` would before
                 the training objects are built: one it would refuse (unreadable, damaged, another run's) gets a
                 line with the command that sets it aside, and the dry run exits 2, before a call carries it. Where
                 a setting's run id cannot be had here (its data set is not on this machine), a note says so and
                 every checkpoint of its domain, method, loss and seed is read, another config's too. A plan whose
                 least time is over ``--budget`` (the device time it may use over all its calls, when given) is
                 refused: it cannot fit. Without ``--budget`` a plan longer than ``--time`` runs in several calls
                 of the same command, each resuming the last. A setting whose seeds would start side by side and
                 that no completed record of the repository's folder ran (any code) gets a note: run its first seed
                 alone first, so that a failure of the setting costs one run.
    pack         what the stage holds that the repository lacks, into one tarball under ``--out`` (``$OUT``):
                 see :mod:`harness.suites.pack`.
    unpack TAR   the tarball's records, logs, bench files and checkpoints into the repository; refuses the
                 whole tarball, writing nothing, when a record would replace a different one, or another file
                 one that differs from what the GPU machine started from (an uncommitted log, a checkpoint
                 resumed here since), or a destination is a link or a folder.
    travel       before the first call: whether each ``.device-carry*`` part, with the working tree, its
                 ``.git`` and what ``--carry`` names, fits the 64 MiB one call sends, and the ``--max-mib`` for
                 device-pack: see :mod:`harness.suites.travel`.

Exit status of ``run``: 0 every run completed; 75 some stopped at a checkpoint or did not start (run it again);
1 a run crashed or was killed; 2 bad input (the plan, an argument, a run refused as bad input, its ``--resume``
refused). ``pack`` and
``unpack``: 0, or 2 with a one-line error. ``travel``: 0 every part fits, 1 one does not, 2 nothing packed.
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch

from domains.context import START_OVER, RunContext
from domains.errors import ResumeRefused, UserError
from harness.ending import own_command
from harness.records import read_record
from harness.run import runner
from harness.run.config import parse_seeds
from harness.run.stopping import EXIT_STOPPED, parse_duration
from harness.suites import SUITES, Setting, load_suite, named_file
from harness.suites.pack import CAMPAIGN_LOG, pack
from harness.suites.pool import Interrupted, run_all
from harness.suites.travel import travel
from harness.suites.unpack import unpack

PLANS = SUITES / "campaign"
RECORDS = "leaderboards/results"
DIRECTIVE = "#! records:"
STAGE = "/tmp/campaign"
MIN_START_S = 60.0  # a run started later would not reach its first checkpoint
GRACE_S = 90.0  # after --time: the step under way, the checkpoint, an evaluation that cannot stop
# A `harness run` counts its --time-limit from when its command starts, after Python, torch and its domain are
# imported (seconds on a loaded machine): a run given all that was left of --time ended past it by that much.
STARTUP_S = 15.0


@dataclass(frozen=True)
class Plan:
    path: Path
    records: str  # the repository's records folder the runs belong to
    settings: list[Setting]

    def runs(self, only: list[str], seeds: list[int] | None = None) -> list[tuple[Setting, int]]:
        """(setting, seed) of every run, in the plan's order; with ``only``, the settings whose line holds one of
        those texts as whole words (:func:`holds_words`); with ``seeds``, those of their seeds (a short session
        takes one seed of every setting, a table's first full row, before the next seeds)."""
        lines = self.path.read_text().splitlines()
        chosen = [s for s in self.settings if not only or any(holds_words(lines[s.line - 1], text) for text in only)]
        if not chosen:
            raise UserError(f"no setting of {self.path} holds the whole words of --only {' | '.join(only)}")
        runs = [(s, seed) for s in chosen for seed in s.seeds if seeds is None or seed in seeds]
        if not runs:
            raise UserError(f"no chosen setting of {self.path} has the seeds {', '.join(map(str, seeds or []))} "
                            "(--seeds)")
        return runs


def holds_words(line: str, text: str) -> bool:
    """Whether the plan line, its comment apart, holds the words of ``text`` one after the other, each whole: a
    bare substring would take ``rho=0.99`` for ``rho=0.997`` too, and start runs nobody chose."""
    words, wanted = line.split("#", 1)[0].split(), text.split()
    return bool(wanted) and any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def plan_path(name: str) -> Path:
    """A plan: a name under ``harness/suites/campaign/`` or a path to a file."""
    return named_file(name, PLANS, "plan")


def load_plan(path: Path) -> Plan:
    """The plan's settings, each with its cost, and its records folder; UserError naming the file and line."""
    records = RECORDS
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith(DIRECTIVE):
            records = line[len(DIRECTIVE):].strip()
            folder = PurePosixPath(records)
            # '..' or a hidden name would send the runs outside the records folders that pack and unpack know
            if folder.parts[:1] != ("leaderboards",) or len(folder.parts) != 2 or folder.name == "bench" \
                    or folder.name.startswith("."):
                raise UserError(f"{path}:{number}: the records folder must be leaderboards/<folder> (not bench, "
                                "not '..', not hidden), "
                                f"got '{records}'")
    return Plan(path, records, load_suite(path, costed=True))


def schedule(costs: list[float], jobs: int) -> float:
    """When the last of ``costs`` ends when ``jobs`` workers take them in order and overlap perfectly."""
    workers = [0.0] * jobs
    for cost in costs:
        heapq.heappush(workers, heapq.heappop(workers) + cost)
    return max(workers)


def harness_run(setting: Setting, seed: int, device: str, results: Path) -> list[str]:
    return [sys.executable, "-m", "harness", "run", *setting.run_args(seed), "--device", device,
            "--results", str(results), "--quiet", "--tracker", "none"]


def seed_stage(repo_records: Path, staged: Path) -> int:
    """Copy the repository's records (and carried checkpoints) of the folder into the stage where absent: a run
    recorded there is then skipped, a carried checkpoint resumed. Returns how many files were copied."""
    copied = 0
    for source in [*repo_records.glob("*.json"), *repo_records.glob(".work/*/checkpoint.pt")]:
        target = staged / source.relative_to(repo_records)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            copied += 1
    return copied


def waiting_checkpoints(records: Path, setting: Setting, seed: int) -> list[Path]:
    """The checkpoints of this setting's method, loss and seed in ``records/.work``: the run's own is among them
    (its id's hash needs the data); resuming with one of another run of the same names only starts the run fresh."""
    return sorted((records / ".work").glob(f"{setting.domain}-*-{setting.method}-{setting.loss}-*-s{seed}/"
                                           "checkpoint.pt"))


def by_setting(runs: list[tuple[Setting, int]]) -> dict[Setting, list[int]]:
    """The chosen seeds of each setting, in the plan's order."""
    seeds: dict[Setting, list[int]] = {}
    for setting, seed in runs:
        seeds.setdefault(setting, []).append(seed)
    return seeds


def own_checkpoints(records: Path, setting: Setting, seeds: list[int]) -> tuple[dict[int, list[Path]], str | None]:
    """The checkpoint in ``records/.work`` that ``harness run --resume`` of each seed would read: the one under its
    run id (:func:`harness.run.runner.run_ids`), where that can be had here; where it cannot (its data set is not
    on this machine), every checkpoint of the seed's domain, method and loss (:func:`waiting_checkpoints`), another
    config's among them, with a note that says so. The run id is computed only where a checkpoint waits."""
    waiting = {seed: waiting_checkpoints(records, setting, seed) for seed in seeds}
    if not any(waiting.values()):
        return waiting, None
    try:
        rids = runner.run_ids(setting.request(seeds))
    except UserError as exc:
        return waiting, (f"note: no run id for {setting.label(seeds[0]).rsplit(' seed ', 1)[0]} here "
                         f"({' '.join(str(exc).split())}): read every checkpoint of its domain, method, loss and "
                         "seeds, those of its other configs too")
    return {seed: [path for path in waiting[seed] if path.parent.name == rid] for seed, rid in zip(seeds, rids)}, None


def unresumable(runs: list[tuple[Setting, int]], records: Path) -> tuple[list[str], list[str]]:
    """A line for each checkpoint waiting in ``records/.work`` for one of ``runs`` (:func:`own_checkpoints`) that
    ``harness run --resume`` would refuse: unreadable, damaged, or saved by another run than its folder names (the
    checks that need no training objects), found here on the CPU before a device call carries it, with the command
    that sets it aside; and the notes of the settings whose run ids could not be had here."""
    lines, notes = [], []
    for setting, seeds in by_setting(runs).items():
        found, note = own_checkpoints(records, setting, seeds)
        notes += [note] if note else []
        for seed in seeds:
            for path in found[seed]:
                folder = path.parent
                try:
                    RunContext(seed=seed, device=torch.device("cpu"), data_root=Path(), work_dir=folder,
                               resume=True, run_key=folder.name).check_resume()
                except ResumeRefused as exc:
                    lines.append(f"refused to resume: {setting.label(seed)}: {' '.join(str(exc).split())}; set it "
                                 f"aside before a call carries it: {set_aside_command(records, folder.name)}")
    return lines, notes


def refused_run(output: str) -> str | None:
    """The run id whose checkpoint ``harness run --resume`` refused, read from its ``error:`` line, which names
    the checkpoint (or the link in its way) under ``.work/<run id>`` and ends as a refusal does
    (:data:`domains.context.START_OVER`); None for any other error: a missing data set or a bad override, which
    moving the work folder aside would not mend, or a checkpoint or record that could not be written (a full
    disk), whose work folder holds the sound checkpoint the next call resumes."""
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    if not errors or not (errors[-1].endswith(START_OVER) or " is a symbolic link" in errors[-1]):
        return None
    found = re.search(r"/\.work/([^/\s]+)", errors[-1])
    return found[1] if found else None


def set_aside(staged: Path, rid: str) -> Path | None:
    """Move a refused run's work folder out of the stage's ``.work`` into its ``.refused`` (a folder per refusal),
    so that the next call on this machine neither resumes it nor packs it; returns where it went, or None when it
    could not (the other runs' outcomes still need their report)."""
    aside = staged / ".refused" / f"{rid}-{time.strftime('%Y%m%dT%H%M%S')}"
    try:
        aside.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged / ".work" / rid, aside)
    except OSError:
        return None
    return aside


def set_aside_command(records: Path, rid: str) -> str:
    """The command that moves a refused run's work folder out of the repository's ``records/.work`` (so that no
    call carries, stages or resumes it) into ``records/.refused`` (git-ignored), where it stays for a look."""
    aside = records / ".refused"
    return f"mkdir -p {shlex.quote(str(aside))} && mv {shlex.quote(str(records / '.work' / rid))} " \
           f"{shlex.quote(str(aside))}/"


def run_time_limit(left_s: float) -> str | None:
    """The ``--time-limit`` of a run started with ``left_s`` seconds of ``--time`` left, less its start-up
    (:data:`STARTUP_S`), so that it stops by the end of ``--time``; None (do not start it) under a minute."""
    limit = int(left_s - STARTUP_S)
    return None if left_s < MIN_START_S or limit < 1 else f"{limit}s"


def asked_setting(command: list[str]) -> tuple:
    """What a ``harness run`` command asks for, its seed and output flags apart: domain, method, dataset, loss,
    preset and the sorted ``--set`` items. It reads a record's command (``RunRecord.command``) and a plan setting's
    (:meth:`Setting.run_args`) alike."""
    options: dict[str, str] = {}
    sets = []
    for flag, value in zip(command, command[1:]):
        if flag == "--set":
            sets.append(value)
        elif flag.startswith("--"):
            options[flag] = value
    return (*(options.get(f"--{name}", "") for name in ("domain", "method", "dataset", "loss", "preset")),
            tuple(sorted(sets)))


def never_completed(settings: list[Setting], records: Path) -> list[Setting]:
    """The settings that no completed record of ``records`` ran, under any code: their first run is the first to
    go through training and evaluation on that setting."""
    done = {asked_setting(record.command) for path in records.glob("*.json")
            if (record := read_record(path)) is not None and record.status == "completed"}
    return [s for s in settings if asked_setting(s.run_args(s.seeds[0])) not in done]


def first_alone_notes(runs: list[tuple[Setting, int]], jobs: int, records: Path) -> list[str]:
    """A note for each never-completed setting whose seeds would start side by side: session 32 lost three runs
    of 8 minutes each, side by side, to one failure of a preset's evaluation."""
    seeds = by_setting(runs)
    fresh = never_completed([s for s, chosen in seeds.items() if len(chosen) > 1], records) if jobs > 1 else []
    return [f"note: no completed record of {s.label(seeds[s][0]).rsplit(' seed ', 1)[0]} in {records}: its "
            f"{len(seeds[s])} seeds would meet any failure of the setting together; run seed {seeds[s][0]} alone "
            f"first (--seeds {seeds[s][0]} --jobs 1)" for s in fresh]


def estimate_lines(runs: list[tuple[Setting, int]], jobs: int) -> tuple[float, float, str]:
    costs = [s.cost_s for s, _ in runs]
    serial, least = sum(costs), schedule(costs, jobs)
    return serial, least, (f"estimated device time (an estimate from the plan's costs): {serial:.0f} s "
                           f"({serial / 60:.1f} min) if the runs keep the GPU busy and their times add up; at least "
                           f"{least:.0f} s ({least / 60:.1f} min) with {jobs} jobs overlapping perfectly")


def run(args: argparse.Namespace) -> int:
    the_plan = load_plan(plan_path(args.plan))
    runs = the_plan.runs(args.only, parse_seeds(args.seeds) if args.seeds else None)
    time_s = parse_duration(args.time, "--time")
    # None: one of several calls, each resuming the last
    budget = parse_duration(args.budget, "--budget") if args.budget else None
    repo_records = Path(args.repo) / the_plan.records
    staged = Path(args.stage) / the_plan.records
    serial, least, summary = estimate_lines(runs, args.jobs)
    commands = [(f"{s.label(seed)} [line {s.line}, estimate {s.cost_s:.0f} s]",
                 harness_run(s, seed, args.device, staged)) for s, seed in runs]
    if args.dry_run:
        print(f"# {the_plan.path}: {len(runs)} runs, records into {staged}, then `campaign pack` from {args.stage}")
        for (label, command) in commands:
            print(shlex.join(command), " # ", label)
        print(summary)
    if budget is not None and least > budget:
        raise UserError(f"the plan cannot fit: at least {least:.0f} s with {args.jobs} jobs, over the "
                        f"{budget:.0f} s given (--budget); run part of it (--only) or give it more time")
    for note in first_alone_notes(runs, args.jobs, repo_records):
        print(note, flush=True)
    if serial > time_s:
        print(f"note: the runs may not all finish in --time {args.time}: those still going then stop at a "
              "checkpoint (exit 75); the same command again resumes them", flush=True)
    if args.dry_run:
        refused, notes = unresumable(runs, repo_records)
        for note in notes:
            print(note, flush=True)
        for line in refused:
            print(line, file=sys.stderr, flush=True)
        return 2 if refused else 0
    staged.mkdir(parents=True, exist_ok=True)
    print(f"staged {seed_stage(repo_records, staged)} records and checkpoints of {repo_records} in {staged}")
    print(summary, flush=True)
    deadline = time.monotonic() + time_s
    resumed: set[int] = set()
    refused: dict[int, str] = {}  # the run's index: the line that says how to clear it

    def prepare(index: int, command: list[str]) -> list[str] | None:
        limit = run_time_limit(deadline - time.monotonic())
        if limit is None:
            return None
        setting, seed = runs[index]
        if waiting_checkpoints(staged, setting, seed):
            resumed.add(index)
        return [*command, "--time-limit", limit, *(["--resume"] if index in resumed else [])]

    def finished(index: int, code: int, output: str) -> None:
        # 2: harness run's exit status for bad input, a refused --resume among it
        if code == 2 and index in resumed and (rid := refused_run(output)):
            aside = set_aside(staged, rid)
            # The repository here is a copy of the one the call came from: a checkpoint in it was carried, and
            # every call that carries it again stages it again.
            refused[index] = f"in the repository the call came from: {set_aside_command(repo_records, rid)}" \
                if (repo_records / ".work" / rid).exists() else f"it was set aside in {aside}" if aside else \
                f"on this machine: {set_aside_command(staged, rid)}"

    try:
        codes = run_all(commands, args.jobs, args.threads, prepare, kill_at=deadline + GRACE_S, finished=finished)
    except Interrupted as stop:  # Ctrl-C or SIGTERM: the runs stopped at their checkpoints; the log says so
        with open(Path(args.stage) / CAMPAIGN_LOG, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} campaign: {stop}\n")
        print(f"campaign: {stop}; the same command again resumes them", file=sys.stderr, flush=True)
        return stop.code
    return report(commands, codes, refused, Path(args.stage) / CAMPAIGN_LOG)


def report(commands: list[tuple[str, list[str]]], codes: list[int | None], refused: dict[int, str],
           log: Path) -> int:
    """Count the outcomes, say how to clear each refused ``--resume``, append both to the campaign log (it travels
    in the tarball), and the exit status."""
    counts = {"completed": codes.count(0), "not finished yet (exit 75)": codes.count(EXIT_STOPPED),
              "not started": codes.count(None),
              "failed": sum(c not in (0, EXIT_STOPPED, None) for c in codes) - len(refused),
              "refused to resume": len(refused)}
    line = ", ".join(f"{n} {what}" for what, n in counts.items())
    # Each call refuses the same checkpoint again: these lines say so, and what ends it.
    clear = [f"refused to resume: {commands[index][0]}: each call refuses its checkpoint again until its work "
             f"folder is set aside ({how}); the same command then starts it over" for index, how in refused.items()]
    print("\n".join([f"campaign: {line}", *clear]), flush=True)
    with open(log, "a") as fh:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        for index, ((label, _), code) in enumerate(zip(commands, codes)):
            what = "not started" if code is None else "refused to resume" if index in refused else f"exit {code}"
            fh.write(f"{stamp} {what}: {label}\n")
        fh.writelines(f"{stamp} {text}\n" for text in [f"campaign: {line}", *clear])
    if 2 in codes:
        return 2
    if counts["failed"]:
        return 1
    return EXIT_STOPPED if counts["not finished yet (exit 75)"] or counts["not started"] else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run a plan's settings (or print them: --dry-run)")
    r.add_argument("plan", help=f"a plan under {PLANS} (its name) or a plan file")
    r.add_argument("--only", action="append", default=[],
                   help="run only the settings whose plan line holds these whole words, e.g. rho=0.99 (not 0.997) or "
                        "'dcl 100k' (repeatable: any of them)")
    r.add_argument("--seeds", help="run only these seeds of each setting, e.g. 0 or 1-2 (default: the plan's)")
    r.add_argument("--device", default="cuda", help="harness run --device (default: cuda)")
    r.add_argument("--jobs", type=int, default=4, help="runs at a time (default: 4)")
    r.add_argument("--threads", type=int, default=0, help="threads per run (default: the CPUs over --jobs)")
    r.add_argument("--time", default="7m", help="wall time the runs of this command may take (default: 7m)")
    r.add_argument("--budget", help="device time the plan may use over all its calls: a plan that cannot fit in "
                   "it is refused (default: no limit; a plan longer than --time goes on in the next call)")
    r.add_argument("--stage", default=STAGE, help=f"staging folder, outside the working tree (default: {STAGE})")
    r.add_argument("--repo", default=".", help="the repository whose records are copied in first (default: .)")
    r.add_argument("--dry-run", action="store_true",
                   help="print the commands and the estimate, and read the checkpoints a call would carry (exit 2 on "
                        "one --resume would refuse); run nothing")
    k = sub.add_parser("pack", help="pack the new records, logs, bench files (and checkpoints) into one tarball")
    k.add_argument("--out", required=True, help="folder of the tarball (on the GPU machine: $OUT)")
    k.add_argument("--stage", default=STAGE, help=f"the campaign's staging folder (default: {STAGE})")
    k.add_argument("--repo", default=".", help="the repository the records are new to (default: .)")
    k.add_argument("--checkpoints", action="store_true", help="also the checkpoints of unfinished runs")
    k.add_argument("--max-mib", type=float, default=16.0, help="the tarball's largest size (default: 16)")
    u = sub.add_parser("unpack", help="write a tarball's records, logs, bench files and checkpoints into the repo")
    u.add_argument("tarball")
    u.add_argument("--repo", default=".", help="the repository (default: .)")
    u.add_argument("--side", help="folder for failed runs' records, unfinished runs' logs and the campaign log "
                                  "(default: a fresh temporary folder)")
    t = sub.add_parser("travel", help="before the first call: whether each packed part fits one call's 64 MiB")
    t.add_argument("--repo", default=".", help="the repository the calls send (default: .)")
    t.add_argument("--carry", action="append", default=[],
                   help="a path every call also carries, e.g. leaderboards/results/.work (repeatable)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.verb == "run":
            if args.jobs < 1 or args.threads < 0:
                raise UserError("--jobs must be at least 1 and --threads at least 0")
            args.threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
            return run(args)
        if args.verb == "travel":
            return travel(Path(args.repo), args.carry)
        if args.verb == "pack":
            pack(Path(args.stage), Path(args.out), Path(args.repo), args.checkpoints, args.max_mib)
        else:
            unpack(Path(args.tarball), Path(args.repo), Path(args.side) if args.side else None)
        return 0
    except UserError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(own_command(main))
