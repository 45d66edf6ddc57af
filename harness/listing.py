"""``harness list [domains|datasets|losses|presets]``: what exists, one line each.

A domain whose extra is not installed (or which fails to import) is shown as unavailable, never a crash.
"""

from __future__ import annotations

import os
import sys

import losses
from domains import available, get
from domains.base import Domain
from harness.tables import pairs


def _load_domains() -> tuple[list[Domain], dict[str, str]]:
    loaded, broken = [], {}
    for name in available():
        try:
            loaded.append(get(name))
        except Exception as exc:  # noqa: BLE001 - a missing extra or a broken plugin must not break listing
            broken[name] = " ".join(str(exc).split())
    return loaded, broken


def domain_lines(loaded: list[Domain], broken: dict[str, str]) -> list[str]:
    rows = [(d.name, f"{d.description} (methods: {', '.join(d.methods)}; primary metric: {d.primary_metric}, "
             f"{'higher' if d.higher_is_better else 'lower'} is better; baseline: {_baselines(d)})") for d in loaded]
    rows += [(name, f"unavailable: {why}") for name, why in broken.items()]
    return pairs(sorted(rows))


def _baselines(domain: Domain) -> str:
    own = "".join(f"; {m}: {loss}" for m, loss in sorted(domain.method_baselines.items()))
    return domain.baseline_loss + own


def dataset_lines(loaded: list[Domain]) -> list[str]:
    """One line per named data set: ``[download]`` for a set the harness downloads when it is missing (where the
    domain's config allows it), ``[no download]`` for one it generates, that ships with a package or that must be
    put under the data root (its description says where), ``[default, embedded]`` for the domain's default."""
    rows = []
    for d in loaded:
        for name, ds in d.datasets.items():
            tag = ("default, embedded" if name == d.default_dataset else
                   ("download" if ds.needs_download else "no download"))
            rows.append((f"{d.name}/{name}", f"{ds.description} [{tag}]"))
    return pairs(rows)


def preset_lines(loaded: list[Domain]) -> list[str]:
    rows = []
    for d in loaded:
        for name, preset in d.presets.items():
            overrides = ", ".join(f"{k}={v}" for k, v in preset.overrides.items()) or "config defaults"
            seeds = ",".join(map(str, preset.seeds))
            rows.append((f"{d.name}/{name}", f"{preset.description} ({overrides}; seeds {seeds})"))
    return pairs(rows)


def loss_lines(loaded: list[Domain]) -> list[str]:
    """The core losses that train (the registry's objectives), with hyper-parameters (default and range) and the
    domains accepting them."""
    accepted: dict[str, list[str]] = {}
    for d in loaded:
        for loss in d.losses:
            accepted.setdefault(loss, []).append(d.name)
    rows = []
    for name in losses.available():
        spec = losses.spec(name)
        hparams = ", ".join(f"{h.name}={h.default} {h.describe()}" for h in spec.hparams) or "no hyper-parameters"
        labels = " [needs labels]" if spec.needs_labels else ""
        where = ", ".join(accepted.get(name, [])) or "none"
        rows.append((name, f"{spec.summary}{labels}; {hparams}; domains: {where}"))
    return pairs(rows)


def cmd_list(what: str | None) -> int:
    loaded, broken = _load_domains()
    sections = {
        "domains": lambda: domain_lines(loaded, broken),
        "datasets": lambda: dataset_lines(loaded),
        "losses": lambda: loss_lines(loaded),
        "presets": lambda: preset_lines(loaded),
    }
    try:
        for name in [what] if what else list(sections):
            if not what:
                print(f"{name}:")
            for line in sections[name]():
                print(f"  {line}" if not what else line)
        sys.stdout.flush()
    except BrokenPipeError:  # `harness list losses | head` read what it wanted and closed the pipe: no traceback
        _silence_stdout()
    return 0


def _silence_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's last flush at exit does not fail again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
