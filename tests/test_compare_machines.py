"""``harness compare``'s machine note, per group: a side's seeds on several device kinds, and paired seeds (or,
unpaired, sides) on different kinds, are noted for each group, where pooling the device sets over groups or
seeds hid them, and so are library fields (torch, CUDA, the CPU, threads), seed s of the baseline against seed s of
the candidate; seeds whose records name no device are named, not dropped. Information only: the exit status is the
same as without it. The first comparison goes through a subprocess (the exit status as a shell sees it); the rest,
which check the report's words, call the command in this process (conftest's ``run_main``)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main

CPU = {"device": "cpu", "device_name": "x86_64"}
H200 = {"device": "cuda:0", "device_name": "NVIDIA H200"}
VALUES = [85.0, 86.0, 85.5, 84.8, 85.9]


def _records(loss: str, devices: list[dict], drop: float = 0.0) -> list[dict]:
    """One group of ``loss``, seed i on ``devices[i]``."""
    records = []
    for seed, device in enumerate(devices):
        record = synthetic_record(loss, seed, VALUES[seed] - drop + 0.01 * seed * bool(drop))
        record["hardware"] = dict(device)
        records.append(record)
    return records


@pytest.fixture
def compare(tmp_path: Path, run_main) -> Callable[..., tuple[int, str]]:
    """``compare(base, cand, *extra)``: ``harness compare`` of two fresh folders holding those records, called in
    this process (or in a subprocess, ``in_subprocess=True``); its exit status and its report."""

    def call(base: list[dict], cand: list[dict], *extra: str, in_subprocess: bool = False) -> tuple[int, str]:
        folders = [tmp_path / f"run{len(list(tmp_path.iterdir()))}-{side}" for side in ("a", "b")]
        write_records(folders[0], base)
        write_records(folders[1], cand)
        through = harness if in_subprocess else functools.partial(run_main, main)
        out = through("compare", "--baseline", str(folders[0]), "--candidate", str(folders[1]), *extra)
        return out.returncode, out.stdout

    return call


def _notes(report: str) -> str:
    return report.split("## Notes")[1].split("\n## ")[0] if "## Notes" in report else ""


def test_paired_seeds_that_crossed_devices_are_noted_though_the_sides_used_the_same_devices(compare):
    crossed = compare(_records("dcl", [CPU] * 3 + [H200] * 2), _records("dcl", [H200] * 3 + [CPU] * 2),
                      in_subprocess=True)
    same = compare(_records("dcl", [CPU] * 5), _records("dcl", [CPU] * 5))
    assert crossed[0] == same[0] == 0
    notes = _notes(crossed[1])
    assert notes.count("\n- ") == 1 and "- tiny / blobs / linear / dcl" in notes
    assert ("the baseline's seeds ran on CPU (seed(s) 0,1,2) and H200 (seed(s) 3,4); the candidate's seeds ran on "
            "H200 (seed(s) 0,1,2) and CPU (seed(s) 3,4); paired seeds ran on different devices: CPU → H200 (seed(s) "
            "0,1,2) and H200 → CPU (seed(s) 3,4)") in notes
    assert "machines" not in same[1] and "## Notes" not in same[1]
    # The verdict line is the same with the note as without it.
    assert crossed[1].strip().splitlines()[-1] == same[1].strip().splitlines()[-1]


def test_two_groups_moving_in_opposite_directions_are_each_noted(compare):
    base = _records("dcl", [CPU] * 3) + _records("infonce", [H200] * 3)
    cand = _records("dcl", [H200] * 3, drop=5) + _records("infonce", [CPU] * 3)
    code, report = compare(base, cand)
    plain = compare(_records("dcl", [CPU] * 3) + _records("infonce", [CPU] * 3),
                     _records("dcl", [CPU] * 3, drop=5) + _records("infonce", [CPU] * 3))
    assert code == plain[0] == 1 and "## Regressions (1)" in report  # the note leaves the verdict as it was
    notes = _notes(report)
    assert "dcl" in notes and "paired seeds ran on different devices: CPU → H200 (seed(s) 0,1,2)" in notes
    assert "infonce" in notes and "H200 → CPU (seed(s) 0,1,2)" in notes
    assert "machines" not in _notes(plain[1])


def test_an_unpaired_test_notes_sides_on_different_devices_and_one_side_mixing_them(compare):
    code, report = compare(_records("dcl", [CPU] * 3), _records("dcl", [H200] * 3), "--test", "welch")
    assert code == 0 and "machines (the change holds theirs as well as the code's): the sides ran on different " \
        "devices: CPU → H200" in _notes(report)
    # One side's seeds on two kinds, the same two on both sides: no crossing to note, but the mix is named.
    code, report = compare(_records("dcl", [CPU, H200, CPU]), _records("dcl", [H200, CPU, CPU]),
                            "--test", "welch")
    notes = _notes(report)
    assert code == 0 and "the baseline's seeds ran on CPU (seed(s) 0,2) and H200 (seed(s) 1)" in notes
    assert "the candidate's seeds ran on H200 (seed(s) 0) and CPU (seed(s) 1,2)" in notes
    assert "different devices" not in notes


def test_library_fields_are_compared_per_paired_seed_where_the_sides_sets_are_the_same(compare):
    """torch 2.1 on seeds 0-2 and 2.2 on 3-4 against the reverse: both sides used {2.1, 2.2}, so a comparison of
    the sides' sets saw nothing; seed s of the baseline against seed s of the candidate crossed on every seed."""
    def on(versions: list[str]) -> list[dict]:
        records = _records("dcl", [CPU] * len(versions))
        for record, version in zip(records, versions):
            record["hardware"]["torch"] = version
        return records
    crossed = compare(on(["2.1"] * 3 + ["2.2"] * 2), on(["2.2"] * 3 + ["2.1"] * 2))
    same = compare(on(["2.1"] * 5), on(["2.1"] * 5))
    notes = _notes(crossed[1])
    assert ("paired seeds ran on different torch: 2.1 → 2.2 (seed(s) 0,1,2) and 2.2 → 2.1 (seed(s) 3,4)"
            in notes), notes
    assert "the baseline's seeds ran on torch 2.1 (seed(s) 0,1,2) and 2.2 (seed(s) 3,4)" in notes
    assert "machines" not in same[1]
    # Information only: the exit status and the verdict line are those of one library on every seed.
    assert crossed[0] == same[0] == 0
    assert crossed[1].strip().splitlines()[-1] == same[1].strip().splitlines()[-1]
    # Unpaired, the sides' sets are what compares: the same sets, nothing crossed to note.
    code, report = compare(on(["2.1"] * 3 + ["2.2"] * 2), on(["2.2"] * 3 + ["2.1"] * 2),
                            "--test", "welch")
    assert code == 0 and "different torch" not in _notes(report)


def test_seeds_that_record_no_device_are_named_not_dropped_from_the_device_comparison(compare):
    none: dict = {}
    code, report = compare(_records("dcl", [CPU, none, none, CPU, CPU]), _records("dcl", [H200] * 5))
    notes = _notes(report)
    assert "seed(s) 1,2 of the baseline record no device" in notes, notes
    assert "paired seeds ran on different devices: CPU → H200 (seed(s) 0,3,4)" in notes
    assert "of the candidate record no device" not in notes
    # One side without any device against one with: the whole side is named; the verdict is as without the note.
    code2, report = compare(_records("dcl", [none] * 5), _records("dcl", [CPU] * 5))
    assert code == code2 == 0 and "seed(s) 0,1,2,3,4 of the baseline record no device" in _notes(report)
    # Where no record of the group names a device there is no device comparison to leave seeds out of.
    code, report = compare(_records("dcl", [none] * 5), _records("dcl", [none] * 5))
    assert code == 0 and "machines" not in report
