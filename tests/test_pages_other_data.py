"""Seeds of one row that read different data (their records' data fingerprints differ) are never one mean on the
pages: a row keeps the seeds that read its newest record's data, marks that it left others out, and a change
against a baseline that read other data is marked too; the legend says what the mark means."""

from __future__ import annotations

import statistics

from tiny_domain import synthetic_record, write_records

from harness.cli import main
from harness.pages.tables import OTHER_DATA

OLD, NEW = "2026-01-01T00:00:00+00:00", "2026-03-01T00:00:00+00:00"
LEGEND = f"{OTHER_DATA} after a mean marks a row some of whose seeds read other data than its newest record"


def _run(loss: str, values: dict[int, float], files: str, finished_at: str, **kw) -> list[dict]:
    """Records of ``loss`` at the seeds of ``values`` that read the data version ``files`` (same code)."""
    records = []
    for seed, value in values.items():
        record = synthetic_record(loss, seed, value, finished_at=finished_at, **kw)
        record["data_fingerprint"] = {"dataset": "blobs", "files": files}
        record["run_id"] = f"tiny-{loss}-{files}-s{seed}"
        records.append(record)
    return records


def _cell(values: list[float], mark: str = "") -> str:
    """The row's cell, computed here from the values it should hold: ``mean ± std (n seeds)``."""
    return f"{statistics.fmean(values):.2f} ± {statistics.stdev(values):.2f} ({len(values)} seeds){mark}"


def _row(page: str, loss: str) -> list[str]:
    [line] = [line for line in page.splitlines() if line.startswith(f"| linear | {loss} |")]
    return [c.strip() for c in line.strip("|").split("|")]


def test_a_row_whose_seeds_read_different_data_shows_the_newest_datas_mean_and_says_so(tmp_path):
    """dcl ran seeds 0-2 on the data as it was (83) and seeds 3-4, later, on changed files (60): the old page
    averaged the five as one result (73.8) with no word of it."""
    infonce = {0: 80.0, 1: 82.0, 2: 81.0}
    before, after = {0: 83.0, 1: 83.4, 2: 82.9}, {3: 60.0, 4: 61.0}
    records = (_run("infonce", infonce, "v1", OLD) + _run("dcl", before, "v1", OLD, loss_params={"tau_plus": 0.1})
               + _run("dcl", after, "v2", NEW, loss_params={"tau_plus": 0.1}))
    write_records(tmp_path / "results", records)
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "tiny.md").read_text()
    dcl, base = _row(page, "dcl"), _row(page, "infonce")
    assert _cell([*before.values(), *after.values()]) not in page  # never the mean over both data
    assert dcl[4] == _cell(list(after.values()), OTHER_DATA)
    assert base[4].strip("*") == _cell(list(infonce.values()))  # its seeds agree: no mark
    change = statistics.fmean(after.values()) - statistics.fmean(infonce.values())
    # against a baseline that read the old data; no seed shared: Welch's t-test over all, significant here
    assert dcl[5] == f"{change:+.2f}†{OTHER_DATA}"
    assert dcl[-1] == "[s3](../results/tiny-dcl-v2-s3.json)"  # the record behind the row is one of the new data
    assert LEGEND in page and "After a change (Δ, gain)" in page
    index = (out / "README.md").read_text()
    # the best row is infonce's, against itself: nothing on the index is marked, so it explains no mark
    assert f"| {_cell(list(infonce.values()))} | {_cell(list(infonce.values()))} (infonce) | +0.00 |" in index
    assert OTHER_DATA not in index


def test_a_change_against_a_baseline_on_other_data_is_marked_though_each_row_agrees(tmp_path):
    """Every seed of infonce read the old data and every seed of dcl the new: no row left a seed out, but dcl's Δ
    and the index's gain are the data's as well as the loss's."""
    infonce, dcl = {0: 80.0, 1: 82.0, 2: 81.0}, {0: 85.0, 1: 86.0, 2: 85.5}
    write_records(tmp_path / "results", _run("infonce", infonce, "v1", OLD)
                  + _run("dcl", dcl, "v2", NEW, loss_params={"tau_plus": 0.1}))
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "tiny.md").read_text()
    row = _row(page, "dcl")
    assert row[4] == f"**{_cell(list(dcl.values()))}**" and row[5].endswith(OTHER_DATA)
    gain = statistics.fmean(dcl.values()) - statistics.fmean(infonce.values())
    assert row[5].startswith(f"+{gain:.2f}")
    assert f"| {row[5]} |" in (out / "README.md").read_text()  # the index's gain carries the page's marks
    assert LEGEND in page


def test_rows_that_read_one_data_carry_no_mark_and_no_legend(tmp_path):
    write_records(tmp_path / "results", _run("infonce", {0: 80.0, 1: 82.0}, "v1", OLD)
                  + _run("dcl", {0: 83.0, 1: 84.0}, "v1", NEW, loss_params={"tau_plus": 0.1}))
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    for name in ("tiny.md", "README.md"):
        assert OTHER_DATA not in (out / name).read_text(), name


def test_a_seed_rerun_on_new_data_replaces_its_old_record_and_the_report_says_seeds_were_left_out(tmp_path):
    """Seeds 0-2 of dcl ran on the old data, then again on the new: the row is the new runs', marked; the report
    ranks dcl by that mean and names the row in its note."""
    infonce, old, new = {0: 80.0, 1: 82.0, 2: 81.0}, {0: 90.0, 1: 91.0, 2: 92.0}, {0: 70.0, 1: 71.0, 2: 73.0}
    records = (_run("infonce", infonce, "v2", NEW) + _run("dcl", old, "v1", OLD, loss_params={"tau_plus": 0.1})
               + _run("dcl", new, "v2", NEW, loss_params={"tau_plus": 0.1}))
    write_records(tmp_path / "results", records)
    out = tmp_path / "out"
    for command in ("leaderboard", "report"):
        assert main([command, "--results", str(tmp_path / "results"), "--out", str(out)]) == 0, command
    row = _row((out / "tiny.md").read_text(), "dcl")
    assert row[4] == _cell(list(new.values()), OTHER_DATA)
    change = statistics.fmean(new.values()) - statistics.fmean(infonce.values())
    assert row[5].rstrip("†") == f"{change:+.2f}"  # both rows read the new data: no mark
    report = (out / "report.md").read_text()
    assert "**Seeds on other data.**" in report
    assert "- tiny/blobs/linear/quick: dcl (tau_plus=0.1), 3 seeds on other data left out" in report
    relative = 100 * change / statistics.fmean(infonce.values())
    assert f"| dcl | 1 | 2.00 | 0% (1) | {relative:+.2f}% |" in report  # dcl lost on the new data: ranked last
