"""``harness prior``: the class-prior page (``leaderboards/prior.md``) from the records of the prior study.

The study runs infonce, and dcl, hcl and pucl at three settings of their class prior (DCL's and HCL's
``tau_plus``, PUCL's ``alpha``): the true prior of the data (``--set loss.tau_plus=<Σ p_c²>``), ``auto`` (estimated
during training, :mod:`losses.prior`) and the papers' default. The page shows how close ``auto`` comes to τ+ as
DCL defines it, the share of the negatives the loss saw that share the anchor's class (:func:`reference`: the
record's measured in-batch share, else its label prior ``details.label_prior``; both read only here, after
training), its error over training as a figure, what each setting gains over infonce with a paired test over the
seeds, and what the estimate costs. A record counts as the "label prior" setting (``true``) when its prior equals
the record's label prior; at C = 10 it and the default (0.1) coincide, and the page says so.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock
from scipy import stats

from domains.base import UserError, refuse_link, write_atomic
from harness import tables
from harness.pages import generated
from harness.records import RunRecord, load_records

MARKER = generated.marker("prior")
FIGURE = "prior_error.png"
NAME = re.compile(re.escape(FIGURE))  # the link to it in a page of ours
ALPHA = 0.05
SYNTHETIC = ("synthetic-motifs", "synthetic-topics", "digits", "biased-digits")
LOSSES = ("dcl", "hcl", "pucl")
# Written by hand, like a domain's notes: what the records above show and our best explanation. It cites the
# records; it never replaces them. One markdown line per item.
FINDINGS = (
    "**What the records show.**", "",
    "- **The clustering estimate (`kmeans`) is as good as the class structure of the embeddings it reads.** Each "
    "evaluation records that structure (`details.class_structure`, `losses.prior.class_structure`): the silhouette "
    "of the class partition and the adjusted Rand index (ARI) of a Ward cut into C clusters with the classes (the "
    "two columns of the estimation tables).",
    "- **Vision digits (SimCLR, 30 epochs):** the classes are the clusters (ARI 0.68-1.00). With dcl and pucl, "
    "`auto` lands within 12% of the true prior on average at C = 2, 4 and 10 (every run within 25%). With hcl it "
    "reads 36-47% below it: HCL's hardness weighting (β = 1) pushes the nearest members of a class apart, and the "
    "silhouette then prefers sub-clusters (mostly 3 to 8 clusters at C = 2, the curves' `prior_clusters`), "
    "although a cut into C clusters still finds the classes (ARI 0.71-0.97). So the estimate depends on the loss that "
    "shapes the embeddings, and the table has a row per loss. The digits are too easy to rank the settings: every "
    "one is within a point of infonce (accuracy near 100% at C = 2 and 4). The digits have 10 classes, so vision "
    "has no C = 50.",
    "- **Graph synthetic set:** the classes are not clusters at any C, in infonce's embeddings as much as in the "
    "`auto` runs' (silhouette at or below 0, ARI 0.00-0.02). The silhouette picks 2 clusters and `auto` reads "
    "about 0.5, so C = 2 meets the goal by coincidence, not by finding the classes. By hand, on one seed outside "
    "these records, the 2-way split follows the graph's size (correlation 0.74 with the node count, also after "
    "the 20 epochs of `paper`), while an SVM reads the class at 86%: the class lives in a direction the clusters "
    "do not follow.",
    "- **Text synthetic set:** quick-thought's batches are consecutive sentences, so the share of same-topic "
    "negatives the loss saw (`info.negative_same_topic_fraction`, the τ+ it is judged against) is 0.62, 0.42, "
    "0.28 and 0.24 at C = 2, 4, 10 and 50, not Σ p_c² = 1/C. The classes are clusters at C = 2 (ARI 0.76 in "
    "infonce's embeddings), weakly at C = 4 (0.50) and hardly at C = 10 (0.21), and the clustering estimate reads "
    "about 0.5 at every C: 14-39% below the share at C = 2 (hcl meets the goal, 18-19% below in every run; dcl and "
    "pucl miss it), 0-70% above at C = 4, 1.2-2.2 times it at C = 10 and 1.9-2.7 times at C = 50. Judged against "
    "the label prior, C = 2 met the goal (dcl within 8%): 0.5 is 1/2, not the share the loss faces. A wrong τ+ "
    "then feeds back: near 0.5 it empties DCL's negative term, dcl and pucl with `auto` lose 22-39 points at "
    "C >= 4, and their own embeddings lose what class structure infonce's had (ARI 0.17 at C = 4 against 0.50). "
    "Even the label prior makes dcl worse than infonce there; no run sets τ+ to the measured share yet.",
    "- **Real datasets (last table):** on the six TU sets the classes are not the clusters either (ARI 0.00-0.24, "
    "in infonce's embeddings too) and `auto` is 7-79% off the label prior; DD's 7% is the 2-cluster coincidence "
    "again (ARI 0.01). On the books the label prior (0.22: 15 books of unequal length) is not what DCL faces: "
    "a batch lies inside one book, so 98% of its negatives share the anchor's book, and `auto` reads 0.47-0.61, "
    "neither (38-52% below the share the loss saw). MNIST, with the small encoder for 3 epochs on the CPU "
    "(top-1 95-96%), is still only weakly "
    "clustered by class (class silhouette 0.09, ARI 0.31; infonce's 0.26), and `auto` reads 0.27 against 0.10.",
    "- **The silhouette does not say when to trust the estimate.** The curves now keep the silhouette of the "
    "chosen clusters (`prior_silhouette`): it is 0.28-0.30 on the digits at C = 10 with pucl, where `auto` "
    "meets the goal, and 0.39-0.46 on text at C = 50 and on MUTAG, where it is 25 times and 25% off. Graph and "
    "text embeddings have clear clusters; they are not the classes. So neither a threshold on it nor a warning "
    "from it is offered.",
    "- **The second estimator, `pu`** (Best Bin Estimation on the last batch's scores), misses everywhere, in the "
    "directions its assumptions predict (`losses/prior.py`): about half the true prior on the digits, whose "
    "positives are augmented views of one image (more alike than two members of a class), and 0.93-0.98 on "
    "text, whose positives (neighbouring sentences) are a fair sample of the topic but whose positive and "
    "negative scores overlap everywhere.",
    "- **dcl `auto` against the default:** on graphs it stays within noise of the default although its τ+ is "
    "wrong, but the SVM's fold noise makes these paired tests weak (p of 0.4-0.5 for differences of 1-2 "
    "points), so \"within noise\" there is no evidence that the estimate helps. It is worse on the four text "
    "tasks and on the digits at C = 10.",
    "- **Cost:** the first estimate of a run also imports the clustering libraries. The later estimates cost "
    "1.5% of a graph run, 0.8% of a text run and 4.2% of a vision run; with the first, graph's mean share "
    "(5.6%) is above the goal on its 10-second quick runs. The runs shared a 2-core machine with up to "
    "four others; `loss.prior_every` lowers the cost.",
    "- **Our conclusion:** no estimate that reads only the representation can find classes the representation "
    "does not cluster by; what would help here is a better representation (longer training, the papers' "
    "presets on a GPU), not another cluster criterion. Not run: the longer presets, REDDIT-BINARY, and `pu` "
    "with hcl and pucl.",
)

AUTO_DEFAULT = "auto (kmeans)"  # the default estimator's column: the one the goal is judged on
MEASURED, LABEL_PRIOR = "measured", "label prior"  # where a record's reference τ+ comes from
# The record's measured share of same-class negatives: graph and vision count it as they train
# (losses.prior.SameClassShare), text from its fixed batches (domains.text.quickthought); older records lack it.
SHARE_KEYS = ("negative_same_class_fraction", "negative_same_topic_fraction")


@dataclass
class Run:
    """What the page needs of one completed record."""

    domain: str
    dataset: str
    classes: int | None
    loss: str
    settings: tuple[str, ...]  # ("baseline",) for infonce; "true", "auto", "default" (both of the first and last
    # where the label prior equals the default), or () for another value
    estimator: str | None
    seed: int
    value: float
    higher_is_better: bool
    label_prior: float | None
    estimate: float | None  # the final smoothed estimate of an auto run
    measured_share: float | None  # the measured share of the negatives that share the anchor's class
    class_structure: dict[str, float] | None  # the evaluation's class silhouette and ARI (losses.prior.class_structure)
    trajectory: list[tuple[float, float]] = field(default_factory=list)  # (epoch, smoothed estimate)
    estimate_seconds: list[float] = field(default_factory=list)  # each estimate's cost, in the curve's order
    total_seconds: float = 0.0

    @property
    def prior_seconds(self) -> float:
        return sum(self.estimate_seconds)

    @property
    def task(self) -> tuple[str, str, int | None]:
        return (self.domain, self.dataset, self.classes)

    @property
    def reference(self) -> float | None:
        """τ+ as DCL defines it, the share of the negatives the loss saw that share the anchor's class: the
        measured in-batch share where the record holds one, else the label prior (its expectation under
        uniformly drawn batches)."""
        return self.measured_share if self.measured_share is not None else self.label_prior

    @property
    def reference_source(self) -> str:
        return MEASURED if self.measured_share is not None else LABEL_PRIOR

    def relative_error(self, value: float) -> float:
        return abs(value - self.reference) / self.reference


def classify(record: RunRecord) -> tuple[tuple[str, ...], str | None]:
    """(settings, estimator) of a record: its loss's prior against the label prior and the paper default."""
    import losses

    if record.loss == "infonce":
        return ("baseline",), None
    prior = losses.spec(record.loss).prior_hparam if record.loss in losses.available() else None
    if prior is None:
        return (), None
    value = record.loss_params.get(prior.name)
    if value == "auto":
        return ("auto",), record.loss_params.get("prior_estimator")
    label_prior = record.details.get("label_prior")
    settings = []
    if label_prior is not None and math.isclose(float(value), float(label_prior), rel_tol=1e-3):
        settings.append("true")
    if math.isclose(float(value), prior.default):
        settings.append("default")
    return tuple(settings), None


def to_run(record: RunRecord) -> Run:
    settings, estimator = classify(record)
    details = record.details
    prior = record.info.get("prior") or {}
    trajectory = [(float(p["epoch"]), float(p["prior"])) for p in record.curve if "prior" in p]
    return Run(domain=record.domain, dataset=record.dataset, classes=details.get("label_classes"),
               loss=record.loss, settings=settings, estimator=estimator, seed=record.seed,
               value=float(record.metrics[record.primary_metric]),
               higher_is_better=record.higher_is_better, label_prior=details.get("label_prior"),
               estimate=prior.get("final"),
               measured_share=next((record.info[k] for k in SHARE_KEYS if record.info.get(k) is not None), None),
               class_structure=details.get("class_structure"),
               trajectory=trajectory,
               estimate_seconds=[float(p["prior_seconds"]) for p in record.curve if "prior_seconds" in p],
               total_seconds=record.timings.get("total_s", 0.0))


def _mean_std(values: list[float], digits: int = 3) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _one_or_spread(values: list[float], digits: int = 4) -> str:
    """One value where the runs agree (a label prior; text's fixed batches), else their mean ± std."""
    return f"{values[0]:.{digits}f}" if values and len(set(values)) == 1 else _mean_std(values, digits)


def _task_label(task: tuple[str, str, int | None]) -> str:
    domain, dataset, classes = task
    return f"{domain} / {dataset}" + (f" / C={classes}" if classes is not None else "")


def _structure(runs: list[Run]) -> str:
    """The mean class silhouette and ARI of the runs that recorded them (losses.prior.class_structure)."""
    measured = [r.class_structure for r in runs if r.class_structure]
    if not measured:
        return "–"
    return (f"{statistics.fmean(m['class_silhouette'] for m in measured):.2f} / "
            f"{statistics.fmean(m['class_ari'] for m in measured):.2f} (n={len(measured)})")


def _reference_cell(runs: list[Run]) -> str:
    """The mean reference τ+ of ``runs`` and where it comes from (measured, label prior, or how many of each)."""
    sources = [r.reference_source for r in runs]
    kinds = sorted(set(sources))
    where = kinds[0] if len(kinds) == 1 else ", ".join(f"{sources.count(k)} {k}" for k in kinds)
    return f"{statistics.fmean(r.reference for r in runs):.4f} ({where})"


def estimation_lines(runs: list[Run], synthetic: bool) -> list[str]:
    """Per task, loss and estimator: the label prior, the measured share of same-class negatives where the
    records hold it, the reference τ+ each run is judged against (:attr:`Run.reference`), the final auto
    estimate over runs, its mean relative error to each run's reference, and for the synthetic sets whether it
    meets the goal (25% at C ≤ 10, a factor 2 above; every run). Two columns say whether the classes are the
    clusters of the evaluation's embeddings (silhouette of the class partition, and the adjusted Rand index of a
    cut into C clusters with the classes), in the auto runs and in infonce's of the same task (a representation no
    estimate has steered), where the records have it. A row per loss too: the loss shapes the embeddings the
    estimate reads (HCL's hardness weighting, and the estimate itself, feed back)."""
    cells: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if "auto" in run.settings and run.estimate is not None and run.reference is not None \
                and (run.dataset in SYNTHETIC) == synthetic:
            cells[(run.task, run.loss, run.estimator)].append(run)
    if not cells:
        return ["No `auto` run has records here yet.", ""]
    rows = []
    for (task, loss, estimator), members in sorted(
            cells.items(), key=lambda kv: (kv[0][0][0], kv[0][0][1], kv[0][0][2] or 0, kv[0][1], kv[0][2] or "")):
        errors = [r.relative_error(r.estimate) for r in members]
        labelled = [r.label_prior for r in members if r.label_prior is not None]
        row = [_task_label(task), loss, estimator, len(members), _one_or_spread(labelled),
               _one_or_spread([r.measured_share for r in members if r.measured_share is not None]),
               _reference_cell(members), _mean_std([r.estimate for r in members], 4),
               f"{statistics.fmean(errors):.0%}"]
        baseline = [r for r in runs if r.loss == "infonce" and r.task == task]
        row += [_structure(members), _structure(baseline)]
        if synthetic:
            classes = task[2] or 0
            ratio = max(max(r.estimate / r.reference, r.reference / r.estimate) for r in members)
            met = max(errors) <= 0.25 if classes <= 10 else ratio <= 2.0
            row.append(f"{'met' if met else 'missed'} ({'≤ 25%' if classes <= 10 else 'within ×2'}, every run)")
        rows.append(row)
    columns = ["task", "loss", "estimator", "runs", "label prior", "measured same-class share of the negatives",
               "τ+ the loss saw (from)", "auto estimate (final)", "mean relative error to τ+",
               "classes as clusters (silhouette / ARI): these runs", "in infonce's embeddings"]
    return [*tables.markdown(columns + (["goal"] if synthetic else []), rows), ""]


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[list[float], float]:
    """The per-seed differences a − b over the seeds both have, and the paired t-test's p-value."""
    seeds = sorted(set(a) & set(b))
    diffs = [a[s] - b[s] for s in seeds]
    p = float(stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds]).pvalue) if len(seeds) > 1 else math.nan
    return diffs, p


def by_seed(runs: list[Run]) -> dict[int, float]:
    return {r.seed: r.value for r in runs}


def gain_lines(runs: list[Run]) -> tuple[list[str], list[str]]:
    """The gains over infonce per task, loss and setting; and the verdict lines of dcl auto against dcl at the
    paper default (at least as good within noise: not worse by a paired t-test at ALPHA)."""
    table = defaultdict(list)
    for run in runs:
        for setting in run.settings:
            table[(run.task, run.loss, f"auto ({run.estimator})" if setting == "auto" else setting)].append(run)
    tasks = sorted({r.task for r in runs if r.dataset in SYNTHETIC}, key=lambda t: (t[0], t[1], t[2] or 0))
    autos = sorted({key[2] for key in table if key[2].startswith("auto")}, key=lambda a: a != AUTO_DEFAULT)
    columns = ["true", *autos, "default"]
    rows: list[list[str]] = []
    verdicts: list[str] = []
    for task in tasks:
        base = by_seed(table.get((task, "infonce", "baseline"), []))
        if not base:
            continue
        for loss in LOSSES:
            cells = []
            for setting in columns:
                members = table.get((task, loss, setting), [])
                if not members:
                    cells.append("not run")
                    continue
                diffs, p = paired(by_seed(members), base)
                sign = 1.0 if members[0].higher_is_better else -1.0
                mark = "†" if p < ALPHA else ""
                cells.append(f"{sign * statistics.fmean(diffs):+.2f}{mark} (n={len(diffs)})" if diffs else "–")
            if set(cells) != {"not run"}:
                rows.append([_task_label(task), loss, *cells])
        auto = by_seed(table.get((task, "dcl", AUTO_DEFAULT), []))
        default = by_seed(table.get((task, "dcl", "default"), []))
        if len(set(auto) & set(default)) >= 2:
            diffs, p = paired(auto, default)
            better = statistics.fmean(diffs) >= 0 or not p < ALPHA
            verdicts.append(f"{_task_label(task)}: dcl auto − dcl default = {statistics.fmean(diffs):+.2f} over "
                            f"{len(diffs)} seeds (paired t-test p = {p:.3g}): "
                            f"{'as good or better, within noise' if better else 'worse'}")
    if not rows:
        return ["No synthetic task has records of infonce and a debiased loss yet.", ""], verdicts
    headers = [f"Δ at {'the label prior' if c == 'true' else c + ' prior'}" for c in columns]
    return [*tables.markdown(["task", "loss", *headers], rows), ""], verdicts


def cost_lines(runs: list[Run]) -> list[str]:
    """The estimate's share of a run's time over every ``auto`` run, then per domain: the estimates a run
    takes, the seconds of one, and the share (the sum of the curve's ``prior_seconds`` over ``timings.total_s``).
    A run's first estimate is shown apart, and so is the share without it: it also imports the clustering
    libraries, a cost paid once per process that dominates the share of a short run."""
    auto = [r for r in runs if "auto" in r.settings and r.total_seconds > 0]
    if not auto:
        return ["No `auto` run has records here yet.", ""]
    shares = [r.prior_seconds / r.total_seconds for r in auto]
    rows = []
    for domain in sorted({r.domain for r in auto}):
        members = [r for r in auto if r.domain == domain]
        estimates = [len(r.trajectory) for r in members]
        share = [r.prior_seconds / r.total_seconds for r in members]
        later = [s for r in members for s in r.estimate_seconds[1:]]
        rows.append([domain, len(members), f"{statistics.fmean(estimates):.0f}",
                     f"{sum(r.prior_seconds for r in members) / max(sum(estimates), 1):.3f}",
                     f"{statistics.fmean(r.estimate_seconds[0] for r in members if r.estimate_seconds):.3f}",
                     f"{statistics.fmean(later):.3f}" if later else "–",
                     f"{statistics.fmean(r.total_seconds for r in members):.1f}",
                     f"{statistics.fmean(share):.1%}", f"{max(share):.1%}",
                     f"{statistics.fmean(sum(r.estimate_seconds[1:]) / r.total_seconds for r in members):.1%}"])
    return [f"The estimates cost {statistics.fmean(shares):.1%} of a run's time on average (at most "
            f"{max(shares):.1%}) over the {len(auto)} `auto` runs (the sum of the curve's `prior_seconds` over the "
            "record's `timings.total_s`); goal ≤ 5%. A run's first estimate also imports scipy's hierarchical "
            "clustering and scikit-learn, once per process (the evaluation's class-structure diagnostic imports "
            "most of them anyway), so it is shown apart, with the share of the later estimates alone.", "",
            *tables.markdown(["domain", "auto runs", "estimates a run", "seconds an estimate", "the first",
                              "each later", "seconds a run", "mean share", "largest share",
                              "mean share of the later ones"], rows), ""]


def reference_lines(runs: list[Run]) -> list[str]:
    """What every estimate is judged against (:attr:`Run.reference`), why the label prior stands in for it under
    uniform batches, and how many ``auto`` runs used each."""
    auto = [r for r in runs if "auto" in r.settings and r.reference is not None]
    measured = sum(r.reference_source == MEASURED for r in auto)
    return [
        "## What an estimate is judged against", "",
        "DCL (Chuang et al., NeurIPS 2020, Sec. 3) writes the distribution the negatives are drawn from as "
        "p(x') = τ+ p+(x') + τ− p−(x'): τ+ is the chance that a negative, drawn as the loss draws it, has the "
        "anchor's class (one value for every class, ρ(c) = τ+). Every estimate on this page is judged against that "
        "share, per run (the column \"τ+ the loss saw\" says which):", "",
        "- **measured**: the share of the negatives the loss saw, over every batch of the run, that have the "
        "anchor's class (`info.negative_same_class_fraction`, counted on the device as graph and vision train, "
        "`losses.prior.SameClassShare`; `info.negative_same_topic_fraction`, text's fixed batches).",
        "- **label prior**, where a record holds no measured share (graph and vision records written before they "
        "counted it): `details.label_prior` = Σ_c p_c², p_c the share of class c among the N pretraining samples. "
        "Under batches drawn uniformly without replacement an anchor of class c meets a same-class negative with "
        "chance (N p_c − 1)/(N − 1), so the expected share over anchors is (N Σ_c p_c² − 1)/(N − 1) = Σ_c p_c² − "
        "(1 − Σ_c p_c²)/(N − 1): the label prior up to O(1/N), DCL's τ+ = 1/C for C balanced classes, and, for "
        "unequal classes, the mean over anchors of ρ(c) = p_c.",
        "", "The two differ where batches are not uniform: text's batches are consecutive sentences (same-topic "
        "negatives far above Σ p_c²), and graph's node anchors weigh each graph by its node count. "
        f"Of the {len(auto)} `auto` runs here, {measured} are judged against a measured share and "
        f"{len(auto) - measured} against the label prior.", "",
    ]


def error_curves(synthetic: list[Run]) -> dict[str, list[list[tuple[float, float]]]]:
    """The figure's lines: per synthetic task and estimator, each ``auto`` run's relative error by epoch."""
    curves: dict[str, list[list[tuple[float, float]]]] = {}
    for run in synthetic:
        if run.trajectory and run.reference:
            curves.setdefault(f"{_task_label(run.task)} ({run.estimator})", []).append(
                [(epoch, run.relative_error(value)) for epoch, value in run.trajectory])
    return curves


def figure_lines(curves: dict[str, list[list[tuple[float, float]]]]) -> list[str]:
    """The link to the figure of ``curves`` (:func:`error_curves`) where there is one to draw; else a line that says
    why there is none (a link to a figure that is not written would show a broken image)."""
    if not curves:
        return ["No figure: no `auto` run on a synthetic set has estimates to draw.", ""]
    return [f"![relative error of the auto estimate over training]({FIGURE})", ""]


def write_prior_page(results: Path, out: Path) -> Path:
    """Write ``out/prior.md`` and its figure from the completed records in ``results``; UserError when there
    are none (a page built on nothing would look like a result)."""
    from harness.pages import figures

    records = [r for r in load_records(results) if r.loss == "infonce" or r.loss in LOSSES]
    # A diverged run (its metric non-finite) has no gain to judge: it is counted on the page, not averaged.
    runs = [to_run(r) for r in records if r.metrics.get(r.primary_metric) is not None]
    diverged = len(records) - len(runs)
    if not runs:
        raise UserError(f"no completed records of infonce, dcl, hcl or pucl with a finite metric in '{results}' "
                        f"({diverged} non-finite); nothing was written")
    synthetic = [r for r in runs if r.dataset in SYNTHETIC]
    curves = error_curves(synthetic)
    gains, verdicts = gain_lines(runs)
    good = sum("as good" in v for v in verdicts)
    lines = [
        MARKER, "", "# The class prior from the data", "",
        "DCL and HCL need τ+, the chance that a random negative shares the anchor's class; PUCL its α. "
        "`--set loss.tau_plus=auto` (dcl, hcl) and `--set loss.alpha=auto` (pucl) estimate it during training, "
        "from the embeddings the training step computes anyway or from the last batch's scores "
        "(`loss.prior_estimator`, `loss.prior_every` epochs, smoothed with `loss.prior_momentum`); nothing "
        "reads a label. The labels' figures below are read from the records after training, for this page only.",
        "", f"Generated by `harness prior` from {len(runs)} completed records in the folder `{results.name}`"
        + (f"; {diverged} more whose metric is non-finite (diverged) are left out." if diverged else "."), "",
        *reference_lines(runs),
        "## Estimation on the controlled benchmark", "",
        "Synthetic sets with C classes, the label prior known. Goal: within 25% (relative) of the τ+ the loss saw "
        "at C ≤ 10, within a factor 2 at C = 50 (every run).", "",
        *estimation_lines(runs, synthetic=True),
        *figure_lines(curves),
        "## Gain over infonce at three settings of the prior", "",
        "Mean over seeds of the paired difference to infonce in the domain's primary metric (positive = "
        f"better); † marks a paired t-test with p < {ALPHA}. The first column holds the runs at the label prior "
        "Σ p_c²; at C = 10 it equals the papers' default (0.1), so those two columns hold the same runs. On text it "
        "is not the τ+ the loss saw (the estimation table's measured share), and no run sets τ+ to that share.", "",
        *gains,
        f"dcl with `auto` against dcl at the paper default: as good or better, within noise, on {good} of "
        f"{len(verdicts)} tasks (goal: at least 2/3).", "",
        *[f"- {v}" for v in verdicts], "",
        "## Cost", "", *cost_lines(runs), *FINDINGS, "",
        "## Real datasets", "",
        "The `auto` estimate beside the τ+ the loss saw and the prior the labels give (graph: the graph classes; "
        "vision: the digit classes; text books: the book each sentence comes from).", "",
        *estimation_lines(runs, synthetic=False),
    ]
    path, figure = out / "prior.md", out / FIGURE
    previous = generated.shown_figures(path, "prior", NAME)
    generated.refuse_foreign([path], "prior")
    generated.refuse_foreign([figure] if curves else [], "prior", figures=previous)
    out.mkdir(parents=True, exist_ok=True)
    refuse_link(out / ".prior.lock", out)  # a lock file that is a link could point anywhere
    with FileLock(str(out / ".prior.lock")):
        if curves:
            figures.error_curves(curves, figure)
        write_atomic(path, "\n".join(lines))
        generated.remove_stale(previous, {figure} if curves else set())  # once no page shows them
    return path


def cmd_prior(results: str, out: str) -> int:
    print(f"wrote {write_prior_page(Path(results), Path(out))}")
    return 0
