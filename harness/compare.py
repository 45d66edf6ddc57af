"""``harness compare``: regression tracking between two result sets, as a CI gate that never passes a drop it saw.

A side is a results folder, or the records of one version, commit or tag (``--results DIR`` holding both sides, or
``FOLDER@NAME`` on each side). Groups are matched on what the command asked for: domain, dataset, method, loss and
its hyper-parameters, preset and ``--set`` overrides, and the primary metric (groups whose primary metrics differ
are never compared). Each side takes per group the records of its newest code (``harness.groups``), failed ones
included; a matched pair whose resolved configs or data differ is compared and the report shows the difference (a
changed default). Two records of one seed that disagree, on one side and of one code, are refused.

The rule, per matched group (``harness.stats``): the change of the mean primary metric, candidate - baseline, is
tested two-sided (by default a paired t-test on the seeds both sides have, else Welch's; a paired test's change
is also read over all the candidate's seeds, so that seeds it cannot pair never hide a drop), the p-values of all
groups corrected together (Holm by default). The tolerance is in metric units: one for every group, or one per
domain or domain/dataset (``--tolerance rl=25``), since metrics and spreads differ. A group

- **regressed** when the corrected p < alpha and the change is worse than the tolerance;
- **improved** in the same way in the better direction;
- is **untestable** when the change is worse than the tolerance and the test did not confirm it: it cannot reach
  significance at these sample sizes (one seed, a rank test on few seeds: its minimum p is at or above
  alpha / groups), or it can but the spread of the seeds leaves the change short of significance. Either way the
  seeds showed a drop the gate can neither confirm nor rule out, so the gate never passes it as unchanged;
- is **unchanged** when the change is within the tolerance (or better) and the test could decide; an undecidable
  group within the tolerance is listed as **untested**;
- is **missing** when the baseline has it and the candidate does not, or has it only failed, with a non-finite
  metric, or without some of the baseline's seeds.

Each row also gives the **detectable** change: the smallest change its t-test could have called significant at the
level a lone group needs after the correction, from its seeds and spread. Honest noise can show drops beyond a
tolerance well below it: choose the tolerance (and the seeds) from it.

Exit status: 2 when no baseline group has a match in the candidate (nothing was compared: most likely the wrong
folders or names); else 1 when a group regressed or is missing (``--allow-missing`` lets missing ones pass, not an
untestable drop on their remaining seeds); 2 when the gate cannot decide: an untestable drop (``--allow-untestable``
lets it pass), or bad input; 0 only when every baseline group was compared and held, or was let through by an
``--allow-*`` option, which the verdict line then names.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from domains.base import UserError, hash_jsonable, write_atomic
from harness import stats
from harness.config import tolerance_value
from harness.groups import Group, code_class, code_classes, command_key, decimals, fmt, group_records
from harness.records import RunRecord, load_record_files
from harness.tables import markdown
from harness.version import resolve_commit

VERDICTS = ("regression", "missing", "untestable", "improvement", "unchanged", "untested")


@dataclass
class Side:
    """One side of a comparison: its name and every record of it (failed ones too).

    Per group (:func:`command_key`) the side is its newest code (:func:`code_classes`), chosen among all its
    records of the group, failed ones too: a newer code that failed is the side's result, and never gives way to
    an older code's completed records."""

    label: str
    records: list[RunRecord]
    current: dict[str, list[RunRecord]] = field(init=False)  # key -> the records of the group's newest code
    newest: str = field(init=False)  # the side's newest code class, over all its groups

    def __post_init__(self) -> None:
        self.newest = code_classes(self.records)[-1]
        by_key: dict[str, list[RunRecord]] = {}
        for record in self.records:
            by_key.setdefault(command_key(record), []).append(record)
        self.current = {}
        for key, members in by_key.items():
            newest = code_classes(members)[-1]
            self.current[key] = [r for r in members if code_class(r) == newest]

    def groups(self) -> dict[str, Group]:
        chosen = [r for members in self.current.values() for r in members]
        return {command_key(g.records[-1]): g for g in group_records(chosen, key=command_key, keep_empty=True)}

    def failed(self) -> dict[str, set[int]]:
        """Match key -> the seeds that only failed (no completed record of the seed) in the group's newest code."""
        out: dict[str, set[int]] = {}
        for key, members in self.current.items():
            done = {r.seed for r in members if r.status == "completed"}
            seeds = {r.seed for r in members if r.status == "failed"} - done
            if seeds:
                out[key] = seeds
        return out

    def older_code(self) -> list[str]:
        """The match keys whose newest code is not the side's newest code (a folder that keeps several versions:
        the side's newest code did not run these groups, so an older one stands for it)."""
        return [key for key, members in self.current.items() if code_class(members[0]) != self.newest]


def select(records: list[RunRecord], name: str, where: str) -> list[RunRecord]:
    """The records of the code ``name`` names: a version, else a commit, tag or branch git resolves, else a prefix
    (at least 4 hex digits) of a commit or a source digest. UserError when none or several codes match."""
    chosen = [r for r in records if r.version == name]
    commit = None if chosen else resolve_commit(name)
    if commit is not None:
        chosen = [r for r in records if r.commit == commit]
    if not chosen and len(name) >= 4 and all(c in "0123456789abcdef" for c in name.lower()):
        chosen = [r for r in records if (r.commit or "").startswith(name.lower())
                  or str(r.software.get("source_digest") or "").startswith(name.lower())]
    codes = sorted({code_class(r): r for r in chosen}.items())
    if len(codes) > 1:  # e.g. a commit's own records and an edited tree's: the gate would judge only the newest
        named = "; ".join(f"{r.code_label()} (version {r.version}, source digest "
                          f"{str(r.software.get('source_digest') or '-')[:12]})" for _, r in codes)
        raise UserError(f"'{name}' is ambiguous in {where}: it names {len(codes)} codes ({named}); name one by a "
                        "prefix of its source digest")
    if chosen:
        return chosen
    versions = sorted({r.version for r in records})
    commits = sorted({r.commit[:8] for r in records if r.commit})
    raise UserError(f"no records of version, commit or tag '{name}' in {where}; present: versions "
                    f"{', '.join(versions) or 'none'}; commits {', '.join(commits[:12]) or 'none'}"
                    f"{' ...' if len(commits) > 12 else ''}")


def load_side(text: str, results: str | None, role: str, cache: dict[Path, list[RunRecord]]) -> Side:
    """A side from ``FOLDER``, ``FOLDER@NAME`` or (with ``--results``) ``NAME``."""
    folder, _, name = text.rpartition("@") if "@" in text else (text, "", "")
    if not Path(folder).is_dir():
        folder, name = (results, text) if results else (folder, name)
    if folder is None or not Path(folder).is_dir():
        raise UserError(f"--{role} '{text}' is not a results folder (nor FOLDER@NAME); to compare two versions, "
                        "commits or tags inside one folder pass --results DIR --baseline NAME --candidate NAME")
    path = Path(folder).resolve()  # one folder however it is spelt (relative, '..', a link): never both sides
    if path not in cache:
        cache[path] = [record for _, record in load_record_files(path, completed_only=False)]
    chosen = select(cache[path], name, str(path)) if name else cache[path]
    if not any(r.status == "completed" for r in chosen):
        raise UserError(f"the {role} '{text}' has no completed records; nothing to compare")
    return Side(text, chosen)


@dataclass
class Row:
    """One matched (or unmatched) group and its verdict."""

    base: Group | None
    cand: Group | None
    verdict: str
    change: stats.Change | None = None
    p_adjusted: float = math.nan
    problems: list[str] = field(default_factory=list)  # why a group is missing
    seen: str = ""  # the verdict on the seeds the candidate has (a missing group's too: it may hide a drop)
    notes: list[str] = field(default_factory=list)  # what else the reader must know of this row
    matched: bool = False  # the candidate has the group, completed or only failed
    config_diff: list[str] = field(default_factory=list)
    tolerance: float = math.nan  # this group's, in metric units
    detectable: float = math.nan  # the smallest change its test could have called significant (stats.detectable)


def _config_diff(base: Group, cand: Group) -> list[str]:
    keys = sorted(set(base.config) | set(cand.config))
    return [f"{k}: {base.config.get(k, '(absent)')} → {cand.config.get(k, '(absent)')}"
            for k in keys if base.config.get(k) != cand.config.get(k)]


def _missing(base: Group, cand: Group | None, failed: set[int]) -> list[str]:
    if cand is None:
        return [f"failed on seed(s) {_seeds(failed)}" if failed else "not in the candidate"]
    problems = []
    if failed:
        problems.append(f"failed on seed(s) {_seeds(failed)}")
    if cand.nonfinite:
        problems.append(f"non-finite {cand.primary_metric} on seed(s) {_seeds(cand.nonfinite)}")
    lost = set(base.values) - set(cand.values) - failed - cand.nonfinite
    if lost:
        problems.append(f"seed(s) {_seeds(lost)} of the baseline not run")
    return problems


def _seeds(seeds: Iterable[int]) -> str:
    return ",".join(map(str, sorted(seeds)))


@dataclass(frozen=True)
class Tolerances:
    """``--tolerance``: a default and per-selector values (``DOMAIN`` or ``DOMAIN/DATASET``), in metric units."""

    default: float
    by_selector: dict[str, float]

    def of(self, group: Group) -> float:
        """The most specific tolerance that names the group: its domain/dataset, its domain, else the default."""
        for selector in (f"{group.domain}/{group.dataset}", group.domain):
            if selector in self.by_selector:
                return self.by_selector[selector]
        return self.default


def parse_tolerances(items: list[str] | None) -> Tolerances:
    """``--tolerance`` as given (repeatable): ``VALUE`` sets the default (1 when absent), ``SELECTOR=VALUE`` one
    domain's or one domain/dataset's. UserError for a value that is not a finite number >= 0 or a repeated key."""
    default, by_selector = None, {}
    for item in items or []:
        selector, _, text = item.rpartition("=")
        value = tolerance_value(text)
        if value is None:
            raise UserError(f"--tolerance '{item}': the value must be a finite number >= 0 (metric units)")
        if not selector:
            if default is not None:
                raise UserError(f"--tolerance '{item}': the default tolerance is given twice")
            default = value
        elif selector in by_selector or selector.count("/") > 1 or not all(selector.split("/")):
            raise UserError(f"--tolerance '{item}': give DOMAIN=VALUE or DOMAIN/DATASET=VALUE, each once")
        else:
            by_selector[selector] = value
    return Tolerances(1.0 if default is None else default, by_selector)


def judge(base: Side, cand: Side, args: argparse.Namespace) -> list[Row]:
    """Every baseline group's row (and the candidate's added groups), with the verdicts of the rule above."""
    base_groups, cand_groups, failed = base.groups(), cand.groups(), cand.failed()
    unused = set(args.tolerances.by_selector) - {s for g in base_groups.values()
                                                 for s in (g.domain, f"{g.domain}/{g.dataset}")}
    if unused:  # a misspelt selector would leave its groups at the default tolerance without a word
        raise UserError(f"--tolerance names no baseline group: {', '.join(sorted(unused))}")
    _refuse_conflicts(base, base_groups.values())
    _refuse_conflicts(cand, cand_groups.values())
    rows, tested = [], []
    for key, b in base_groups.items():
        c = cand_groups.get(key)
        problems = _missing(b, c, failed.get(key, set()))
        row = Row(b, c, "missing", problems=problems, config_diff=_config_diff(b, c) if c else [],
                  tolerance=args.tolerances.of(b), matched=c is not None or key in failed)
        for side, g in (("baseline", b), ("candidate", c)):
            configs = {hash_jsonable(r.config) for r in g.records} if g is not None else set()
            if len(configs) > 1:  # one code, one command: only an edited record or a plugin domain can do this
                row.notes.append(f"the {side}'s seeds ran {len(configs)} different configs")
        if c is not None and b.values and c.values:
            try:
                row.change = stats.compare_values(b.values, c.values, args.test)
                means = c.mean - b.mean  # over all seeds: what a paired test's change leaves out
            except OverflowError:
                raise UserError(f"{_name(b)}: its {b.primary_metric} values are too large to compute a mean or a "
                                "test with; check the records' metrics") from None
            unpaired = sorted(set(c.values) - set(b.values)) if row.change.n_pairs else []
            if unpaired:
                row.notes.append(f"the candidate's seed(s) {_seeds(unpaired)} have no baseline seed to pair with: the "
                                 f"paired test leaves them out; over all seeds the mean changed by "
                                 f"{means:+.{decimals(b.mean)}f}")
            tested.append((row, b.sign * (means if unpaired else row.change.change)))
        rows.append(row)
    decidable = [r for r, _ in tested if stats.decidable(r.change, args.alpha, len(tested), args.correction)]
    for row, p in zip(decidable, stats.adjust([r.change.p for r in decidable], args.correction)):
        row.p_adjusted = p
    level = stats.lone_level(args.alpha, len(tested), args.correction)
    for row, whole in tested:
        row.detectable = stats.detectable(row.change, level)
        gain = row.base.sign * row.change.change
        if row in decidable and row.p_adjusted < args.alpha and abs(gain) > row.tolerance:
            row.seen = "regression" if gain < 0 else "improvement"
        elif min(gain, whole) < -row.tolerance:  # a drop the seeds showed and the test did not confirm: never a pass
            row.seen = "untestable"
        else:
            row.seen = "unchanged" if row in decidable else "untested"
        # Seeds missing on the candidate's side: a regression on the others is still one.
        row.verdict = "missing" if row.problems and row.seen != "regression" else row.seen
    rows += [Row(None, g, "added") for key, g in cand_groups.items() if key not in base_groups]
    return rows


def _name(g: Group) -> str:
    return f"{g.domain} / {g.dataset} / {g.method} / {g.loss} ({g.hparams_label()}, {g.setting_label()})"


def _refuse_conflicts(side: Side, groups: Iterable[Group]) -> None:
    """UserError when a side holds two records of one seed (one group, one code) that disagree: which of them is
    the side's result is not the gate's to choose."""
    clashes = [f"{_name(g)}, seed {seed}: " + ", ".join(f"{r.run_id} ({fmt(r.metrics.get(r.primary_metric))})"
                                                     for r in records)
               for g in groups for seed, records in sorted(g.conflicts.items())]
    if clashes:
        raise UserError(f"'{side.label}' holds different results for one seed of one code: {'; '.join(clashes)}. "
                        "Keep one record per seed (a side is one run of each seed), then compare again")


COLUMNS = ["domain", "dataset", "method", "loss", "hyper-parameters", "setting", "metric", "baseline (n)",
           "candidate (n)", "change [95% CI]", "effect", "test", "p (corrected)", "min p", "detectable",
           "tolerance"]


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g}"


def _row(row: Row) -> list[str]:
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
        tail = [f"{ch.change:+.{digits}f}{interval}", effect, ch.test + pairs,
                f"{_p(ch.p)} ({_p(row.p_adjusted)})", _p(ch.min_p), detectable]
    return [g.domain, g.dataset, g.method, g.loss, g.hparams_label(), g.setting_label(),
            f"{g.primary_metric} ({'↑' if g.higher_is_better else '↓'})", base, cand, *tail, f"{row.tolerance:g}"]


TITLES = {
    "regression": "Regressions", "missing": "Missing, failed or non-finite in the candidate",
    "untestable": "Untestable: drops worse than the tolerance that the test did not confirm",
    "improvement": "Improvements",
    "unchanged": "Unchanged", "untested": "Untested (the test cannot decide at these seeds; within the tolerance)",
}


def report(args: argparse.Namespace, base: Side, cand: Side, rows: list[Row]) -> str:
    level = f"alpha / groups = {args.alpha:g} / n" if args.correction != "none" else f"alpha = {args.alpha:g}"
    lines = [
        f"# Comparison: baseline `{base.label}` vs candidate `{cand.label}`", "",
        f"Rule: per group, the change of the mean primary metric (candidate − baseline; ↑ higher is better, ↓ lower) "
        f"is tested with {stats.TESTS[args.test]}, two-sided, and the p-values of the groups are corrected together "
        f"with {stats.CORRECTIONS[args.correction]}. A group **regressed** when its corrected p < {args.alpha:g} and "
        f"the change is worse than its tolerance ({_tolerance_text(args.tolerances)}, in metric units); an "
        "**improvement** likewise in the better direction. A change worse than the tolerance that the test did not "
        f"confirm is **untestable**: the test cannot reach significance at its seeds (minimum p ≥ {level}), or the "
        "seeds' spread left it short of significance; the gate never passes it as unchanged. Within the tolerance a "
        "group is **unchanged**, or **untested** where its test cannot decide. A "
        "baseline group absent from the candidate, failed, non-finite or short of seeds is **missing**. Groups are "
        "matched on domain, dataset, method, loss, hyper-parameters, preset, overrides and primary metric; each side "
        "uses per group the records of its newest code. Change: mean difference (paired: mean of the per-seed "
        "differences) with its 95% t interval; effect: standardised (paired d_z, else Cohen's d); detectable: the "
        f"smallest change the t-test could have called significant at {level} with the group's seeds and spread "
        "(honest noise can show drops beyond a tolerance well below it).", "",
    ]
    for verdict in VERDICTS:
        chosen = [r for r in rows if r.verdict == verdict]
        lines += [f"## {TITLES[verdict]} ({len(chosen)})", ""]
        lines += [*markdown(COLUMNS, map(_row, chosen)), ""] if chosen else ["none", ""]
        if verdict == "missing" and chosen:
            lines += [f"- {_name(r.base)}: {'; '.join(r.problems)}"
                      + ("; the seeds it has show a drop worse than the tolerance that the test did not confirm"
                         if r.seen == "untestable" else "") for r in chosen] + [""]
    added = [r.cand for r in rows if r.verdict == "added"]
    lines += [f"## Added in the candidate, not in the baseline ({len(added)})", ""]
    lines += [*markdown(["domain", "dataset", "method", "loss", "hyper-parameters", "setting"],
                        [[g.domain, g.dataset, g.method, g.loss, g.hparams_label(), g.setting_label()]
                         for g in added]), ""] if added else ["none", ""]
    lines += _details(rows, cand)
    return "\n".join(lines)


def _tolerance_text(tolerances: Tolerances) -> str:
    parts = [f"{tolerances.default:g}"] + [f"{k}: {v:g}" for k, v in sorted(tolerances.by_selector.items())]
    return parts[0] if len(parts) == 1 else f"{parts[0]}; " + ", ".join(parts[1:])


MACHINE = ("device", "device_name", "cpu", "cpu_capability", "torch_threads", "torch", "cuda")


def _machines(rows: list[Row]) -> list[str]:
    """The machine and library fields (:data:`MACHINE`) whose values differ between the records the two sides
    compared, among the fields both sides recorded (older records lack ``cpu`` and ``cpu_capability``)."""
    compared = [r for r in rows if r.change is not None]
    sides = [[rec for r in compared for rec in r.base.records], [rec for r in compared for rec in r.cand.records]]
    lines = []
    for key in MACHINE:
        base, cand = ({str(rec.hardware[key]) for rec in side if rec.hardware.get(key) is not None} for side in sides)
        if base and cand and base != cand:
            lines.append(f"- {key}: {', '.join(sorted(base))} → {', '.join(sorted(cand))}")
    if not lines:
        return []
    return ["## The sides ran on different machines or libraries", "",
            "A seed reruns bit for bit only on the same machine, libraries and thread count; here they differ, so "
            "each change holds the machine's as well as the code's (rerun on other CPU kernels alone, the regression "
            "suite's graph seeds moved like fresh seeds: README, Regression tracking in CI). Compare runs of one "
            "machine to see the code's change alone.", "", *lines, ""]


def _data(rows: list[Row]) -> list[str]:
    """The matched groups whose two sides read different data (their records' data fingerprints), and the groups
    whose seeds on one side did."""
    lines = []
    for r in rows:
        if r.base is None or r.cand is None:
            continue
        base, cand = (sorted({hash_jsonable(rec.data_fingerprint)[:12] for rec in g.records}) for g in (r.base, r.cand))
        if base != cand:
            lines.append(f"- {_name(r.base)}: data {', '.join(base)} → {', '.join(cand)}")
    if not lines:
        return []
    return ["## Groups whose data differ", "",
            "The records' data fingerprints differ (another data root, another copy or version of the data set, or "
            "seeds of one side that read different data): the change holds the data's as well as the code's.", "",
            *lines, ""]


def _details(rows: list[Row], cand: Side) -> list[str]:
    """Notes on rows, config and data differences of matched groups, groups whose seeds come from different code,
    groups an older code stands for, and the machines."""
    lines = []
    noted = [r for r in rows if r.notes]
    if noted:
        lines += ["## Notes", "", *[f"- {_name(r.base)}: {'; '.join(r.notes)}" for r in noted], ""]
    older = set(cand.older_code())
    stale = [r.cand for r in rows if r.cand is not None and command_key(r.cand.records[-1]) in older]
    if stale:
        newest = next(r for r in cand.records if code_class(r) == cand.newest)
        lines += [f"## Groups the candidate's newest code ({newest.code_label()}) did not run", "",
                  "The candidate holds records of several codes; these groups are judged on the newest code that ran "
                  "them, an older one. Compare a folder of one code to judge that code alone.", "",
                  *[f"- {_name(g)}: {g.code_label()}" for g in stale], ""]
    lines += _machines(rows) + _data(rows)
    diffs = [r for r in rows if r.config_diff]
    if diffs:
        lines += ["## Config differences of matched groups", ""]
        lines += [f"- {r.base.domain} / {r.base.dataset} / {r.base.method} / {r.base.loss} "
                  f"({r.base.hparams_label()}): {'; '.join(r.config_diff)}" for r in diffs] + [""]
    mixed = [(side, g) for r in rows for side, g in (("baseline", r.base), ("candidate", r.cand))
             if g is not None and g.mixed_code]
    if mixed:
        lines += ["## Groups whose seeds come from different code", ""]
        lines += [f"- {side}: {g.domain} / {g.dataset} / {g.method} / {g.loss} ({g.hparams_label()}): "
                  f"{g.code_label()}" for side, g in mixed] + [""]
    return lines


def validate(args: argparse.Namespace) -> None:
    """Every option checked before anything is read."""
    if not (math.isfinite(args.alpha) and 0 < args.alpha < 1):
        raise UserError(f"--alpha must be a number between 0 and 1 (exclusive), got {args.alpha}")
    args.tolerances = parse_tolerances(args.tolerance)


def cmd_compare(args: argparse.Namespace) -> int:
    """0: every baseline group compared and held; 1: a regression or a missing group; 2: cannot decide."""
    validate(args)
    cache: dict[Path, list[RunRecord]] = {}
    base = load_side(args.baseline, args.results, "baseline", cache)
    cand = load_side(args.candidate, args.results, "candidate", cache)
    if {id(r) for r in base.records} == {id(r) for r in cand.records}:
        raise UserError(f"the baseline and the candidate are the same {len(base.records)} records; name two "
                        "different versions, commits, tags or folders")
    rows = judge(base, cand, args)
    count = {v: sum(r.verdict == v for r in rows) for v in (*VERDICTS, "added")}
    failing = count["regression"] + (0 if args.allow_missing else count["missing"])
    # A missing group's seeds may show an unconfirmed drop: --allow-missing waives the seeds, not the drop.
    untestable = sum(r.seen == "untestable" for r in rows)
    undecided = 0 if args.allow_untestable else untestable
    waived = [f"{count['missing']} missing (--allow-missing)" if count["missing"] else "",
              f"{untestable} untestable (--allow-untestable)" if untestable else ""]
    if not any(r.matched for r in rows):  # most likely the wrong folders or names: say so, not "every group missing"
        code, verdict = 2, "CANNOT DECIDE: no baseline group has a matching candidate group"
    elif failing:
        code, verdict = 1, f"FAIL: {count['regression']} regression(s), {count['missing']} missing"
    elif undecided:
        code, verdict = 2, f"CANNOT DECIDE: {undecided} untestable change(s) worse than the tolerance"
    elif any(waived):
        code, verdict = 0, f"PASS with waivers: {', '.join(w for w in waived if w)} let through"
    else:
        code, verdict = 0, "PASS: every baseline group compared and held"
    summary = ", ".join(f"{n} {v}" for v, n in count.items() if n)
    text = report(args, base, cand, rows) + f"\n**{verdict}** ({summary}).\n"
    print(text)
    if args.out:
        write_atomic(Path(args.out), text)
    if code == 2:
        raise UserError(verdict.split(": ", 1)[1] + " (see the report above)")
    return code
