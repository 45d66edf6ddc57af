"""``harness report`` on synthetic records: tables, the Friedman statistic by hand, figures, too few tasks."""

from __future__ import annotations

import re
import statistics

from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main
from harness.groups import completed_groups
from harness.pages.report import build_tasks

# (domain, dataset) -> loss -> per-seed values. Lower-is-better domain "other" checks the direction.
TASKS = {
    ("tiny", "blobs"): {"infonce": [80, 81], "dcl": [84, 85], "pucl": [86, 87], "hcl": [82, 83]},
    ("tiny", "blobs_hard"): {"infonce": [60, 62], "dcl": [63, 63], "pucl": [61, 62], "hcl": [66, 66]},
    ("other", "d1"): {"infonce": [0.30, 0.30], "dcl": [0.20, 0.20], "pucl": [0.10, 0.10], "hcl": [0.40, 0.40]},
    ("other", "d2"): {"infonce": [0.50, 0.50], "dcl": [0.40, 0.40], "pucl": [0.45, 0.45]},
}


def _records() -> list[dict]:
    out = []
    for (domain, dataset), per_loss in TASKS.items():
        for loss, values in per_loss.items():
            for seed, v in enumerate(values):
                out.append(synthetic_record(loss, seed, float(v), domain=domain, dataset=dataset,
                                            higher_is_better=domain == "tiny"))
    # A second pucl setting on blobs, worse: the report keeps each loss's best hyper-parameters.
    out += [synthetic_record("pucl", s, 50.0, loss_params={"alpha": 0.5}) for s in range(2)]
    return out


def test_report_on_synthetic_records(tmp_path):
    write_records(tmp_path / "results", _records())
    out = harness("report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "lb" / "report.md").read_text()
    assert (tmp_path / "lb" / "report_cd.png").stat().st_size > 1000
    assert (tmp_path / "lb" / "report_improvement.png").stat().st_size > 1000
    # Friedman over the 4 losses on the 3 tasks where all four have records; ranks (1 = best) per task:
    # blobs: pucl 1, dcl 2, hcl 3, infonce 4; blobs_hard: hcl 1, dcl 2, pucl 3, infonce 4; d1 (lower is
    # better): pucl 1, dcl 2, infonce 3, hcl 4. chi2 = 12 / (N k (k+1)) * sum R_j^2 - 3 N (k+1).
    rank_sums = {"pucl": 5, "dcl": 6, "hcl": 8, "infonce": 11}
    n, k = 3, 4
    chi2 = 12 / (n * k * (k + 1)) * sum(r * r for r in rank_sums.values()) - 3 * n * (k + 1)
    pattern = r"over 4 losses \(dcl, hcl, infonce, pucl\) on the 3 tasks .*: χ² = ([0-9.]+), p = ([0-9.e-]+?)\. "
    match = re.search(pattern, text)
    assert match and abs(float(match.group(1)) - chi2) < 1e-3 and 0 < float(match.group(2)) < 1
    assert "CD = " in text and "![critical difference diagram](report_cd.png)" in text
    overall = text.split("## Overall")[1].split("## Per domain")[0]
    # pucl: ranks 1, 3, 1, 2 (d2: dcl 1, pucl 2, infonce 3) -> 1.75; relative improvements over infonce:
    # +6/80.5, +0.5/61, +0.2/0.3, +0.05/0.5 (lower is better) -> mean in percent; wins 4 of 4.
    rel = 100 * (6 / 80.5 + 0.5 / 61 + 0.2 / 0.3 + 0.05 / 0.5) / 4
    assert f"| pucl | 4 | 1.75 | 100% (4) | {rel:+.2f}% |" in overall
    assert "| infonce | 4 | 3.50 | – | – |" in overall


def test_a_task_with_one_loss_is_no_task(tmp_path):
    """A setting where only one loss ran ranks nothing: it must not give that loss a free rank of 1."""
    records = _records() + [synthetic_record("supcon", s, 99.0, config={"epochs": 7}) for s in range(2)]
    write_records(tmp_path / "results", records)
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb")]) == 0
    text = (tmp_path / "lb" / "report.md").read_text()
    assert text.count("| supcon |") == 0 and "4 tasks over 2 domains" in text


def test_report_with_too_few_tasks(tmp_path, capsys):
    write_records(tmp_path / "results", [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl")
                                         for s in range(2)])
    (tmp_path / "lb").mkdir()
    (tmp_path / "lb" / "report_cd.png").write_bytes(b"stale")
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb")]) == 0
    text = (tmp_path / "lb" / "report.md").read_text()
    assert "Too few tasks for a Friedman test" in text and not (tmp_path / "lb" / "report_cd.png").exists()
    # No folder (a typo) is an error that writes nothing, not an empty report.
    assert main(["report", "--results", str(tmp_path / "empty"), "--out", str(tmp_path / "lb2")]) == 2
    assert "results folder" in capsys.readouterr().err and not (tmp_path / "lb2").exists()


def test_the_report_names_what_its_test_covers_and_the_seed_spread(tmp_path):
    """The Friedman block here is the 3 tasks all four losses share (d2 lacks hcl); the page names them. The seed
    spread of a task is the std over seeds of 100 · (value_s − baseline mean) / |baseline mean|."""
    write_records(tmp_path / "results", _records())
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb")]) == 0
    text = (tmp_path / "lb" / "report.md").read_text()
    assert "**What it covers:** other (d1), tiny (blobs, blobs_hard). The tables above rank every task" in text
    assert "error bar: ± the seed spread" in text
    tasks = {t.dataset: t for t in build_tasks(completed_groups(tmp_path / "results")[0])}
    base = statistics.fmean(TASKS[("tiny", "blobs")]["infonce"])
    by_hand = statistics.stdev(100 * (v - base) / base for v in TASKS[("tiny", "blobs")]["pucl"])
    assert abs(tasks["blobs"].seed_spread("pucl") - by_hand) < 1e-9
    assert tasks["blobs"].seed_spread("infonce") is None  # the baseline has no improvement over itself
