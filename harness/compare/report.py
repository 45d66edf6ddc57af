"""The markdown report of ``harness compare``: the rule, a table per verdict, and what else the reader must know
(notes, among them the machines a group's seeds ran on, config and data differences, groups an older code stands
for). Each row is a :class:`Row`, which ``harness.compare.judge`` fills in; the verdict line and the exit status are
the gate's."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field

from domains.errors import UserError
from domains.files import hash_jsonable
from harness import stats
from harness.compare.sides import Side, seeds_text
from harness.groups import Group, group_name
from harness.numbers import decimals, fmt
from harness.pages.tables import NONE, device_label, latest_by_seed
from harness.tables import bullet, code, escape, markdown

# The first text of every report compare writes (:func:`report`, :func:`error_report`): ``--out`` replaces only a
# file that starts with it, never a record or a user's file.
HEAD = "# Comparison: baseline "
# How the verdict line's summary names a verdict where its key would mislead (see TITLES).
SUMMARY_NAMES = {"unchanged": "within tolerance"}

VERDICTS = ("regression", "missing", "unjudged", "untestable", "improvement", "unchanged", "untested")


@dataclass
class Row:
    """One matched (or unmatched) group and its verdict."""

    base: Group | None
    cand: Group | None
    verdict: str
    change: stats.Change | None = None
    p_adjusted: float = math.nan
    problems: list[str] = field(default_factory=list)  # why a group is missing
    unjudged: str = ""  # why the baseline has nothing to compare with (its every seed failed or diverged)
    seen: str = ""  # the verdict on the seeds the candidate has (a missing group's too: it may hide a drop)
    notes: list[str] = field(default_factory=list)  # what else the reader must know of this row
    matched: bool = False  # the candidate has the group, completed or only failed
    own: bool = False  # the candidate holds the group only as the baseline's own records
    unseen: bool = False  # and a code those records shadow ran it, a result not judged: never waived
    ran_and_failed: bool = False  # the candidate's code ran a seed of it and failed or diverged: never waived
    config_diff: list[str] = field(default_factory=list)
    tolerance: float = math.nan  # this group's, in metric units
    detectable: float = math.nan  # the smallest change its test could have called significant (stats.detectable)


COLUMNS = [
    "domain",
    "dataset",
    "method",
    "loss",
    "hyper-parameters",
    "setting",
    "metric",
    "baseline (n)",
    "candidate (n)",
    "change [95% CI]",
    "effect",
    "test",
    "p (corrected)",
    "min p",
    "detectable",
    "tolerance",
]


def _row(row: Row, alpha: float) -> list[str]:
    g, c, ch = row.base, row.cand, row.change
    digits = decimals(g.mean) if g.values else 2
    base = f"{fmt(g.mean, digits)} ({g.n})" if g.values else "– (0)"
    cand = f"{fmt(c.mean, digits)} ({c.n})" if c is not None and c.values else "– (0)"
    if ch is None:
        tail = ["–", "–", "–", "–", "–", "–"]
    else:
        interval = "" if math.isnan(ch.low) else f" [{ch.low:+.{digits}f}, {ch.high:+.{digits}f}]"
        effect = "–" if math.isnan(ch.effect) else f"{ch.effect:+.2f}"
        pairs = f", {ch.n_pairs} pairs" if ch.n_pairs else ""
        detectable = "–" if math.isnan(row.detectable) else f"±{row.detectable:.{digits}f}"
        change = "–" if math.isnan(ch.change) else f"{ch.change:+.{digits}f}{interval}"  # a paired test on no pair
        tail = [change, effect, ch.test + pairs, f"{stats.p_text(ch.p, alpha)} ({stats.p_text(row.p_adjusted, alpha)})",
                stats.p_text(ch.min_p, alpha), detectable]
    return [
        g.domain,
        g.dataset,
        g.method,
        g.loss,
        g.hparams_label(),
        g.setting_label(),
        f"{g.primary_metric} ({'↑' if g.higher_is_better else '↓'})",
        base,
        cand,
        *tail,
        f"{row.tolerance:g}",
    ]


TITLES = {
    "regression": "Regressions",
    "missing": "Missing, failed or non-finite in the candidate",
    "unjudged": "Unjudged: the baseline failed or diverged on every seed, so nothing judged the candidate",
    "untestable": "Untestable: drops worse than the tolerance that the test did not confirm",
    "improvement": "Improvements",
    # Not "unchanged": a drop of 98.8 within a tolerance of 100 is no unchanged group.
    "unchanged": "Within tolerance",
    "untested": "Untested (the test cannot decide at these seeds; within the tolerance)",
}


def report(args: argparse.Namespace, base: Side, cand: Side, rows: list[Row]) -> str:
    level = f"alpha / groups = {args.alpha:g} / n" if args.correction != "none" else f"alpha = {args.alpha:g}"
    lines = [
        f"{HEAD}{code(base.label)} vs candidate {code(cand.label)}",
        "",
        *_sides(base, cand),
        f"Rule: per group, the change of the mean primary metric (candidate − baseline; ↑ higher is better, ↓ lower) "
        f"is tested with {stats.TESTS[args.test]}, two-sided, and the p-values of the groups are corrected together "
        f"with {stats.CORRECTIONS[args.correction]}. A group **regressed** when its corrected p < {args.alpha:g} and "
        f"the change is worse than its tolerance ({args.tolerances.describe()}, in metric units); an "
        "**improvement** likewise in the better direction. A change worse than the tolerance that the test did not "
        f"confirm is **untestable**: the test cannot reach significance at its seeds (minimum p ≥ {level}), or the "
        "seeds' spread left it short of significance; the gate never passes it as unchanged. Within the tolerance (or "
        "better) a group is listed **within tolerance**, or **untested** where its test cannot decide. A "
        "baseline group absent from the candidate, failed, non-finite or short of seeds, run only by an older code "
        "of the candidate, or held by it only as the baseline's own records, is **missing**. A baseline group that "
        "failed or diverged on every seed is **unjudged** where the candidate ran it: nothing judged the candidate, "
        "so the gate cannot decide. Groups are "
        "matched on domain, dataset, method, loss, hyper-parameters, preset, overrides and primary metric; each side "
        "uses per group the records of its newest code. Change: mean difference (paired: mean of the per-seed "
        "differences) with its 95% t interval; effect: standardised (paired d_z, else Cohen's d); detectable: the "
        f"smallest change the t-test could have called significant at {level} with the group's seeds and spread "
        "(honest noise can show drops beyond a tolerance well below it).",
        "",
    ]
    for verdict in VERDICTS:
        chosen = [r for r in rows if r.verdict == verdict]
        lines += [f"## {TITLES[verdict]} ({len(chosen)})", ""]
        lines += [*markdown(COLUMNS, [_row(row, args.alpha) for row in chosen]), ""] if chosen else ["none", ""]
        if verdict in ("missing", "unjudged") and chosen:
            lines += [
                _bullet(
                    group_name(r.base),
                    (f"{r.unjudged}; the candidate: " if r.unjudged and r.problems else r.unjudged)
                    + "; ".join(r.problems)
                    + (
                        "; the seeds it has show a drop worse than the tolerance that the test did not confirm"
                        if r.seen == "untestable"
                        else ""
                    ),
                )
                for r in chosen
            ] + [""]
    added = [r.cand for r in rows if r.verdict == "added"]
    lines += [f"## Added in the candidate, not in the baseline ({len(added)})", ""]
    lines += (
        [
            *markdown(
                ["domain", "dataset", "method", "loss", "hyper-parameters", "setting"],
                [[g.domain, g.dataset, g.method, g.loss, g.hparams_label(), g.setting_label()] for g in added],
            ),
            "",
        ]
        if added
        else ["none", ""]
    )
    broke = [r for r in rows if r.verdict == "added" and r.problems]
    if broke:  # not gated (no baseline), but a crash must not read as a new result
        lines += [_bullet(group_name(r.cand), f"{'; '.join(r.problems)} (no baseline: not gated)") for r in broke]
        lines += [""]
    lines += _details(rows)
    return "\n".join(lines)


def _sides(base: Side, cand: Side) -> list[str]:
    """Per side: how many records it read, the code(s) it judged, and what it left out (records of other codes, of
    subfolders): a folder's newest code per group may not be the code the reader meant."""
    lines = ["## Sides", ""]
    for role, side in (("baseline", base), ("candidate", cand)):
        named = f", {len(side.records)} of them of its NAME" if len(side.records) != side.read else ""
        lines.append(_bullet(role, f"read {side.read} record(s) from '{side.folder}'{named}; judged code(s): "
                                   f"{'; '.join(side.judged_codes())}"))
        lines += [_bullet(f"{role}, warning", w) for w in side.warnings()]
    return [*lines, ""]


def _bullet(name: str, text: str) -> str:
    """A bullet on a group: what records name is free text, escaped (:func:`harness.tables.escape`), and the
    bullet one line (:func:`harness.tables.bullet`): a record's name must not forge a verdict line or a link."""
    return bullet(f"{escape(name)}: {escape(text)}")


# What a seed must share besides its device's kind (:func:`device_label`) to rerun bit for bit (harness.machine).
LIBRARIES = ("cpu", "cpu_capability", "torch_threads", "torch", "cuda")


def _seeds_by(kinds: dict[int, str]) -> str:
    """Seeds grouped by their value, in seed order: "CPU (seed(s) 0,1,2) and H200 (seed(s) 3,4)"."""
    seeds: dict[str, list[int]] = {}
    for seed, kind in sorted(kinds.items()):
        seeds.setdefault(kind, []).append(seed)
    return " and ".join(f"{kind} (seed(s) {seeds_text(s)})" for kind, s in seeds.items())


def _differences(values: list[dict[int, str]], paired: bool, name: str, prefix: str = "") -> list[str]:
    """How one field of the machines a group's seeds ran on differs (``values``: per side, seed -> the field's
    value; ``name`` names the field in a note, "devices" or "torch"; ``prefix`` goes before a side's values): a
    side's seeds on more than one value (which seeds ran where); for a paired test, paired seeds (seed s of the
    baseline against seed s of the candidate) on different values; unpaired, sides on different values. Seeds
    without the value are left out here."""
    notes = [f"the {role}'s seeds ran on {prefix}{_seeds_by(side)}"
             for role, side in zip(("baseline", "candidate"), values) if len(set(side.values())) > 1]
    if paired:
        crossed = {s: f"{values[0][s]} → {values[1][s]}" for s in values[0].keys() & values[1].keys()
                   if values[0][s] != values[1][s]}
        if crossed:
            notes.append(f"paired seeds ran on different {name}: {_seeds_by(crossed)}")
    else:
        base, cand = (sorted(set(side.values())) for side in values)
        if base and cand and base != cand:
            notes.append(f"the sides ran on different {name}: {', '.join(base)} → {', '.join(cand)}")
    return notes


def _machine_note(row: Row) -> str:
    """Where a compared group's seeds ran, where its change then holds the machines' as well: their device kinds
    (:func:`device_label`) and library fields (:data:`LIBRARIES`), each by :func:`_differences`, and the seeds
    whose records name no device, where others of the group do (left out of the device comparison, not silently).
    Per group and per paired seed: pooled over groups or seeds, a group's CPU → GPU and another's GPU → CPU cancel
    out. Information only, never the verdict; "" when none, or nothing was compared."""
    if row.change is None:
        return ""
    records = [latest_by_seed(g) for g in (row.base, row.cand)]
    paired = row.change.test in stats.PAIRED
    kinds = [{seed: kind for seed, r in side.items() if (kind := device_label(r)) != NONE} for side in records]
    notes = _differences(kinds, paired, "devices")
    if any(kinds):
        notes += [f"seed(s) {seeds_text(unknown)} of the {role} record no device"
                  for role, side, known in zip(("baseline", "candidate"), records, kinds)
                  if (unknown := side.keys() - known.keys())]
    for key in LIBRARIES:
        values = [{seed: str(r.hardware[key]) for seed, r in side.items() if r.hardware.get(key) is not None}
                  for side in records]
        notes += _differences(values, paired, key, f"{key} ")
    return f"machines (the change holds theirs as well as the code's): {'; '.join(notes)}" if notes else ""


def _data_change(r: Row) -> str:
    """How a matched group's two sides' data differ (their records' data fingerprints; the seeds of one side read
    the same, :func:`harness.compare.sides.refuse_mixed`); "" when they read the same or nothing was compared."""
    if r.base is None or r.cand is None or not r.base.values:  # (a baseline that only failed compared nothing)
        return ""
    base, cand = (sorted({hash_jsonable(rec.data_fingerprint)[:12] for rec in g.records}) for g in (r.base, r.cand))
    return "" if base == cand else f"data {', '.join(base)} → {', '.join(cand)}"


def differing(rows: list[Row]) -> int:
    """How many matched groups' config or data differ between the sides (listed after the verdict tables): the
    verdict line says so, since a change of setting, not of code, may be what moved the metric."""
    return sum(bool(r.config_diff or _data_change(r)) for r in rows)


def _data(rows: list[Row]) -> list[str]:
    """The matched groups whose two sides read different data (:func:`_data_change`)."""
    lines = [_bullet(group_name(r.base), change) for r in rows if (change := _data_change(r))]
    if not lines:
        return []
    return [
        "## Groups whose data differ",
        "",
        "The records' data fingerprints differ (another data root, another copy or version of the data set): the "
        "change holds the data's as well as the code's.",
        "",
        *lines,
        "",
    ]


def _details(rows: list[Row]) -> list[str]:
    """Notes on rows, each with where its seeds ran (:func:`_machine_note`), and config and data differences of
    matched groups. (A group only an older code of the candidate ran is missing: its reason says so; a side whose
    group mixes code is refused.)"""
    lines = []
    notes = [(r, [*r.notes, *filter(None, [_machine_note(r)])]) for r in rows]
    noted = [(r, n) for r, n in notes if n]
    if noted:
        lines += ["## Notes", "", *[_bullet(group_name(r.base), "; ".join(n)) for r, n in noted], ""]
    lines += _data(rows)
    diffs = [r for r in rows if r.config_diff]
    if diffs:
        lines += ["## Config differences of matched groups", ""]
        lines += [_bullet(group_name(r.base), "; ".join(r.config_diff)) for r in diffs] + [""]
    return lines


def error_report(baseline: str | None, candidate: str | None, error: BaseException) -> str:
    """The report of a comparison that stopped before it could judge: ``--out`` must never keep an earlier run's
    verdict. Bad input (``UserError``, or a command line argparse refused, whose sides may be absent) exits 2, cannot
    decide; an interruption cannot decide either; anything else is a crash, which exits 1."""
    if isinstance(error, UserError):
        verdict, text = "CANNOT DECIDE: the comparison stopped before any group was judged", str(error)
    elif isinstance(error, KeyboardInterrupt):
        verdict, text = "CANNOT DECIDE: the comparison was interrupted before its verdict", "interrupted"
    else:
        verdict, text = "FAIL: the comparison crashed", f"{type(error).__name__}: {error}"
    # One line, as the CLI prints it: the message may quote a record's values or a file's name, whose line breaks
    # would forge a verdict line.
    text = escape(" ".join(text.split()))
    sides = [code(side) if side is not None else "(not given)" for side in (baseline, candidate)]
    return f"{HEAD}{sides[0]} vs candidate {sides[1]}\n\n**{verdict}.** error: {text}\n"
