"""``harness compare``: regression tracking between two result sets, as a CI gate that never passes a drop it saw.

A side is a results folder, or the records of one version, commit or tag (``--results DIR`` holding both sides, or
``FOLDER@NAME`` on each side). Groups are matched on what the command asked for: domain, dataset, method, loss and
its hyper-parameters, preset and ``--set`` overrides, and the primary metric (groups whose primary metrics differ
are never compared). Each side takes per group the records of its newest code (``harness.groups``), failed ones
included (``harness.compare.sides``); a matched pair whose resolved configs or data differ is compared and the report
shows the difference (a changed default). A side must be one result per group: two records of one seed that
disagree, seeds that ran different code (the commits of records without a source digest, which one version may
hold) or configs or read different data, or two codes that cannot be ordered in time are refused. The candidate is
its newest code: a group only an older code of it ran, or one it holds only as the baseline's own records (one
folder on both sides, or copies in both folders newer than a side's own code of it, or the candidate's newest code
while it holds other code), is missing, never compared with an older code or with itself.

The rule, per matched group (``harness.stats``): the change of the mean primary metric, candidate - baseline, is
tested two-sided (by default a paired t-test on the seeds both sides have, else Welch's; a paired test's change
is also read over all the candidate's seeds, so that seeds it cannot pair never hide a drop, not even behind a
significant improvement of the pairs), the p-values of all
groups corrected together (Holm by default). The tolerance is in metric units: one for every group, or one per
domain or domain/dataset (``--tolerance rl=25``), since metrics and spreads differ. A group

- **regressed** when the corrected p < alpha and the change is worse than the tolerance;
- **improved** in the same way in the better direction;
- is **untestable** when the change is worse than the tolerance and the test did not confirm it: it cannot reach
  significance at these seeds (one seed, a rank test on few seeds or on tied values: its minimum p is at or
  above alpha / groups), or it can but the spread of the seeds leaves the change short of significance. Either way the
  seeds showed a drop the gate can neither confirm nor rule out, so the gate never passes it as unchanged;
- is **unchanged** (listed as *within tolerance*: a large drop within a large tolerance is no unchanged group)
  when the change is within the tolerance (or better) and the test could decide; an undecidable group within the
  tolerance is listed as **untested**;
- is **missing** when the baseline has it and the candidate does not, or has it only failed, with a non-finite
  metric, or without some of the baseline's seeds (a seed the candidate ran and failed or diverged on is never
  waived by ``--allow-missing``, whatever the baseline did);
- is **unjudged** when the baseline's newest code of it failed or diverged on every seed (no finite value) and the
  candidate ran it and lacks nothing: there is nothing to judge the candidate by, so the report names the
  baseline's code and seeds and the gate cannot decide, as the regression suite treats a setting without a
  baseline record (a baseline group that only failed holds no completed record, yet must not vanish: the
  candidate's group would be listed as added, judged by nothing).

Each row also gives the **detectable** change: the smallest change its t-test could have called significant at the
level a lone group needs after the correction, from its seeds and spread. Honest noise can show drops beyond a
tolerance well below it: choose the tolerance (and the seeds) from it.

Exit status: 2 when no baseline group has a match in the candidate (nothing was compared: most likely the wrong
folders or names); else 1 when a group regressed or is missing (``--allow-missing`` lets missing ones pass, not an
untestable drop on their remaining seeds, nor a seed the candidate ran and failed or diverged on, nor a group a code
of a side ran whose records copies of the other side's shadow); 2 when the gate
cannot decide: an untestable drop (``--allow-untestable`` lets it pass), an unjudged group (no option lets it pass:
record a baseline that ran), or bad input; 0 only when every baseline group was compared and held, or was let
through by an ``--allow-*`` option, which the verdict line then names. The report (``harness.compare.report``) ends
with that verdict; when bad input (a command line argparse refused too, ``harness.compare.refused``), an
interruption or a crash stops the comparison first, ``--out`` gets a report that says so, never an earlier verdict.
``--out`` replaces only a compare report (a file that starts as one): a record or a user's file there is refused, and
nothing is written; so is a ``.json`` report among a side's records, which later reads would take for one
(:func:`claim_out`).

The report begins with each side's records read, the code(s) it judged, and what it left out, also warned on
stderr: records of other codes of its groups (with the ``FOLDER@NAME`` that judges one) and ``*.json`` files in
subfolders (never read); the verdict line says so too, and counts the groups whose config or data differ.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from domains.errors import UserError
from domains.files import folder_problem, write_atomic
from harness import stats
from harness.compare.report import HEAD, SUMMARY_NAMES, VERDICTS, Row, differing, error_report, report
from harness.compare.sides import (
    Side,
    copied,
    folder_and_name,
    load_side,
    refuse_conflicts,
    refuse_mixed,
    refuse_report_among_records,
    seeds_text,
)
from harness.groups import Group, group_name, summable, too_large
from harness.numbers import decimals
from harness.pages.generated import refuse_foreign
from harness.records import RunRecord
from harness.run.config import tolerance_value


def _config_diff(base: Group, cand: Group) -> list[str]:
    keys = sorted(set(base.config) | set(cand.config))
    return [
        f"{k}: {base.config.get(k, '(absent)')} → {cand.config.get(k, '(absent)')}"
        for k in keys
        if base.config.get(k) != cand.config.get(k)
    ]


def _baseline_broke(base: Group, failed: set[int]) -> str:
    """Which seeds the baseline's code failed or diverged on, naming the code; "" when none."""
    broke = _broke(base, failed)
    return f"its code {base.code_label()} {' and '.join(broke)}" if broke else ""


def _baseline_failed(base: Group, failed: set[int]) -> str:
    """Why the baseline has nothing to compare with, naming the seeds and the code that failed or diverged; "" when
    it has a finite value."""
    if base.values:
        return ""
    return f"the baseline has no finite {base.primary_metric}: {_baseline_broke(base, failed)}; nothing to compare with"


def _broke(group: Group, failed: set[int]) -> list[str]:
    """The seeds of a group that its code ran and failed (``failed``) or diverged on."""
    return [f"failed on seed(s) {seeds_text(failed)}"] * bool(failed) + [
        f"gave a non-finite {group.primary_metric} on seed(s) {seeds_text(group.nonfinite)}"
    ] * bool(group.nonfinite)


def _missing(base: Group, cand: Group | None, failed: set[int]) -> list[str]:
    """What the candidate lacks of a baseline group: absent, failed or non-finite seeds, seeds it did not run."""
    if cand is None:
        return [f"failed on seed(s) {seeds_text(failed)}" if failed else "not in the candidate"]
    problems = _broke(cand, failed)
    lost = set(base.values) - set(cand.values) - failed - cand.nonfinite
    if lost:
        problems.append(f"seed(s) {seeds_text(lost)} of the baseline not run")
    return problems


def _own(base: Group, cand: Group, shadowed: dict[str, list[str]], others: list[str]) -> str:
    """Why the candidate's records of a group are the baseline's own, a group compared with itself; "" when they
    are not. One folder on both sides (e.g. the folder against one code in it, whose newest code per group is that
    code), or copies of one side's records in the other's folder that shadow an older code of that side's
    (``shadowed``, per side: a candidate folder seeded with the baseline's records, then run by a code committed
    before the baseline's; a candidate's records written into the baseline's folder), or copies that are the
    candidate's newest code of the group while it holds other code (``others``: the labels of its other codes,
    whatever their dates, which ran other groups, not this one). Copies with no other code beside them are one
    code on both sides, as a rerun on its machine would be bit for bit: compared."""
    if {id(r) for r in base.records} & {id(r) for r in cand.records}:
        return f"the candidate holds it only as the baseline's own records ({cand.code_label()})"
    older = [f"the {side}'s own code(s) {', '.join(codes)}" for side, codes in shadowed.items() if codes]
    if not copied(base, cand):
        return ""
    copies = f"both sides' newest code of it ({cand.code_label()}) is the same records (copies in both folders)"
    if older:
        return f"{copies}, newer than {' and '.join(older)}; name each side's code (FOLDER@NAME)"
    if others:
        return (f"{copies}, while the candidate holds other code(s) too ({', '.join(others)}); name each side's "
                "code (FOLDER@NAME)")
    return ""


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

    def describe(self) -> str:
        """The tolerances as the report's rule states them."""
        parts = [f"{self.default:g}"] + [f"{k}: {v:g}" for k, v in sorted(self.by_selector.items())]
        return parts[0] if len(parts) == 1 else f"{parts[0]}; " + ", ".join(parts[1:])


def parse_tolerances(items: list[str] | None) -> Tolerances:
    """``--tolerance`` as given (repeatable): ``VALUE`` sets the default (1 when absent), ``SELECTOR=VALUE`` one
    domain's or one domain/dataset's. UserError for a value that is not a finite number >= 0 or a repeated key."""
    default, by_selector = None, {}
    for item in items or []:
        selector, eq, text = item.rpartition("=")
        value = tolerance_value(text)
        if value is None:
            raise UserError(f"--tolerance '{item}': the value must be a finite number >= 0 (metric units)")
        if eq and not selector:  # "=3" names no selector: a typo, not the default
            raise UserError(f"--tolerance '{item}': give VALUE, DOMAIN=VALUE or DOMAIN/DATASET=VALUE")
        # A domain is a plain name, without "/"; a dataset may hold some (vision's hf:uoft-cs/cifar10).
        domain, slash, dataset = selector.partition("/")
        if not selector:
            if default is not None:
                raise UserError(f"--tolerance '{item}': the default tolerance is given twice")
            default = value
        elif selector in by_selector or not domain or (slash and not dataset):
            raise UserError(f"--tolerance '{item}': give DOMAIN=VALUE or DOMAIN/DATASET=VALUE, each once")
        else:
            by_selector[selector] = value
    return Tolerances(1.0 if default is None else default, by_selector)


def judge(base: Side, cand: Side, args: argparse.Namespace) -> list[Row]:
    """Every baseline group's row (and the candidate's added groups), with the verdicts of the rule above."""
    base_groups, cand_groups, failed, older = base.groups(), cand.groups(), cand.failed(), cand.older_code()
    for side, groups in ((base, base_groups), (cand, cand_groups)):
        refuse_conflicts(side, groups.values())
        refuse_mixed(side, groups.values())
    # A baseline group whose newest code only failed holds no completed record, yet must not vanish: the candidate's
    # group would be listed as added and pass, judged by nothing.
    base_failed, base_groups = base.failed(), {**base.failed_groups(), **base_groups}
    unused = set(args.tolerances.by_selector) - {
        s for g in base_groups.values() for s in (g.domain, f"{g.domain}/{g.dataset}")
    }
    if unused:  # a misspelt selector would leave its groups at the default tolerance without a word
        raise UserError(f"--tolerance names no baseline group: {', '.join(sorted(unused))}")
    rows, tested = [], []
    for key, b in base_groups.items():
        c = cand_groups.get(key)
        shadowed = {"baseline": base.shadowed.get(key, []), "candidate": cand.shadowed.get(key, [])}
        # (a group only an older code of the candidate ran is missing for that reason, below)
        own = "" if c is None else _own(b, c, shadowed, [] if key in older else cand.other_codes(c))
        if own:  # compared with itself it would hold whatever its code did
            # A code those records shadow ran it (the candidate's, or the baseline's own where the candidate's
            # records were copied into its folder): a result the gate did not judge is never waived.
            unseen = " and ".join(f"the {side}'s code(s) {', '.join(codes)}"
                                  for side, codes in shadowed.items() if codes)
            rows.append(
                Row(
                    b,
                    None,
                    "missing",
                    tolerance=args.tolerances.of(b),
                    own=True,
                    unseen=bool(unseen),
                    problems=[f"{own}: " + (f"{unseen} ran it, unjudged (never waived)" if unseen
                                            else "the candidate's code did not run it")],
                )
            )
            continue
        problems = _missing(b, c, failed.get(key, set()))
        # The candidate's code failed or diverged: its failure, whatever the baseline did (both failed is no pass).
        ran_and_failed = bool(failed.get(key)) or (c is not None and bool(c.nonfinite))
        if key in older:  # the candidate is its newest code: an older one never stands in for it
            problems.insert(
                0,
                f"only an older code of the candidate ran it ({older[key]}); its newest code "
                f"({cand.newest_label()}) did not",
            )
        unjudged = _baseline_failed(b, base_failed.get(key, set()))
        row = Row(
            b,
            c,
            # A candidate that ran it and lacks nothing, against a baseline without a value: nothing judged it.
            "missing" if problems or not unjudged else "unjudged",
            unjudged=unjudged,
            problems=problems,
            config_diff=_config_diff(b, c) if c else [],
            tolerance=args.tolerances.of(b),
            matched=c is not None or key in failed,
            ran_and_failed=ran_and_failed,
        )
        broke = _baseline_broke(b, base_failed.get(key, set()))
        if b.values and broke:  # its n alone would not say why the baseline has fewer seeds than it ran
            row.notes.append(f"the baseline: {broke}; compared on its other seed(s) {seeds_text(b.values)}")
        if c is not None and b.values and c.values:
            try:
                row.change = stats.compare_values(b.values, c.values, args.test)
                means = c.mean - b.mean  # over all seeds: what a paired test's change leaves out
            except OverflowError:
                # the records of the side whose values overflow; of both where the test's differences do
                sides = [g for g in (b, c) if not summable(list(g.values.values()))] or [b, c]
                records = [r for g in sides for r in g.records]
                raise UserError(too_large(b, b.primary_metric, records, "a mean or a test")) from None
            unpaired = sorted(set(c.values) - set(b.values)) if row.change.test in stats.PAIRED else []
            if unpaired:
                row.notes.append(
                    f"the candidate's seed(s) {seeds_text(unpaired)} have no baseline seed to pair "
                    f"with: the paired test leaves them out; over all seeds the mean changed by "
                    f"{means:+.{decimals(b.mean)}f}"
                )
            # The change the seeds show: the test's, and over all seeds where the test leaves some out or has
            # no change to give (a paired test on no pair).
            whole = b.sign * (means if unpaired or math.isnan(row.change.change) else row.change.change)
            tested.append((row, whole))
        rows.append(row)
    decidable = [r for r, _ in tested if stats.decidable(r.change, args.alpha, len(tested), args.correction)]
    for row, p in zip(decidable, stats.adjust([r.change.p for r in decidable], args.correction)):
        row.p_adjusted = p
    decided = {id(r) for r in decidable}
    level = stats.lone_level(args.alpha, len(tested), args.correction)
    for row, whole in tested:
        row.detectable = stats.detectable(row.change, level)
        gain = row.base.sign * row.change.change
        shown = min(v for v in (gain, whole) if not math.isnan(v))  # whole is finite: both sides have values
        significant = id(row) in decided and row.p_adjusted < args.alpha
        if significant and gain < -row.tolerance:
            row.seen = "regression"
        elif shown < -row.tolerance:  # a drop the seeds showed and the test did not confirm: never a pass
            row.seen = "untestable"
        elif significant and gain > row.tolerance:  # (a paired improvement never hides the others' drop)
            row.seen = "improvement"
        else:
            row.seen = "unchanged" if id(row) in decided else "untested"
        # Seeds missing on the candidate's side: a regression on the others is still one, and says what it lacks.
        row.verdict = "missing" if row.problems and row.seen != "regression" else row.seen
        if row.verdict == "regression" and row.problems:
            row.notes.append(f"the candidate also lacks: {'; '.join(row.problems)}")
    # Added groups gate nothing, but one the candidate's code failed or diverged on is said to have failed: a crash
    # must not read as a new result, nor (a group that only failed holds no completed record) vanish.
    rows += [
        Row(None, g, "added", problems=_broke(g, failed.get(key, set())))
        for key, g in {**cand.failed_groups(), **cand_groups}.items()
        if key not in base_groups
    ]
    return rows


def validate(args: argparse.Namespace) -> None:
    """Every option checked before anything is read."""
    if not (math.isfinite(args.alpha) and 0 < args.alpha < 1):
        raise UserError(f"--alpha must be a number between 0 and 1 (exclusive), got {args.alpha}")
    _check_results(args.results)
    args.tolerances = parse_tolerances(args.tolerance)


def _check_results(results: str | None) -> None:
    """UserError when ``--results`` is given and is no folder: each side's NAME would then be read as a folder of
    its own, and the error would blame ``--baseline`` for the mistyped ``--results``."""
    if results is None:
        return
    problem = folder_problem(Path(results))
    if problem:
        raise UserError(f"--results '{results}' {problem}")


def _gate(args: argparse.Namespace) -> tuple[int, str, str]:
    """The exit status, the report and its verdict line."""
    validate(args)
    cache: dict[Path, list[RunRecord]] = {}
    base = load_side(args.baseline, args.results, "baseline", cache)
    cand = load_side(args.candidate, args.results, "candidate", cache)
    if {id(r) for r in base.records} == {id(r) for r in cand.records}:
        raise UserError(
            f"the baseline and the candidate are the same {len(base.records)} records; name two "
            "different versions, commits, tags or folders"
        )
    for role, side in (("baseline", base), ("candidate", cand)):
        for warning in side.warnings():  # also in the report; here for a CI log that shows only stderr
            print(f"warning: the {role} {warning}", file=sys.stderr)
    rows = judge(base, cand, args)
    count = {v: sum(r.verdict == v for r in rows) for v in (*VERDICTS, "added")}
    # A seed the candidate's code ran and failed or diverged on (non-finite where the baseline has values) is that
    # code's failure, not an absent seed: --allow-missing never waives it.
    broke = sum(r.verdict == "missing" and r.ran_and_failed for r in rows)
    # Nor a group a side's code ran whose records copies of the other side's shadow: its result is unseen.
    unseen = sum(r.verdict == "missing" and r.unseen for r in rows)
    waivable = count["missing"] - broke - unseen
    failing = count["regression"] + broke + unseen + (0 if args.allow_missing else waivable)
    # A missing group's seeds may show an unconfirmed drop: --allow-missing waives the seeds, not the drop.
    untestable = sum(r.seen == "untestable" for r in rows)
    undecided = 0 if args.allow_untestable else untestable
    waived = [
        f"{waivable} missing (--allow-missing)" if waivable else "",
        f"{untestable} untestable (--allow-untestable)" if untestable else "",
    ]
    own = sum(r.own for r in rows)
    if not any(r.matched for r in rows):  # most likely the wrong folders or names: say so, not "every group missing"
        code, verdict = (
            2,
            "CANNOT DECIDE: no baseline group has a matching candidate group"
            + (
                f" of its own (the candidate holds {own} only as the baseline's own records: one folder on both sides, "
                "or copies of its records; name each side's code, FOLDER@NAME)"
                if own
                else ""
            ),
        )
    elif failing:
        # A regression short of baseline seeds is counted once, as a regression; "0 missing" must not hide them.
        short = sum(r.verdict == "regression" and bool(r.problems) for r in rows)
        code, verdict = 1, f"FAIL: {count['regression']} regression(s)" + (
            f" ({short} of them also short of the baseline's seeds: see Notes)" if short else "") + (
            f", {count['missing']} missing") + (
            f" ({broke} with seeds the candidate failed or diverged on: never waived)" if broke else "") + (
            f" ({unseen} run by a side's code that copies of the other side's records shadow: never waived)"
            if unseen else "")
    elif undecided or count["unjudged"]:  # no option waives a baseline without a value: record one that ran
        unjudged = [group_name(r.base) for r in rows if r.verdict == "unjudged"]
        code, verdict = 2, "CANNOT DECIDE: " + "; ".join(
            ([f"{undecided} untestable change(s) worse than the tolerance"] if undecided else [])
            + ([f"the baseline failed or diverged on every seed of {len(unjudged)} group(s), so nothing judged the "
                f"candidate there: {'; '.join(unjudged)}"] if unjudged else []))
    elif any(waived):
        code, verdict = 0, f"PASS with waivers: {', '.join(w for w in waived if w)} let through"
    else:
        code, verdict = 0, "PASS: every baseline group compared and held"
    summary = ", ".join(f"{n} {SUMMARY_NAMES.get(v, v)}" for v, n in count.items() if n) + _caveats(base, cand, rows)
    return code, report(args, base, cand, rows) + f"\n**{verdict}** ({summary}).\n", verdict


def _caveats(base: Side, cand: Side, rows: list[Row]) -> str:
    """What the verdict line adds to its counts: records a side left out, groups whose config or data differ.
    A CI log may show the verdict line alone, and a pass on other code or another setting must not read as plain."""
    notes = [f"the {role} left records out: see Sides" for role, side in (("baseline", base), ("candidate", cand))
             if side.warnings()]
    changed = differing(rows)
    if changed:
        notes.append(f"{changed} group(s)' config or data differ: see below")
    return "".join(f"; {note}" for note in notes)


def refuse_out_among_records(args: argparse.Namespace) -> None:
    """UserError when ``--out`` is a ``.json`` file among the records of a side's folder
    (:func:`refuse_report_among_records`)."""
    folders = []
    for role in ("baseline", "candidate"):
        text = getattr(args, role)
        if text is None:  # absent from a command line argparse refused (harness.compare.refused.as_given)
            continue
        try:
            folder, _ = folder_and_name(text, args.results, role)
        except UserError:
            continue  # refused, with its reason, when the side is read
        if folder and Path(folder).is_dir():
            folders.append((f"the {role}'s folder {folder}", Path(folder)))
    refuse_report_among_records("--out", args.out, folders)


# How the record loader (and the page commands) end an error: true of them, not of compare with --out, which
# writes the error's report.
NOTHING_WRITTEN = "; nothing was written"


def claim_out(args: argparse.Namespace) -> None:
    """UserError, before anything is read, when ``--out`` may not take this comparison's report: a record or a
    user's file there is left as it is; a ``.json`` among a side's records is not written
    (:func:`refuse_out_among_records`), except that an earlier report of ours there, which every read of the folder
    already refuses as no record, is replaced by one of this refusal: it must not show an earlier verdict."""
    out = Path(args.out)
    refuse_foreign([out], "compare", head=HEAD)
    try:
        refuse_out_among_records(args)
    except UserError as exc:
        if not out.exists():
            raise
        write_atomic(out, error_report(args.baseline, args.candidate, exc))
        raise UserError(f"{exc}; the earlier compare report there now says so (CANNOT DECIDE): move it out of the "
                        "folder") from None


def report_error(args: argparse.Namespace, error: UserError) -> UserError:
    """Write ``--out``'s CANNOT DECIDE report of ``error`` (bad input); the error as the command then prints it."""
    error = UserError(str(error).removesuffix(NOTHING_WRITTEN))
    write_atomic(Path(args.out), error_report(args.baseline, args.candidate, error))
    return UserError(f"{error}; wrote {args.out}, a CANNOT DECIDE report")


def cmd_compare(args: argparse.Namespace) -> int:
    """0: every baseline group compared and held; 1: a regression or a missing group; 2: cannot decide."""
    if args.out:
        claim_out(args)
    # --out must not keep an earlier comparison's verdict: it gets a report of the error (bad input: 2; a crash: 1;
    # an interruption: 130).
    try:
        code, text, verdict = _gate(args)
    except UserError as exc:
        if not args.out:
            raise
        raise report_error(args, exc) from None
    except (Exception, KeyboardInterrupt) as exc:
        if args.out:
            write_atomic(Path(args.out), error_report(args.baseline, args.candidate, exc))
        raise
    if args.out:  # before the report is shown: a report whose file then fails must not have said PASS
        write_atomic(Path(args.out), text)
    print(text)
    if code == 2:
        raise UserError(verdict.split(": ", 1)[1] + " (see the report above)")
    return code
