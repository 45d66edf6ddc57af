"""``harness prior``: the class-prior page (``leaderboards/prior.md``) from the records of the prior study.

The study runs infonce, and dcl, hcl and pucl at three settings of their class prior (DCL's and HCL's
``tau_plus``, PUCL's ``alpha``): the true prior of the data (``--set loss.tau_plus=<Σ p_c²>``), ``auto`` (estimated
during training, :mod:`losses.prior`) and the papers' default. The page shows how close ``auto`` comes to τ+ as
DCL defines it, the share of the negatives the loss saw that share the anchor's class (:func:`reference`: the
record's measured in-batch share, else its label prior ``details.label_prior``; both read only here, after
training), its error over training as a figure, what each setting gains over infonce with a paired test over the
seeds, and what the estimate costs. A record counts as the "label prior" setting (``true``) when its prior equals
the record's label prior; at C = 10 it and the default (0.1) coincide, and the page says so.

The records are read as runs by :mod:`harness.pages.prior_runs` and tabulated by :mod:`harness.pages.prior_tables`;
this module writes the page: its text, the figure of the estimate's error and the files.
"""

from __future__ import annotations

import re
from pathlib import Path

from filelock import FileLock

from domains.errors import UserError
from domains.files import refuse_link, write_atomic
from harness.pages import generated
from harness.pages.prior_runs import LOSSES, MEASURED, SYNTHETIC, Run, study_runs, task_label
from harness.pages.prior_tables import ALPHA, NOT_SHOWN_WORSE, cost_lines, estimation_lines, gain_lines
from harness.pages.tables import MIXED, MIXED_WHY, OTHER_DATA, data_note
from harness.records import load_records
from harness.tables import bullet, code, escape

MARKER = generated.marker("prior")
FIGURE = "prior_error.png"
NAME = re.compile(re.escape(FIGURE))  # the link to it in a page of ours
# Written by hand, like a domain's notes: what the records above show and our best explanation. It cites the
# records; it never replaces them. One markdown line per item.
FINDINGS = (
    "**What the project's records show** (written by hand about the records committed in `leaderboards/prior/`, "
    "like a domain's notes: on a page of other records it still speaks of those).", "",
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
    "C >= 4, and their own embeddings lose what class structure infonce's had (ARI 0.14 at C = 4 against 0.50). "
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
    "meets the goal, and 0.39-0.46 on text at C = 50 and on MUTAG, where it is about twice the share the loss saw "
    "and 25% off the label prior. Graph and "
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
            curves.setdefault(f"{task_label(run.task)} ({run.estimator})", []).append(
                [(epoch, run.relative_error(value)) for epoch, value in run.trajectory])
    return curves


def figure_lines(curves: dict[str, list[list[tuple[float, float]]]]) -> list[str]:
    """The link to the figure of ``curves`` (:func:`error_curves`) where there is one to draw; else a line that says
    why there is none (a link to a figure that is not written would show a broken image)."""
    if not curves:
        return ["No figure: no `auto` run on a synthetic set has estimates to draw.", ""]
    return [f"![relative error of the auto estimate over training]({FIGURE})", ""]


def legend(tables: list[str]) -> str:
    """What the marks in ``tables`` mean, as the leaderboard pages say it; "" where they show none (a page explains
    only the marks it shows)."""
    text = "\n".join(tables)
    code = (f"{MIXED} marks a value whose seeds come from {MIXED_WHY}, or a gain whose infonce runs do; each setting "
            "shows the records of the newest code that ran it." if MIXED in text else "")
    return " ".join(note for note in (code, data_note((), OTHER_DATA in text)) if note)


def write_prior_page(results: Path, out: Path) -> Path:
    """Write ``out/prior.md`` and its figure from the completed records in ``results``; UserError when there
    are none (a page built on nothing would look like a result)."""
    from harness.pages import figures

    # as the leaderboard pages: the completed records, and the failed runs whose training diverged
    records = [r for r in load_records(results, completed_only=False)
               if r.has_result and (r.loss == "infonce" or r.loss in LOSSES)]
    # A diverged run (its metric non-finite) has no gain to judge: it is counted on the page, not averaged.
    runs, diverged, left = study_runs(records)
    if not runs:
        raise UserError(f"no completed records of infonce, dcl, hcl or pucl with a finite metric in '{results}' "
                        f"({diverged} non-finite); nothing was written")
    synthetic = [r for r in runs if r.dataset in SYNTHETIC]
    curves = error_curves(synthetic)
    gains, verdicts = gain_lines(runs)
    good = sum(v.endswith((NOT_SHOWN_WORSE, ": better")) for v in verdicts)
    estimated, real = estimation_lines(runs, synthetic=True), estimation_lines(runs, synthetic=False)
    marked = legend([*estimated, *gains, *verdicts, *real])
    lines = [
        MARKER, "", "# The class prior from the data", "",
        "DCL and HCL need τ+, the chance that a random negative shares the anchor's class; PUCL its α. "
        "`--set loss.tau_plus=auto` (dcl, hcl) and `--set loss.alpha=auto` (pucl) estimate it during training, "
        "from the embeddings the training step computes anyway or from the last batch's scores "
        "(`loss.prior_estimator`, `loss.prior_every` epochs, smoothed with `loss.prior_momentum`); nothing "
        "reads a label. The labels' figures below are read from the records after training, for this page only.",
        "", f"Generated by `harness prior` from {len(runs)} completed records in the folder {code(results.name)}"
        + (f"; {diverged} more whose metric is non-finite (diverged) are left out" if diverged else "")
        + (f"; {left} more are left out: of older code than their setting's newest record, on other data than it "
           "read, a seed's earlier run, or of another preset or overrides than their task's newest record, or "
           "other hyper-parameters than their cell's newest record" if left else "") + "."
        + (f" {marked}" if marked else ""), "",
        *reference_lines(runs),
        "## Estimation on the controlled benchmark", "",
        "Synthetic sets with C classes, the label prior known. Goal: within 25% (relative) of the τ+ the loss saw "
        "at C ≤ 10, within a factor 2 at C = 50 (every run).", "",
        *estimated,
        *figure_lines(curves),
        "## Gain over infonce at three settings of the prior", "",
        "Mean over seeds of the paired difference to infonce in the domain's primary metric (positive = "
        f"better); † marks a paired t-test with p < {ALPHA}. The first column holds the runs at the label prior "
        "Σ p_c²; at C = 10 it equals the papers' default (0.1), so those two columns hold the same runs. On text it "
        "is not the τ+ the loss saw (the estimation table's measured share), and no run sets τ+ to that share.", "",
        *gains,
        (f"dcl with `auto` against dcl at the paper default: not worse (better, or within noise) on {good} of "
         f"{len(verdicts)} tasks (goal: at least 2/3, {'met' if 3 * good >= 2 * len(verdicts) else 'missed'}). "
         "Within noise is no evidence that the estimate helps: the paired tests are weak where the seeds vary much."
         if verdicts else "dcl with `auto` against dcl at the paper default: no task here has both, so the goal "
         "(not worse on at least 2/3 of the tasks) is not measured."),
        "",
        *[bullet(escape(v)) for v in verdicts], "",
        "## Cost", "", *cost_lines(runs), *FINDINGS, "",
        "## Real datasets", "",
        "The `auto` estimate beside the τ+ the loss saw and the prior the labels give (graph: the graph classes; "
        "vision: the digit classes; text books: the book each sentence comes from).", "",
        *real,
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
    page = write_prior_page(Path(results), Path(out))
    for path in [page, *sorted(generated.shown_figures(page, "prior", NAME))]:  # as leaderboard lists its files
        print(f"wrote {path}")
    return 0
