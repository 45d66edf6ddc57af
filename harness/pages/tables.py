"""The cells of the leaderboard tables: what a row says beyond its mean (its change against the baseline, its
budget, its cost, where it ran, its records) and the published rows with their protocol notes.

Markdown itself is drawn by :func:`harness.tables.markdown`, the harness's one table renderer (the comparison
and the terminal tables use it too); this module only formats cells.
"""

from __future__ import annotations

import math
import os
import re
import statistics
import warnings
from collections.abc import Iterable
from pathlib import Path

from scipy import stats

from domains.base import Domain, Reference
from harness.groups import Group
from harness.numbers import decimals, fmt, mean_std
from harness.records import RunRecord
from harness.tables import Markup

ALPHA = 0.05
DAGGER = "†"
MIXED = "‡"
# Why seeds of several commits can share a row or value (MIXED), as every page that shows the mark says it.
MIXED_WHY = ("several commits: records written before the harness recorded a digest of its sources, pooled by "
             "package version, since their commits (often of edited trees) do not say whether the code a run "
             "executes differed; history.md splits them by commit")
OTHER_CODE = "‖"  # a change between rows of different code: the loss's and the code's
PROTOCOL = "§"
UNCHECKED = "(unchecked)"
OTHER_DATA = "¶"
NONE = "–"


def latest_by_seed(group: Group) -> dict[int, RunRecord]:
    """The record behind each seed of the row (a seed recorded twice: its latest record), by seed: of its finite
    seeds, or where every seed diverged, of those (what its runtime, device and record cells then describe)."""
    seeds = group.values or group.nonfinite
    out: dict[int, RunRecord] = {}
    for record in group.records:  # oldest first: a later record of a seed replaces an earlier one
        if record.seed in seeds:
            out[record.seed] = record
    return dict(sorted(out.items()))


def change_p(group: Group, base: Group) -> float:
    """Two-sided p-value of the change a row's Δ shows, the difference of the two rows' means: a paired t-test
    (scipy.stats.ttest_rel) where both rows ran the same seeds, else Welch's t-test (scipy.stats.ttest_ind,
    equal_var=False) over every seed of each (a test over the shared seeds alone could find a gain where Δ shows a
    drop); NaN, untested, where a row has fewer than 2 seeds."""
    a, b = group.values, base.values
    if len(a) < 2 or len(b) < 2:
        return math.nan
    with warnings.catch_warnings():  # seeds that all differ by the same amount: scipy warns on the page's terminal
        warnings.simplefilter("ignore", RuntimeWarning)
        if set(a) == set(b):
            result = stats.ttest_rel([a[s] for s in sorted(a)], [b[s] for s in sorted(a)])
        else:
            result = stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False)
    return float(result.pvalue)


# The legend of DAGGER, on the domain pages and the index.
CHANGE_TEST = (f"p < {ALPHA} in a two-sided t-test of that change: paired (scipy.stats.ttest_rel) where both rows "
               "ran the same seeds, else Welch's (scipy.stats.ttest_ind, equal_var=False); a row of one seed is not "
               "tested")


def other_data(group: Group, base: Group | None) -> bool:
    """Whether a row and its baseline read different data (their records' data fingerprints): a change between
    their means would be the data's as well as the loss's."""
    return base is not None and base is not group and group.data != base.data


def other_code(group: Group, base: Group | None) -> bool:
    """Whether a row and its baseline ran different code (each row shows its newest code's records): a change
    between their means would be the code's as well as the loss's. Only the parts of the code that both rows' records
    name count (:meth:`RunRecord.code_parts`): a plugin loss's own module is the loss whose change the row shows."""
    if base is None or base is group:
        return False
    mine, theirs = [r.code_parts() for r in group.records], [r.code_parts() for r in base.records]
    shared = set.intersection(*(set(p) for p in mine + theirs)) if mine + theirs else set()

    def codes(parts: list[dict[str, str]]) -> set[tuple[tuple[str, str], ...]]:
        return {tuple(sorted((k, p[k]) for k in shared)) for p in parts}

    return codes(mine) != codes(theirs)


def code_note(shown: bool) -> str:
    """The legend of :data:`OTHER_CODE`, where a page shows it."""
    return (f"{OTHER_CODE} after a change marks one between rows whose records name different code (other source "
            "digests, a plugin loss's own module aside; for records without one, other commits; history.md lists "
            "them): it may be the code's as well as the loss's." if shown else "")


def data_note(rows: Iterable[Group], deltas: bool) -> str:
    """The legend of :data:`OTHER_DATA` where a row of ``rows`` left seeds out, or (``deltas``) where a change is
    against a baseline that read other data; "" where neither (a page explains only the marks it shows)."""
    rows = list(rows)
    if not any(g.mixed_data for g in rows) and not deltas:
        return ""
    return (f"{OTHER_DATA} after a mean marks a row some of whose seeds read other data than its newest record "
            "(their records' data fingerprints differ: another data root, or another copy or version of the data "
            "set): the row keeps the seeds that read its newest record's data and leaves the others out of its "
            "mean, std and change, as `harness compare` and `harness history` refuse to average them. After a "
            f"change (Δ, gain), {OTHER_DATA} marks one against a baseline row that read other data: the change is "
            "the data's as well as the loss's.")


def delta_cell(group: Group, base: Group | None) -> str:
    if base is None:
        return NONE
    if group is base:
        return "baseline"
    if not (group.values and base.values):  # one of them diverged on every seed: no change to give
        return NONE
    digits = decimals(base.mean)
    change = group.mean - base.mean
    return f"{change:+.{digits}f}{change_marks(group, base)}"


def change_marks(group: Group, base: Group) -> str:
    """What a change between ``group`` and its baseline carries: significance, other code, other data."""
    return ((DAGGER if change_p(group, base) < ALPHA else "") + (OTHER_CODE if other_code(group, base) else "")
            + (OTHER_DATA if other_data(group, base) else ""))


def delta_header(rows: list[Group]) -> str:
    baselines = sorted({g.baseline_loss for g in rows if g.loss_used})
    return f"Δ vs {baselines[0]}" if len(baselines) == 1 else f"Δ vs baseline ({', '.join(baselines)})"


def setting_cell(group: Group, domain: Domain | None) -> str:
    """The preset and overrides, then the budget the domain names (epochs, steps, model); an evaluation-only row
    trained nothing, so no budget is named for it."""
    if domain is None or not group.loss_used:
        return group.setting_label()
    note = domain.setting_note(group.config, group.method, group.dataset)
    return f"{group.setting_label()}, {note}" if note else group.setting_label()


def mean_cell(values: dict[int, float] | None) -> str:
    return fmt(statistics.fmean(values.values())) if values else NONE


def duration(seconds: float) -> str:
    """Seconds as a reader counts them: "45 s", "12.5 min", "3.2 h"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def runtime_cell(group: Group) -> str:
    """The mean over seeds of a run's wall time (``timings.total_s``: training and evaluation)."""
    times = [r.timings["total_s"] for r in latest_by_seed(group).values() if "total_s" in r.timings]
    return duration(statistics.fmean(times)) if times else NONE


def device_label(record: RunRecord) -> str:
    """The kind of device a record ran on: "CPU", the GPU's name ("H200"), or NONE where the record does not say."""
    hw = record.hardware
    if str(hw.get("device", "")).startswith("cuda"):
        return str(hw.get("device_name") or "GPU").removeprefix("NVIDIA ")
    return "CPU" if hw.get("device") else NONE


def device_cell(group: Group) -> str:
    """Where the seeds ran (:func:`device_label`), with the largest peak GPU memory of a GPU's seeds where the
    records hold it (``hardware.peak_gpu_memory_gib``); several, comma-separated, where seeds differ."""
    names = []
    peak: dict[str, float] = {}
    for record in latest_by_seed(group).values():
        hw = record.hardware
        name = device_label(record)
        if str(hw.get("device", "")).startswith("cuda") and isinstance(hw.get("peak_gpu_memory_gib"), (int, float)):
            peak[name] = max(peak.get(name, 0.0), float(hw["peak_gpu_memory_gib"]))
        if name not in names:
            names.append(name)
    return ", ".join(f"{n} ({peak[n]:.1f} GiB peak)" if n in peak else n for n in names) or NONE


def record_cell(group: Group, results: Path, page_dir: Path) -> Markup:
    """A link, relative to the page, to the record of the row's first seed (the others differ in ``-s<seed>``)."""
    seed, record = next(iter(latest_by_seed(group).items()))
    target = Path(os.path.relpath(results / f"{record.run_id}.json", page_dir)).as_posix()
    if re.search(r"[\s()<>]", target):  # a space or a bracket would end a bare link target
        target = "<" + target.replace("<", "%3C").replace(">", "%3E") + ">"
    return Markup(f"[s{seed}]({target})")


def protocol_marks(refs: Iterable[Reference]) -> dict[str, str]:
    """A numbered mark (§1, §2, ...) per distinct protocol note among ``refs``, in order of appearance."""
    marks: dict[str, str] = {}
    for ref in refs:
        if ref.protocol and ref.protocol not in marks:
            marks[ref.protocol] = f"{PROTOCOL}{len(marks) + 1}"
    return marks


def reference_row(ref: Reference, marks: dict[str, str], width: int) -> list[str]:
    """A published row: its label (with its protocol mark), its source (``(unchecked)`` where the number was not
    checked against the source's text) and value; ``width`` cells in all."""
    label = f"{ref.label} {marks[ref.protocol]}" if ref.protocol else ref.label
    source = ref.source if ref.checked else f"{ref.source} {UNCHECKED}"
    value = fmt(ref.value) if ref.std is None else mean_std(ref.value, ref.std)
    cells: list[str] = [Markup("*published*"), label, NONE, source, value]
    return cells + [""] * (width - len(cells))


def protocol_lines(marks: dict[str, str]) -> list[str]:
    """The footnotes of a table's marks: how each published protocol differs from ours."""
    if not marks:
        return []
    notes = " ".join(f"{mark} {' '.join(note.split())}" for note, mark in marks.items())
    return [f"**Published under another protocol.** {notes}", ""]
