"""``harness list [domains|datasets|losses|presets|options|code]``: what exists, one line each.

A domain whose extra is not installed (or which fails to import) is shown as unavailable, never a crash. The
options are each domain's config fields, for ``--set KEY=VALUE``: default, range or choices (the config's pydantic
constraints), and the comment the config's source gives the field. The code is the source digest this code's runs
record, which ``harness compare`` takes to name their records.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
from typing import Any

import losses
from domains import PACKAGES, available, get, loss_provider, provider
from domains.base import RUNTIME, Domain
from harness.tables import pairs
from harness.version import source_digest


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


def option_lines(loaded: list[Domain]) -> list[str]:
    """One line per config field of each domain: ``domain.name``, its default, its range or choices, what the
    config's source says of it, and whether it is a runtime field (how the run goes, not part of its identity)."""
    import pydantic

    rows = []
    for d in loaded:
        schema = pydantic.TypeAdapter(d.config_class).json_schema()["properties"]
        comments = field_comments(d.config_class)
        for f in dataclasses.fields(d.config_class):
            runtime = " [runtime: not part of the run's identity]" if f.metadata.get(RUNTIME) else ""
            text = f"= {schema[f.name].get('default')!r} {_constraint(schema[f.name])}".rstrip()
            rows.append((f"{d.name}.{f.name}", f"{text}{'; ' + comments[f.name] if comments.get(f.name) else ''}"
                         f"{runtime}"))
    return pairs(rows)


def _constraint(prop: dict[str, Any]) -> str:
    """A field's type and range, or its choices, from its JSON schema: ``(integer >= 2)``, ``(one of a, b)``."""
    options = prop.get("anyOf", [prop])
    parts = []
    for option in options:
        if "enum" in option:
            parts.append("one of " + ", ".join(map(str, option["enum"])))
            continue
        bounds = [f"{sign} {option[key]}" for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"),
                                                             ("maximum", "<="), ("exclusiveMaximum", "<"))
                  if key in option]
        parts.append(" ".join([option.get("type", "any"), *bounds]) if bounds else option.get("type", "any"))
    return f"({' or '.join(parts)})"


SECTION_WORDS = 6  # a comment line this short alone above a field heads a section of the config


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: the comment lines right above it and the ones ending its
    statement's lines (the configs document their fields so); a field without any is left out."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    statements: dict[int, int] = {}  # first line -> last line of each statement
    first = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type == tokenize.NEWLINE and first is not None:
            statements[first], first = token.start[0], None
        elif token.type not in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER) and first is None:
            first = token.start[0]
    code = {n for start, end in statements.items() for n in range(start, end + 1)}
    names = {f.name for f in dataclasses.fields(cls)}
    lines = source.splitlines()
    docs = {}
    for start, end in statements.items():
        match = re.match(r"\s+(\w+)\s*:", lines[start - 1])
        if match is None or match.group(1) not in names:
            continue
        above, n = [], start - 1
        while n in comments and n not in code:
            above.insert(0, comments[n])
            n -= 1
        above = [c for c in above if not re.fullmatch(r"-{3,}.*-{3,}", c)]  # "# --- corpus ---": a heading
        if len(above) == 1 and len(above[0].split()) <= SECTION_WORDS:
            above = []  # a section's heading ("# Pretraining", "# SAC."), not this field's comment
        ending = [comments[n] for n in range(start, end + 1) if n in comments]
        text = "; ".join(part for part in (" ".join(above), *ending) if part)
        if text:
            docs[match.group(1)] = text
    return docs


def loss_lines(loaded: list[Domain]) -> list[str]:
    """The core losses that train (the registry's objectives), with hyper-parameters (default and range), the
    domains accepting them and the paper each follows."""
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
        paper = f"; paper: {spec.paper}" if spec.paper else ""
        rows.append((name, f"{spec.summary}{labels}; {hparams}; domains: {where}{paper}"))
    return pairs(rows)


def code_lines(loaded: list[Domain]) -> list[str]:
    """The source digest (:func:`harness.version.source_digest`) that runs of this code record, which ``harness
    compare --candidate FOLDER@<its first digits>`` takes to name their records: the built-in code's, and, since a
    plugin's code is part of its runs' digest, each plugin domain's with the built-in losses, each plugin loss's on
    the built-in domains, and each plugin domain's with each plugin loss of another module that it accepts. A data
    set that runs the user's own code (rl's ``gym:MODULE:ID``) adds that code, so the built-in row says it holds
    only on the others."""
    def plugged(module: str) -> bool:
        return module.split(".")[0] not in PACKAGES

    own_domains = [d.name for d in loaded if plugged(provider(d.name))]
    own_losses = [name for name in losses.available() if plugged(loss_provider(name))]
    rows = [("built-in", f"{source_digest()} (the built-in domains and losses, on a data set that runs none of "
                         "your own code)")]
    rows += [(f"domain {name}", f"{source_digest(name)} (with a built-in loss; plugin {provider(name)})")
             for name in own_domains]
    rows += [(f"loss {name}", f"{source_digest(loss=name)} (on a built-in domain; plugin {loss_provider(name)})")
             for name in own_losses]
    rows += [(f"domain {d.name}, loss {name}", source_digest(d.name, name)) for d in loaded if d.name in own_domains
             for name in own_losses if name in d.losses and loss_provider(name) != provider(d.name)]
    return pairs(rows)


def cmd_list(what: str | None) -> int:
    loaded, broken = _load_domains()
    sections = {
        "domains": lambda: domain_lines(loaded, broken),
        "datasets": lambda: dataset_lines(loaded),
        "losses": lambda: loss_lines(loaded),
        "presets": lambda: preset_lines(loaded),
        "options": lambda: option_lines(loaded),
        "code": lambda: code_lines(loaded),
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
