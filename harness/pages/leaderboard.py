"""``harness leaderboard``: regenerate ``leaderboards/README.md`` and one page per domain from the records.

Only completed records count, and failed runs whose training diverged, as seeds whose metric is not finite
(``RunRecord.diverged``); runs are grouped on everything but the seed, and per group only the latest
version present is used. The output depends on the records only (sorted, no timestamps), so regenerating
from the same records gives byte-identical files. Files are replaced atomically under a lock. Under each table,
its rows' learning curves (:mod:`harness.pages.curves`, ``curves/<domain>-<dataset>.png``).

Beside the pages, ``records.txt`` lists the record files they were generated from: copying those files into an
empty folder and running ``harness leaderboard`` there gives the same pages, whatever other records a user has
added to the folder since (``tests/test_committed_leaderboards.py`` checks the committed pages this way). A
missing results folder, one without completed records, an unreadable record or bench file, or a file in the way
that no page command generated (:mod:`harness.pages.generated`) is an error that writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from filelock import FileLock

from domains.base import Domain
from domains.files import refuse_link, write_atomic
from harness.groups import Group, baseline_for, best, cell, completed_groups, domain_or_none
from harness.numbers import decimals
from harness.pages import bench, curves, generated
from harness.pages.tables import (
    CHANGE_TEST,
    DAGGER,
    MIXED,
    MIXED_WHY,
    NONE,
    OTHER_CODE,
    OTHER_DATA,
    PROTOCOL,
    UNCHECKED,
    change_marks,
    code_note,
    data_note,
    delta_cell,
    delta_header,
    device_cell,
    mean_cell,
    other_code,
    other_data,
    protocol_lines,
    protocol_marks,
    record_cell,
    reference_row,
    runtime_cell,
    setting_cell,
)
from harness.tables import Markup, code, escape, markdown

MARKER = generated.marker("leaderboard")
MANIFEST = "records.txt"
MANIFEST_HEAD = "# The completed records (files of the results folder) behind these pages; written by"
MIN_SEEDS = 3  # the seeds a row needs to be a dataset's "best" on the index
# Said only where a record's primary metric is null (NaN or infinite when it was measured): survivors alone
# would otherwise read as the whole run.
NONFINITE = ("**Non-finite seeds.** *k of n seeds; m non-finite*: m of the row's n seeds ran to completion with a "
             "NaN or infinite primary metric, or stopped when their training loss turned non-finite (diverged); its "
             "mean, std and Δ are over the k finite seeds, which flatters it. A row that diverged on every seed says "
             "so and is never the best.")


def domain_page(domain: str, groups: list[Group], results: Path, out: Path, figure: dict[str, str]) -> str:
    """The page of one domain; ``figure`` maps a dataset to its learning-curve figure (relative to ``out``)."""
    first = groups[0]
    direction = "higher" if first.higher_is_better else "lower"
    data = data_note(groups, any(other_data(g, baseline_for(g, groups)) for g in groups))
    codes = code_note(any(other_code(g, baseline_for(g, groups)) and g.values for g in groups))
    mixed = f" {MIXED} marks a row whose seeds come from {MIXED_WHY}." if any(g.mixed_code for g in groups) else ""
    lines = [
        MARKER, "", f"# Leaderboard: {escape(domain)}", "",
        f"Primary metric {code(first.primary_metric)} ({direction} is better): mean ± sample std over seeds "
        f"(n seeds). Bold: in each setting that two or more losses ran (the rows that compare losses, with one "
        f"method), the best mean among the rows none of whose seeds diverged and, where the setting has any, with at "
        f"least {MIN_SEEDS} seeds (a one-seed mean is no rival for a three-seed one). "
        f"Δ: change of the mean against the row of the baseline loss named in its header (the method's own where "
        f"it has one) with the same method and setting; {DAGGER} marks {CHANGE_TEST}. Setting: "
        "the preset (`harness list presets`) and its overrides, then the budget and model the run had. Runtime: the "
        "mean over seeds of a run's wall time (training and evaluation), on the device named beside it; record: "
        "the JSON record of the row's first seed. Rows marked *published* are numbers reported in papers, not our "
        f"runs; {PROTOCOL} marks a published number obtained under another protocol than ours, the difference under "
        f"the table, and {UNCHECKED} after its source one that we quote but could not check against that source "
        f"(the others were read in it, or in a quotation of it). Each row shows the records of the newest code that "
        f"ran it.{mixed}{' ' + data if data else ''}"
        f"{' ' + codes if codes else ''} Under each table, the learning curves of its rows.", "",
    ]
    if any(g.nonfinite for g in groups):
        lines += [NONFINITE, ""]
    dom = domain_or_none(domain)
    refs, metrics = (dom.references, dom.leaderboard_metrics) if dom is not None else ((), ())
    if metrics:
        lines += [f"Further columns: the mean over seeds of the secondary metrics "
                  f"{', '.join(f'`{m}`' for m in metrics)} where a run reports them.", ""]
    lines += objective_lines(dom, sorted({g.method for g in groups}))
    for dataset in sorted({g.dataset for g in groups}):
        rows = [g for g in groups if g.dataset == dataset]
        winners = setting_bests(rows)
        extra = [m for m in metrics if any(m in g.secondary for g in rows)]
        columns = ["method", "loss", "hyper-parameters", "setting", first.primary_metric, delta_header(rows), *extra,
                   "runtime", "device", "record"]
        cells = []
        for g in rows:
            value = f"**{escape(cell(g))}**" if id(g) in winners else escape(cell(g))
            value = Markup(value + marks(g))
            cells.append([g.method, g.loss_label(), g.hparams_label(), setting_cell(g, dom), value,
                          delta_cell(g, baseline_for(g, groups)), *(mean_cell(g.secondary.get(m)) for m in extra),
                          runtime_cell(g), device_cell(g), record_cell(g, results, out)])
        published = sorted((r for r in refs if r.dataset == dataset), key=lambda r: (r.source, r.label))
        protocols = protocol_marks(published)
        cells += [reference_row(ref, protocols, len(columns)) for ref in published]
        lines += [f"## {escape(dataset)}", "", *markdown(columns, cells), "", *protocol_lines(protocols)]
        note = dom.notes.get(dataset) if dom is not None else None
        if note:
            lines += [f"**Notes.** {' '.join(note.split())}", ""]
        if dataset in figure:
            lines += [f"![{generated.alt_text(f'learning curves of the {dataset} rows')}]({figure[dataset]})", ""]
    return "\n".join(lines)


def objective_lines(dom: Domain | None, methods: list[str]) -> list[str]:
    """The header's paragraph on each method whose objective has keys beyond the loss (``Domain.objective_keys``)."""
    lines = []
    for method in methods:
        keys = sorted(dom.objective_keys(method)) if dom is not None else []
        if keys:
            lines += [f"Objective: the config keys {', '.join(f'`{k}`' for k in keys)} of the method `{method}` "
                      "weight or shape its objective around the loss (a paper's table compares objectives, a loss "
                      "with its weights or its layout). They count as the loss's hyper-parameters: a row's setting "
                      "leaves them out, the row shows those its command set, and Δ is against the baseline loss's "
                      "row whose values of them differ in the fewest keys, then with the most seeds; a row of the "
                      "baseline loss whose values differ from its preset's, against the baseline loss's row with "
                      "the preset's values where one ran (its Δ is what its objective changes).", ""]
    return lines


def setting_bests(rows: list[Group]) -> set[int]:
    """The ids of the rows a domain's page sets in bold: in each setting that two or more losses ran, its best
    contender. A table's best across settings would compare a budget or a protocol, not losses (an ablation that
    one loss ran, another rho of a biased set)."""
    by_setting: dict[str, list[Group]] = {}
    for g in rows:
        if g.loss_used:
            by_setting.setdefault(g.setting, []).append(g)
    return {id(g) for same in by_setting.values() if len({g.loss for g in same}) > 1 for g in best(contenders(same))}


def finite(rows: list[Group]) -> list[Group]:
    """The rows with a finite mean: a row that diverged on every seed is never the best."""
    return [g for g in rows if g.values]


def sound(rows: list[Group]) -> list[Group]:
    """The rows none of whose seeds diverged: a mean over the seeds that survived is no rival for a whole row's."""
    return [g for g in finite(rows) if not g.nonfinite]


def contenders(rows: list[Group]) -> list[Group]:
    """The rows a table's best is chosen from: the sound ones with at least ``MIN_SEEDS`` seeds, or, where none
    has that many, every sound row."""
    whole = sound(rows)
    return [g for g in whole if g.n >= MIN_SEEDS] or whole


def comparisons(rows: list[Group]) -> list[Group]:
    """The rows a dataset's best is chosen from: those whose setting compares losses (two or more losses ran
    with the same method and setting) and the evaluation-only rows (a reference a loss must beat). A setting that
    only one loss ran, such as an evaluation-protocol ablation, compares nothing; it is left out where another
    setting compares losses, and counts where none does."""
    losses: dict[str, set[str]] = {}
    for g in rows:
        if g.loss_used:
            losses.setdefault(g.setting, set()).add(g.loss)
    chosen = [g for g in rows if not g.loss_used or len(losses[g.setting]) > 1]
    return chosen if any(g.loss_used for g in chosen) else rows


def index_page(groups: list[Group]) -> str:
    diverged, halted = sum(len(g.nonfinite) for g in groups), sum(len(g.halted) for g in groups)
    completed = sum(g.runs for g in groups) - halted
    if halted:  # "of them" would read as the completed runs only
        runs = (f"{completed} completed runs and {halted} whose training diverged ({diverged} non-finite in all: "
                "diverged, left out of the means)")
    else:
        runs = f"{completed} completed runs" + (
            f" ({diverged} of them non-finite: diverged, left out of the means)" if diverged else "")
    lines = [
        MARKER, "", "# Leaderboards", "",
        f"Generated by `harness leaderboard` from {runs}. For each domain and "
        f"dataset: the best loss (best mean of the primary metric over seeds, any method and setting, among the rows "
        f"with at least {MIN_SEEDS} seeds; where no row has {MIN_SEEDS}, the best row, marked *fewer than "
        f"{MIN_SEEDS} seeds*) and its gain over the baseline loss (the method's own where it has one, else the "
        "domain's) with the same method and setting (positive = better, whichever direction the metric improves). "
        "A setting that only one loss ran (an ablation, such as of the evaluation protocol) is not a candidate "
        "where another setting compares losses; it stays on its domain's page. Evaluation-only rows (no loss "
        "trained) are candidates: they are what a loss must beat.",
        "",
    ]
    if diverged:
        lines += [NONFINITE, ""]
    cells = []
    pairs: list[tuple[Group, Group]] = []  # each dataset's best row and the baseline its gain is against
    shown: list[Group] = []  # the best rows and their baselines
    for domain in sorted({g.domain for g in groups}):
        dom = domain_or_none(domain)
        for dataset in sorted({g.dataset for g in groups if g.domain == domain}):
            rows = comparisons([g for g in groups if g.domain == domain and g.dataset == dataset])
            cells.append(index_row(domain, dataset, rows, groups, dom))
            top, base = index_best(rows, groups)
            shown += [g for g in (top, base) if g is not None]
            if top is not None and base is not None and base.values and base is not top:
                pairs.append((top, base))
    data = data_note(shown, any(other_data(g, baseline_for(g, groups)) for g in shown))
    changes = "".join(change_marks(top, base) for top, base in pairs)  # what the gain cells carry
    legend = [f"{MIXED} after a mean marks a row whose seeds come from {MIXED_WHY}."
              if any(g.mixed_code for g in shown) else "",
              f"{DAGGER} after a gain marks {CHANGE_TEST}; a gain without it is within the seeds' noise, or "
              "untested." if DAGGER in changes else "",
              code_note(OTHER_CODE in changes), data]
    if any(legend):
        lines += [" ".join(x for x in legend if x), ""]
    columns = ["domain", "dataset", "metric", "best loss", "hyper-parameters", "method", "setting", "best",
               "baseline", "gain"]
    lines += [*markdown(columns, cells), ""]
    return "\n".join(lines)


def index_row(domain: str, dataset: str, rows: list[Group], groups: list[Group], dom: Domain | None) -> list[str]:
    """The index's row of one dataset: its best row among ``rows`` and the gain over that row's baseline, each
    marked as on the domain's page where it left seeds on other data out, the gain where the two read different
    data."""
    top, base = index_best(rows, groups)
    if top is None:
        seeds = sum(g.runs for g in rows)
        return [domain_link(domain), dataset, rows[0].primary_metric, *[NONE] * 4,
                f"no finite result (every row diverged: {seeds} seeds)", NONE, NONE]
    if base is None:
        baseline, gain = NONE, NONE
    else:
        baseline = f"{cell(base)}{marks(base)} ({base.loss})"
        gain = f"{top.sign * (top.mean - base.mean):+.{decimals(base.mean)}f}" if base.values else NONE
        gain += change_marks(top, base) if base.values and base is not top else ""
    few = "" if top.n >= MIN_SEEDS and not top.nonfinite else f", *fewer than {MIN_SEEDS} seeds*"
    mark = marks(top)
    return [domain_link(domain), dataset, top.primary_metric, top.loss_label(), top.hparams_label(),
            top.method, setting_cell(top, dom), Markup(escape(cell(top) + mark) + few), baseline, gain]


def marks(group: Group) -> str:
    """What a row's mean carries, on its domain's page and on the index: seeds of several commits, of other data."""
    return (MIXED if group.mixed_code else "") + (OTHER_DATA if group.mixed_data else "")


def index_best(rows: list[Group], groups: list[Group]) -> tuple[Group | None, Group | None]:
    """A dataset's best row among ``rows`` and its baseline (None where it has none); (None, None) where every row
    diverged."""
    if not finite(rows):
        return None, None
    top = best(contenders(rows) or finite(rows))[0]
    return top, baseline_for(top, groups)


def domain_link(domain: str) -> Markup:
    """The link to a domain's page; the name is a plain one (a record's ``domain`` names a file), so it is a safe
    link target as it is."""
    return Markup(f"[{escape(domain)}]({domain}.md)")


def manifest_text(paths: Iterable[Path]) -> str:
    names = sorted(path.name for path in paths)
    return "\n".join([MANIFEST_HEAD,
                      "# `harness leaderboard` (with failed runs whose training diverged, which the pages count). "
                      "Regenerate the pages from exactly these files to check them.",
                      *names, ""])


def write_leaderboards(results: Path, out: Path, bench_dir: Path, *, bench_named: bool = False) -> list[Path]:
    """Regenerate the pages, the list of their records and the learning curves, and ``bench.md`` from the bench
    files in ``bench_dir`` where there are any; remove generated pages of domains that no longer have records and
    the figures of datasets no longer drawn. UserError, before anything is written, when there is no completed
    record to show, a bench file cannot be read, ``bench_dir`` was named (``--bench``) and holds no bench file, or
    a file to replace is not one a page command generated, or a figure to draw or remove lies through a symbolic
    link (:func:`domains.files.refuse_link`)."""
    groups, files = completed_groups(results)
    benches = bench.read_benches(bench_dir, required=bench_named)
    domains = sorted({g.domain for g in groups})
    planned = curves.plan(groups)
    previous = curves.drawn_before(out, "leaderboard")
    pages = {domain: out / f"{domain}.md" for domain in domains}
    index, manifest = out / "README.md", out / MANIFEST
    generated.refuse_foreign([*pages.values(), index, *([out / bench.PAGE] if benches else [])], "leaderboard")
    generated.refuse_foreign([manifest], "leaderboard", head=MANIFEST_HEAD)
    generated.refuse_foreign([out / path for path, _ in planned.values()], "leaderboard", figures=previous)
    for figure in sorted({*(out / path for path, _ in planned.values()), *previous}):
        refuse_link(figure, out)  # a curves/ that is a link would take the figures drawn, and those removed, elsewhere
    # Every page is rendered before any file is written: a page that fails on its input writes nothing.
    texts = {}
    for domain, path in pages.items():
        figure = {dataset: p for (d, dataset), (p, _) in planned.items() if d == domain}
        texts[path] = domain_page(domain, [g for g in groups if g.domain == domain], results, out, figure)
    texts[index], texts[manifest] = index_page(groups), manifest_text(files)
    bench_text = bench.bench_page(benches) if benches else None
    out.mkdir(parents=True, exist_ok=True)
    written = []
    refuse_link(out / ".leaderboard.lock", out)  # a lock file that is a link could point anywhere
    with FileLock(str(out / ".leaderboard.lock")):
        drawn = curves.write_curves(planned, out)
        written += [out / path for path in drawn.values()]
        for path, text in texts.items():
            write_atomic(path, text)
            written.append(path)
        if bench_text is not None:
            written.append(bench.write_benches(benches, out, bench_text))
        # Removed last, once the pages that linked them are replaced: a run stopped midway breaks no link.
        # bench.md is rendered from the benchmark files, never removed here.
        kept = {index, out / "report.md", out / bench.PAGE}
        for stale in sorted(set(out.glob("*.md")) - set(written) - kept):
            if generated.starts_with(stale, MARKER):
                stale.unlink()
        generated.remove_stale(previous, set(written))
    return written


def cmd_leaderboard(results: str, out: str, bench_dir: str | None = None) -> int:
    """``bench_dir``: the ``--bench`` folder the user named, which must hold bench files; None for the default,
    ``OUT/bench``, where ``harness bench`` writes: often absent (no benchmark run yet), which is no error."""
    named = bench_dir is not None
    for path in write_leaderboards(Path(results), Path(out), Path(bench_dir) if named else Path(out) / "bench",
                                   bench_named=named):
        print(f"wrote {path}")
    return 0
