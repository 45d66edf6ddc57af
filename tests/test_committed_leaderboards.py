"""The committed leaderboard pages and report are exactly what ``harness leaderboard`` and ``harness report``
generate from the records they list (``leaderboards/records.txt``): no number in them was edited by hand or left
behind by a stale page. Only the listed records count, so the records a user's own runs add to
``leaderboards/results`` (the README's main job writes one there) leave this check passing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tiny_domain import harness

from harness.cli import main
from harness.pages.leaderboard import MANIFEST

COMMITTED = Path(__file__).resolve().parents[1] / "leaderboards"
pytestmark = pytest.mark.skipif(not (COMMITTED / MANIFEST).is_file(), reason="no committed leaderboards")


def listed_records(board: Path) -> list[str]:
    lines = (board / MANIFEST).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def stale_pages(board: Path, work: Path) -> list[str]:
    """Regenerate ``board``'s pages from the records its manifest lists; the names of the pages that differ."""
    names = listed_records(board)
    missing = [name for name in names if not (board / "results" / name).is_file()]
    assert names and not missing, f"records listed in {MANIFEST} are missing: {missing[:5]}"
    results, out = work / "results", work / "out"
    results.mkdir(parents=True)
    for name in names:
        shutil.copy(board / "results" / name, results / name)
    assert main(["leaderboard", "--results", str(results), "--out", str(out), "--bench", str(board / "bench")]) == 0
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert main(["history", "--results", str(results), "--out", str(out)]) == 0
    # prior.md comes from another folder of records (harness prior, leaderboards/prior/)
    assert main(["prior", "--results", str(board / "prior"), "--out", str(out)]) == 0
    generated = {p.name: p.read_text() for p in [*out.glob("*.md"), out / MANIFEST]}
    committed = {p.name: p.read_text() for p in [*board.glob("*.md"), board / MANIFEST]}
    assert sorted(committed) == sorted(generated)
    return [name for name, text in generated.items() if committed[name] != text]


def test_committed_pages_are_regenerated_from_the_records_they_list(tmp_path):
    stale = stale_pages(COMMITTED, tmp_path)
    assert not stale, f"{stale} differ from the records: run `harness leaderboard` and `harness report`"


def test_a_users_run_into_the_committed_folder_leaves_the_check_passing(tmp_path):
    """The README's order: the main job writes a record into leaderboards/results, then the tests run."""
    board = tmp_path / "leaderboards"
    shutil.copytree(COMMITTED, board, ignore=shutil.ignore_patterns(".*"))
    out = harness("run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                  "--results", str(board / "results"), "--quiet")
    assert out.returncode == 0, out.stderr
    assert not stale_pages(board, tmp_path / "check")
    # Regenerating from the whole folder would now include the user's run: that is what the list avoids.
    assert main(["leaderboard", "--results", str(board / "results"), "--out", str(tmp_path / "all")]) == 0
    assert (tmp_path / "all" / "README.md").read_text() != (board / "README.md").read_text()
