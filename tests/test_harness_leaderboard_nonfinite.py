"""Seeds whose primary metric was NaN or infinite (a diverged run: the record holds null) on the leaderboard and in
the report: they are counted and named, a row that diverged on every seed is shown and never the best, and a
folder holding nothing else says so."""

from __future__ import annotations

import statistics

import tiny_domain  # noqa: F401  (registers the tiny domain)
from tiny_domain import synthetic_record, write_records

from harness.cli import main


def _run(command: str, results, out) -> int:
    return main([command, "--results", str(results), "--out", str(out)])


def _row(page: str, *cells: str) -> str:
    """The table line of ``page`` that starts with ``cells``."""
    start = "| " + " | ".join(cells) + " |"
    return next(line for line in page.splitlines() if line.startswith(start))


def test_a_row_with_non_finite_seeds_says_how_many_ran(tmp_path):
    r = synthetic_record
    records = [r("infonce", s, v) for s, v in enumerate([80.0, 82.0, 81.0])]
    records += [r("dcl", 0, 92.2, loss_params={"tau_plus": 0.1}),
                *(r("dcl", s, None, loss_params={"tau_plus": 0.1}) for s in (1, 2))]
    write_records(tmp_path / "results", records)
    assert _run("leaderboard", tmp_path / "results", tmp_path / "lb") == 0
    page = (tmp_path / "lb" / "tiny.md").read_text()
    dcl = _row(page, "linear", "dcl")
    assert "92.20 ± – (1 of 3 seeds; 2 non-finite)" in dcl
    # the one seed that survived is no rival for infonce's three: the bold is infonce's
    assert "**" not in dcl and "**81.00 ± 1.00 (3 seeds)**" in _row(page, "linear", "infonce")
    assert "non-finite" in page.split("## blobs")[0]  # the legend says what the mark means
    index = (tmp_path / "lb" / "README.md").read_text()
    assert "from 6 completed runs (2 of them non-finite" in index
    # dcl has one finite seed, fewer than the index's three: infonce is the best row there.
    assert "| infonce |" in _row(index, "[tiny](tiny.md)", "blobs")


def test_a_row_that_diverged_on_every_seed_is_shown_and_never_best(tmp_path):
    r = synthetic_record
    records = [r("infonce", s, v) for s, v in enumerate([80.0, 82.0, 81.0])]
    records += [r("pucl", s, None, loss_params={"alpha": 0.1}) for s in range(3)]
    records += [r("infonce", s, None, dataset="blobs_hard") for s in range(2)]  # a dataset with no finite row
    write_records(tmp_path / "results", records)
    assert _run("leaderboard", tmp_path / "results", tmp_path / "lb") == 0
    page = (tmp_path / "lb" / "tiny.md").read_text()
    pucl = _row(page, "linear", "pucl")
    assert "diverged on 3 of 3 seeds" in pucl and "**" not in pucl
    assert f"**{statistics.mean([80.0, 82.0, 81.0]):.2f} ± 1.00 (3 seeds)**" in _row(page, "linear", "infonce")
    assert "diverged on 2 of 2 seeds" in _row(page.split("## blobs_hard")[1], "linear", "infonce")
    index = (tmp_path / "lb" / "README.md").read_text()
    assert "| infonce |" in _row(index, "[tiny](tiny.md)", "blobs")
    assert "no finite result" in _row(index, "[tiny](tiny.md)", "blobs_hard")


def test_only_non_finite_records_is_an_error_that_says_so(tmp_path, capsys):
    write_records(tmp_path / "results", [synthetic_record("infonce", s, None) for s in range(3)])
    for command in ("leaderboard", "report"):
        assert _run(command, tmp_path / "results", tmp_path / "lb") == 2
        err = capsys.readouterr().err
        assert "3 completed records" in err and "none with a finite accuracy" in err, err
        assert "no completed records" not in err and not (tmp_path / "lb").exists()


def test_the_report_ranks_a_loss_that_diverged_last_and_names_it(tmp_path):
    """hcl diverged on every seed of blobs: it ranks last there (3 of 3) and loses to the baseline, and it ranks
    first on blobs_hard; treated as absent it would have a mean rank of 1 and a win rate of 100%."""
    values = {"blobs": {"infonce": [80.0, 81.0], "dcl": [84.0, 85.0], "hcl": [None, None]},
              "blobs_hard": {"infonce": [60.0, 62.0], "dcl": [63.0, 63.0], "hcl": [66.0, 66.0]}}
    write_records(tmp_path / "results", [synthetic_record(loss, s, v, dataset=dataset)
                                         for dataset, per_loss in values.items()
                                         for loss, seeds in per_loss.items() for s, v in enumerate(seeds)])
    assert _run("report", tmp_path / "results", tmp_path / "lb") == 0
    text = (tmp_path / "lb" / "report.md").read_text()
    overall = text.split("## Overall")[1].split("## Per domain")[0]
    # ranks: hcl 3 (blobs), 1 (blobs_hard); wins: no, yes; relative improvement: blobs_hard only.
    assert f"| hcl | 2 | 2.00 | 50% (2) | {100 * (66 - 61) / 61:+.2f}% |" in overall
    assert "| dcl | 2 | 1.50 | 100% (2) |" in overall
    notes = text.split("## Overall")[0]
    assert "non-finite" in notes and "tiny/blobs/linear/quick: hcl, 2 of 2 seeds non-finite" in notes


def test_a_seed_whose_training_diverged_is_counted_on_the_page(tmp_path, monkeypatch, capsys):
    """A loss that turns NaN in training fails the run (exit 2) before any metric: its record, failed, said nothing
    the pages read, and a row of the other seeds looked whole (a new user, session 33). The failed record's primary
    metric is null, so the row counts it; a failed run of another cause has no result and stays out."""
    pretrain = tiny_domain.TinyDomain.pretrain

    def diverges_on_seed_1(self, spec, ctx, data):
        if spec.seed == 1:
            ctx.check_loss(float("nan"), 3)
        if spec.seed == 2 and spec.loss == "infonce":
            raise RuntimeError("out of memory")  # a failure that is no divergence
        return pretrain(self, spec, ctx, data)

    monkeypatch.setattr(tiny_domain.TinyDomain, "pretrain", diverges_on_seed_1)
    results = tmp_path / "results"
    codes = {(loss, seed): main(["run", "--domain", "tiny", "--loss", loss, "--seeds", str(seed), "--set", "epochs=2",
                                 "--tracker", "none", "--quiet", "--results", str(results)])
             for loss in ("infonce", "dcl") for seed in range(3)}
    assert codes == {("infonce", 0): 0, ("infonce", 1): 2, ("infonce", 2): 1, ("dcl", 0): 0, ("dcl", 1): 2,
                     ("dcl", 2): 0}
    assert "training diverged" in capsys.readouterr().err
    assert _run("leaderboard", results, tmp_path / "lb") == 0
    page = (tmp_path / "lb" / "tiny.md").read_text()
    assert "(2 of 3 seeds; 1 non-finite)" in _row(page, "linear", "dcl")
    assert "(1 of 2 seeds; 1 non-finite)" in _row(page, "linear", "infonce")  # seed 2's crash is no seed of the row
    index = (tmp_path / "lb" / "README.md").read_text()
    assert "from 3 completed runs and 2 whose training diverged (2 non-finite in all" in index
