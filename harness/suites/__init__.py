"""Suites: fixed lists of settings that a CI runs and gates with ``harness compare`` (``python -m harness.suites``,
``tools/regression-suite``).

A suite file (``harness/suites/<name>.txt``) has one setting per line, six columns separated by spaces:
``domain method dataset loss preset seeds``; ``#`` starts a comment. Each setting becomes one ``harness run`` per
seed, so that a pool of parallel jobs can spread the seeds of the slowest setting over every worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import domains
from domains.base import UserError
from harness.config import parse_seeds

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

    def run_args(self, seed: int) -> list[str]:
        """The arguments of ``harness run`` for one seed (results folder, device and output flags apart)."""
        return ["--domain", self.domain, "--method", self.method, "--dataset", self.dataset, "--loss", self.loss,
                "--preset", self.preset, "--seeds", str(seed)]


def suite_path(name: str) -> Path:
    """A suite's file: a name under ``harness/suites/`` (``regression``) or a path to a file."""
    bare = Path(name).name == name and not Path(name).suffix
    path = SUITES / f"{name}.txt" if bare else Path(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SUITES.glob("*.txt")))
        raise UserError(f"no suite file '{path}' (suites under {SUITES}: {known})")
    return path


def load_suite(path: Path) -> list[Setting]:
    """The settings of a suite file, each checked against its domain (:func:`check`); UserError naming the file
    and line for a malformed or invalid one, or for a file without settings."""
    settings = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        where = f"{path}:{number}"
        if len(fields) != len(COLUMNS):
            raise UserError(f"{where}: expected {len(COLUMNS)} columns ({' '.join(COLUMNS)}), got {len(fields)}")
        try:
            setting = Setting(*fields[:5], seeds=tuple(parse_seeds(fields[5])))
            check(setting)
        except UserError as exc:
            raise UserError(f"{where}: {exc}") from None
        settings.append(setting)
    if not settings:
        raise UserError(f"{path} lists no setting")
    return settings


def check(setting: Setting) -> None:
    """UserError unless the domain has the method, the dataset and the preset, and the method takes the loss.
    Only names are checked: a missing extra or data set shows when the run starts."""
    domain = domains.get(setting.domain)
    for what, name, known in (("method", setting.method, domain.methods), ("dataset", setting.dataset, domain.datasets),
                              ("preset", setting.preset, domain.presets)):
        if name not in known:
            raise UserError(f"domain '{setting.domain}' has no {what} '{name}'; available: {', '.join(known)}")
    accepted = domain.accepted_losses(setting.method)
    if setting.loss not in accepted:
        raise UserError(f"method '{setting.method}' of domain '{setting.domain}' takes the losses "
                        f"{', '.join(accepted)}, not '{setting.loss}'")
