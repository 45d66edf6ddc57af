"""The prior page follows the leaderboard pages' rule (harness.groups.group_records with ``one_data``): a setting's
seeds that read different data are never one mean (it keeps those that read its newest record's data and marks ¶),
a gain against infonce runs that read other data is marked ¶, a seed run twice counts once (its latest run), only
the newest code is shown, and seeds of several commits are marked ‡; the legend says what each mark means."""

from __future__ import annotations

import statistics
from pathlib import Path

from tiny_domain import synthetic_record, write_records

from harness.pages.prior import write_prior_page
from harness.pages.tables import MIXED, OTHER_DATA

OLD, NEW = "2026-01-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"
AUTO = {"tau_plus": "auto", "prior_estimator": "kmeans", "prior_every": 1, "prior_momentum": 0.5}
TRUE, DEFAULT = {"tau_plus": 0.25}, {"tau_plus": 0.1}
LEGEND = f"{OTHER_DATA} after a mean marks a row some of whose seeds read other data than its newest record"
CODE_LEGEND = f"{MIXED} marks a value whose seeds come from several commits"


def _runs(loss: str, params: dict, values: dict[int, float], files: str, finished_at: str, *,
          estimates: dict[int, float] | None = None, commit: str | None = None, tag: str = "") -> list[dict]:
    """Records of ``loss`` at the seeds of ``values`` on digits with 4 classes (label prior 0.25) that read the
    data version ``files``; ``estimates``: an auto run's final estimate per seed; ``tag`` orders the run ids."""
    records = []
    for seed, value in values.items():
        software = {"git_commit": commit * 40} if commit else None
        record = synthetic_record(loss, seed, value, dataset="digits", loss_params=params, config={"classes": 4},
                                  finished_at=finished_at, software=software)
        record["details"] = {"label_prior": 0.25, "label_classes": 4}
        record["timings"] = {"total_s": 100.0}
        record["data_fingerprint"] = {"dataset": "digits", "files": files}
        record["run_id"] = f"tiny-{tag}{loss}-{params.get('tau_plus', '')}-{files}-{commit}-s{seed}"
        if estimates is not None:
            record["info"] = {"prior": {"param": "tau_plus", "estimator": "kmeans", "final": estimates[seed]}}
            record["curve"] = [{"epoch": 1, "prior": estimates[seed], "prior_seconds": 1.0}]
        records.append(record)
    return records


def _page(tmp_path: Path, records: list[dict]) -> str:
    write_records(tmp_path / "prior", records)
    return write_prior_page(tmp_path / "prior", tmp_path / "out").read_text()


def _cells(page: str, start: str, section: str = "## Gain over infonce") -> list[str]:
    line = next(line for line in page.split(section)[1].splitlines() if line.startswith(start))
    return [c.strip() for c in line.strip("|").split("|")]


def _gain(members: dict[int, float], base: dict[int, float]) -> float:
    return statistics.fmean(members[s] - base[s] for s in sorted(set(members) & set(base)))


def test_auto_estimates_on_other_data_are_left_out_of_the_row_and_marked(tmp_path):
    """dcl auto ran seeds 0-2 on the data as it was (estimates near 0.5) and seeds 3-4, later, on changed files
    (near 0.25): the old page averaged the five as one row (5 runs, 0.40) with no word of it."""
    old, new = {0: 0.50, 1: 0.52, 2: 0.48}, {3: 0.24, 4: 0.26}
    page = _page(tmp_path, _runs("infonce", {}, {s: 80.0 for s in range(5)}, "v2", NEW)
                 + _runs("dcl", AUTO, {s: 81.0 + s / 10 for s in old}, "v1", OLD, estimates=old)
                 + _runs("dcl", AUTO, {s: 81.0 - s / 10 for s in new}, "v2", NEW, estimates=new))
    row = _cells(page, "| tiny / digits / C=4 | dcl | kmeans |", "## Estimation on the controlled benchmark")
    assert row[3] == "2"  # the runs
    estimates = list(new.values())
    assert row[7] == f"{statistics.fmean(estimates):.4f} ± {statistics.stdev(estimates):.4f}{OTHER_DATA}"
    error = statistics.fmean(abs(e - 0.25) / 0.25 for e in estimates)
    assert row[8] == f"{error:.0%}"
    assert "met (≤ 25%, every run)" in row[-1]  # the old data's estimates (100% off) would have missed it
    assert LEGEND in page and MIXED not in page
    assert "from 7 completed records in the folder `prior`; 3 more are left out" in page
    assert "Of the 2 `auto` runs here" in page


def test_a_gain_against_infonce_runs_that_read_other_data_is_marked(tmp_path):
    """Every seed of infonce read the old data and every seed of dcl the new: no setting left a seed out, but the
    gain is the data's as well as the loss's."""
    infonce, dcl = {s: 80.0 + s for s in range(5)}, {s: 83.0 + s * 1.1 for s in range(5)}
    page = _page(tmp_path, _runs("infonce", {}, infonce, "v1", OLD) + _runs("dcl", TRUE, dcl, "v2", NEW))
    cells = _cells(page, "| tiny / digits / C=4 | dcl |")
    assert cells[2] == f"{_gain(dcl, infonce):+.2f}†{OTHER_DATA} (n=5)"
    assert LEGEND in page and "After a change (Δ, gain)" in page
    assert "from 10 completed records in the folder `prior`." in page  # none left out


def test_a_seed_rerun_on_new_data_counts_once_with_its_new_value(tmp_path):
    """dcl at the default ran seeds 0-4 on the old data, then again on the new; the old runs' ids sort last, so
    the old page paired infonce with them (and counted ten dcl runs)."""
    infonce = {s: 80.0 + s for s in range(5)}
    old, new = {s: 90.0 + s for s in range(5)}, {s: 78.0 + s * 0.9 for s in range(5)}
    page = _page(tmp_path, _runs("infonce", {}, infonce, "v2", NEW)
                 + _runs("dcl", DEFAULT, old, "v1", OLD, tag="z") + _runs("dcl", DEFAULT, new, "v2", NEW))
    cells = _cells(page, "| tiny / digits / C=4 | dcl |")
    assert cells[-1] == f"{_gain(new, infonce):+.2f}†{OTHER_DATA} (n=5)"
    assert LEGEND in page
    assert "from 10 completed records in the folder `prior`; 5 more are left out" in page


def test_rows_of_one_data_and_one_code_carry_no_mark_and_no_legend(tmp_path):
    infonce, dcl = {s: 80.0 + s for s in range(3)}, {s: 81.0 + s * 1.2 for s in range(3)}
    page = _page(tmp_path, _runs("infonce", {}, infonce, "v1", OLD) + _runs("dcl", TRUE, dcl, "v1", NEW)
                 + _runs("dcl", AUTO, dcl, "v1", NEW, estimates={s: 0.25 for s in dcl}))
    assert OTHER_DATA not in page and MIXED not in page and "After a change" not in page
    assert "from 9 completed records in the folder `prior`." in page


def test_seeds_of_two_commits_are_marked_and_older_code_is_left_out(tmp_path):
    """Records without a source digest know their commit: seeds 0-2 of dcl ran at commit a, 3-4 at commit b (one
    mean, marked ‡, as the leaderboard marks it). Records of newer code (a source digest) replace older ones: the
    old page averaged infonce's runs of both."""
    infonce_old, infonce_new = {s: 70.0 for s in range(5)}, {s: 80.0 + s for s in range(5)}
    dcl = {s: 82.0 + s * 1.3 for s in range(5)}
    newer = _runs("infonce", {}, infonce_new, "v1", NEW)
    for record in newer:
        record["software"]["source_digest"] = "c" * 64
    page = _page(tmp_path, _runs("infonce", {}, infonce_old, "v1", OLD, commit="a") + newer
                 + _runs("dcl", TRUE, {s: dcl[s] for s in range(3)}, "v1", OLD, commit="a")
                 + _runs("dcl", TRUE, {s: dcl[s] for s in range(3, 5)}, "v1", NEW, commit="b"))
    cells = _cells(page, "| tiny / digits / C=4 | dcl |")
    assert cells[2] == f"{_gain(dcl, infonce_new):+.2f}†{MIXED} (n=5)"
    assert CODE_LEGEND in page and OTHER_DATA not in page
    assert "from 10 completed records in the folder `prior`; 5 more are left out" in page


def test_the_verdict_of_auto_against_the_default_is_marked_when_they_read_other_data(tmp_path):
    auto, default = {s: 81.0 + s for s in range(3)}, {s: 80.0 + s * 1.1 for s in range(3)}
    page = _page(tmp_path, _runs("infonce", {}, {s: 79.0 for s in range(3)}, "v1", OLD)
                 + _runs("dcl", AUTO, auto, "v1", OLD, estimates={s: 0.25 for s in auto})
                 + _runs("dcl", DEFAULT, default, "v2", NEW))
    verdict = next(line for line in page.splitlines() if line.startswith("- tiny / digits / C=4: dcl auto"))
    assert f"= {_gain(auto, default):+.2f}{OTHER_DATA} over 3 seeds" in verdict
    assert LEGEND in page
