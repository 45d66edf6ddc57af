"""``harness compare``: regression tracking between two result sets, as a CI gate.

The sets are two results folders, or two ``contrastive-harness`` versions inside one folder (``--results``).
Runs are matched on everything but the version and the seed. A matched group *regressed* when the candidate's
mean primary metric is worse than the baseline's by more than the tolerance **and** the test over seeds
(Welch's t-test or Mann-Whitney U, two-sided) gives p < alpha; an *improvement* is the same in the better
direction. The exit status is 1 when anything regressed, 0 when nothing did, and 2 when there is nothing to
compare: a side without completed records, or no group matched (a gate that passes on nothing is a false green).
"""

from __future__ import annotations

import argparse
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

from scipy import stats

from domains.base import UserError, write_atomic
from harness.groups import Group, completed_groups, decimals, fmt, group_records
from harness.records import load_records
from harness.tables import markdown

TESTS = {
    "welch": "two-sided Welch t-test (scipy.stats.ttest_ind, equal_var=False)",
    "mannwhitney": "two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu)",
}


@dataclass
class Match:
    base: Group
    cand: Group
    p: float

    @property
    def change(self) -> float:
        return self.cand.mean - self.base.mean

    @property
    def gain(self) -> float:
        """The change in the better direction (positive = the candidate is better)."""
        return self.base.sign * self.change


def p_value(base: Group, cand: Group, test: str) -> float:
    """The test's p-value over the seeds of each side; NaN when either side has fewer than 2 seeds."""
    a, b = list(cand.values.values()), list(base.values.values())
    if min(len(a), len(b)) < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero variance: scipy warns and returns nan or 0
        if test == "welch":
            return float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def load_sides(args: argparse.Namespace) -> tuple[list[Group], list[Group]]:
    if args.results:
        records = load_records(Path(args.results))
        present = sorted({r.version for r in records})
        for version in (args.baseline, args.candidate):
            if version not in present:
                raise UserError(f"no completed records of version {version} in {args.results}; "
                                f"present: {', '.join(present) or 'none'}")
        return (group_records(records, version=args.baseline), group_records(records, version=args.candidate))
    for folder in (args.baseline, args.candidate):
        if not Path(folder).is_dir():
            raise UserError(f"'{folder}' is not a results folder; to compare two versions inside one folder "
                            "pass --results DIR --baseline VERSION --candidate VERSION")
    sides = []
    for name, folder in (("baseline", args.baseline), ("candidate", args.candidate)):
        # a gate that passes on nothing is a false green
        empty = f"the {name} '{folder}' has no completed records; nothing to compare"
        groups, _ = completed_groups(Path(folder), empty)
        sides.append(groups)
    return sides[0], sides[1]


COLUMNS = ["domain", "dataset", "method", "loss", "hyper-parameters", "metric", "baseline (n)", "candidate (n)",
           "change", "p"]


def _row(m: Match) -> list[str]:
    g, digits = m.base, decimals(m.base.mean)
    p = "–" if math.isnan(m.p) else f"{m.p:.3g}"
    return [g.domain, g.dataset, g.method, g.loss, g.hparams_label(),
            f"{g.primary_metric} ({'↑' if g.higher_is_better else '↓'})", f"{fmt(m.base.mean, digits)} ({m.base.n})",
            f"{fmt(m.cand.mean, digits)} ({m.cand.n})", f"{m.change:+.{digits}f}", p]


def report(args: argparse.Namespace, base: list[Group], cand: list[Group]) -> tuple[str, int, int]:
    """The markdown report, the number of regressions and the number of matched groups."""
    cand_by_key = {g.key: g for g in cand}
    base_keys = {g.key for g in base}
    matches = [Match(g, cand_by_key[g.key], p_value(g, cand_by_key[g.key], args.test))
               for g in base if g.key in cand_by_key]
    significant = [m for m in matches if m.p < args.alpha]
    regressions = [m for m in significant if m.gain < -args.tolerance]
    improvements = [m for m in significant if m.gain > args.tolerance]
    unchanged = [m for m in matches if m not in regressions and m not in improvements]
    lines = [
        f"# Comparison: baseline `{args.baseline}` vs candidate `{args.candidate}`", "",
        f"Rule: a group **regressed** when the candidate's mean primary metric is worse than the baseline's by more "
        f"than {args.tolerance:g} (the tolerance, in metric units) and a {TESTS[args.test]} over the seeds of each "
        f"side gives p < {args.alpha:g}; an **improvement** is the same in the better direction. Groups with fewer "
        "than 2 seeds on a side cannot be tested (p –) and never count as regressions. Groups are matched on "
        "domain, dataset, method, loss, hyper-parameters and config; not on version or seed. "
        "Change = candidate − baseline (↑ higher is better, ↓ lower is better).", "",
    ]
    for title, rows in (("Regressions", regressions), ("Improvements", improvements), ("Unchanged", unchanged)):
        lines += [f"## {title} ({len(rows)})", ""]
        lines += [*markdown(COLUMNS, map(_row, rows)), ""] if rows else ["none", ""]
    unmatched = [("baseline only", g) for g in base if g.key not in cand_by_key]
    unmatched += [("candidate only", g) for g in cand if g.key not in base_keys]
    lines += [f"## Unmatched ({len(unmatched)})", ""]
    if unmatched:
        lines += markdown(["side", "domain", "dataset", "method", "loss", "hyper-parameters"],
                          [[side, g.domain, g.dataset, g.method, g.loss, g.hparams_label()] for side, g in unmatched])
    else:
        lines.append("none")
    verdict = f"FAIL: {len(regressions)} regression(s)" if regressions else "PASS: no regression"
    lines += ["", f"**{verdict}** ({len(matches)} matched groups, {len(improvements)} improvement(s)).", ""]
    return "\n".join(lines), len(regressions), len(matches)


def cmd_compare(args: argparse.Namespace) -> int:
    """0: no regression; 1: a regression; 2 (UserError): a side without records, or no group matched."""
    base, cand = load_sides(args)
    text, n_regressions, n_matched = report(args, base, cand)
    print(text)
    if args.out:
        write_atomic(Path(args.out), text)
    if not n_matched:
        raise UserError(f"no group of the baseline matches one of the candidate ({len(base)} vs {len(cand)} groups, "
                        "see Unmatched above): they ran different settings, so nothing was compared")
    return 1 if n_regressions else 0
