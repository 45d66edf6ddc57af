"""The committed leaderboard pages and report are exactly what ``harness leaderboard`` and ``harness report``
generate from the committed records: no number in them was edited by hand or left behind by a stale page."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

COMMITTED = Path(__file__).resolve().parents[1] / "leaderboards"


@pytest.mark.skipif(not (COMMITTED / "results").is_dir(), reason="no committed records")
def test_committed_pages_are_regenerated_from_the_committed_records(tmp_path):
    assert main(["leaderboard", "--results", str(COMMITTED / "results"), "--out", str(tmp_path)]) == 0
    assert main(["report", "--results", str(COMMITTED / "results"), "--out", str(tmp_path)]) == 0
    generated = {p.name: p.read_text() for p in tmp_path.glob("*.md")}
    committed = {p.name: p.read_text() for p in COMMITTED.glob("*.md")}
    assert sorted(committed) == sorted(generated)
    stale = [name for name, text in generated.items() if committed[name] != text]
    assert not stale, f"{stale} differ from the records: run `harness leaderboard` and `harness report`"
