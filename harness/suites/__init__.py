"""Suites: fixed lists of settings that a CI runs and gates with ``harness compare`` (``python -m harness.suites``,
``tools/regression-suite``).

A suite file (``harness/suites/<name>.txt``) has one setting per line, seven columns separated by spaces:
``domain method dataset loss preset seeds tolerance``, then any ``key=value`` overrides (``harness run --set``);
``#`` starts a comment. The tolerance is the drop, in the setting's metric units, that ``harness compare`` gates it
on (``--tolerance domain/dataset=VALUE``). Each setting becomes one ``harness run`` per seed, so that a pool of
parallel jobs can spread the seeds of the slowest setting over every worker. A campaign plan
(:mod:`harness.suites.campaign`) is not gated: its seventh column is the estimated device seconds of one seed
(``load_suite(..., costed=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import domains
from domains.errors import UserError
from harness.run import runner
from harness.run.config import parse_assignments, parse_seeds, tolerance_value

SUITES = Path(__file__).resolve().parent
COLUMNS = ("domain", "method", "dataset", "loss", "preset", "seeds")


@dataclass(frozen=True)
class Setting:
    """One line of a suite: what ``harness run`` is given, and the seeds it runs."""

    domain: str
    method: str
    dataset: str
    loss: str
    preset: str
    seeds: tuple[int, ...]
    sets: tuple[str, ...] = ()  # key=value overrides, as harness run --set takes them
    cost_s: float | None = None  # a plan's estimate: device seconds of one seed (None in a suite)
    tolerance: float | None = None  # a suite's gate tolerance in metric units (None in a plan)
    line: int = 0  # where the setting is in its file, for the messages

    def run_args(self, seed: int) -> list[str]:
        """The arguments of ``harness run`` for one seed (results folder, device and output flags apart)."""
        args = ["--domain", self.domain, "--method", self.method, "--dataset", self.dataset, "--loss", self.loss,
                "--preset", self.preset, "--seeds", str(seed)]
        for item in self.sets:
            args += ["--set", item]
        return args

    def request(self, seeds: list[int]) -> runner.RunRequest:
        """The ``harness run`` request of these seeds (the data root as harness run finds it)."""
        return runner.RunRequest(domain=self.domain, loss=self.loss, method=self.method, dataset=self.dataset,
                                 seeds=seeds, preset=self.preset, sets=parse_assignments(list(self.sets)))

    def label(self, seed: int) -> str:
        """One line that names the run: its columns, its overrides and the seed."""
        return " ".join([self.domain, self.method, self.dataset, self.loss, self.preset, *self.sets, f"seed {seed}"])


def named_file(name: str, folder: Path, kind: str) -> Path:
    """A ``kind`` ("suite", "plan") file: a bare name under ``folder`` (``.txt`` added) or a path to a file."""
    bare = Path(name).name == name and not Path(name).suffix
    path = folder / f"{name}.txt" if bare else Path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.txt")))
        raise UserError(f"no {kind} file '{path}' ({kind}s under {folder}: {known})")
    return path


def suite_path(name: str) -> Path:
    """A suite's file: a name under ``harness/suites/`` (``regression``) or a path to a file."""
    return named_file(name, SUITES, "suite")


def load_suite(path: Path, costed: bool = False) -> list[Setting]:
    """The settings of a suite file (``costed``: of a plan, with its cost column), each checked against its domain
    (:func:`check`); UserError naming the file and line for a malformed or invalid one, or for a file without
    settings."""
    columns = (*COLUMNS, "cost") if costed else (*COLUMNS, "tolerance")
    settings = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path}:{number}"
        if len(fields) < len(columns):
            raise UserError(f"{where}: expected {len(columns)} columns ({' '.join(columns)}) and then any "
                            f"key=value overrides, got {len(fields)} columns")
        try:
            sets = fields[len(columns):]
            parse_assignments(sets)
            setting = Setting(*fields[:5], seeds=tuple(parse_seeds(fields[5])), sets=tuple(sets),
                              cost_s=parse_cost(fields[6]) if costed else None,
                              tolerance=None if costed else parse_tolerance(fields[6]), line=number)
            check(setting)
        except UserError as exc:
            raise UserError(f"{where}: {' '.join(str(exc).split())}") from None
        settings.append(setting)
    if not settings:
        raise UserError(f"{path} lists no setting")
    return settings


def parse_cost(text: str) -> float:
    """A plan's cost column: seconds, a positive number."""
    try:
        cost = float(text)
    except ValueError:
        cost = float("nan")
    if not cost > 0 or cost == float("inf"):
        raise UserError(f"the cost '{text}' is not a positive number of seconds")
    return cost


def parse_tolerance(text: str) -> float:
    """A suite's tolerance column: a finite number >= 0, in the setting's metric units (as compare takes it)."""
    tolerance = tolerance_value(text)
    if tolerance is None:
        raise UserError(f"the tolerance '{text}' is not a finite number >= 0 (the setting's metric units)")
    return tolerance


def check(setting: Setting) -> None:
    """UserError unless the domain has the method, the dataset and the preset, the method takes the loss and the
    overrides resolve. Nothing is loaded: a missing extra or data set shows when the run starts."""
    domain = domains.get(setting.domain)
    for what, name, known in (("method", setting.method, domain.methods), ("dataset", setting.dataset, domain.datasets),
                              ("preset", setting.preset, domain.presets)):
        if name not in known:
            raise UserError(f"domain '{setting.domain}' has no {what} '{name}'; available: {', '.join(known)}")
    accepted = domain.accepted_losses(setting.method)
    if setting.loss not in accepted:
        raise UserError(f"method '{setting.method}' of domain '{setting.domain}' takes the losses "
                        f"{', '.join(accepted)}, not '{setting.loss}'")
    # the overrides, resolved as harness run resolves them (their names, values and the domain's own rules)
    runner.plan(setting.request(list(setting.seeds)))
