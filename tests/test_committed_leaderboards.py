"""The committed leaderboard pages, report, history and prior pages, and their figures, are byte for byte what
``harness leaderboard``, ``report``, ``history`` and ``prior`` generate from the records they list
(``leaderboards/records.txt``): no number in them was edited by hand or left behind by a stale page. Only the listed
records count, so the records a user's own runs add to ``leaderboards/results`` (the README's main job writes one
there) leave this check passing. Figures are compared byte for byte too (matplotlib is pinned in constraints.txt)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain for the in-process run)

from harness.cli import main
from harness.pages.leaderboard import MANIFEST

COMMITTED = Path(__file__).resolve().parents[1] / "leaderboards"
pytestmark = pytest.mark.skipif(not (COMMITTED / MANIFEST).is_file(), reason="no committed leaderboards")


def listed_records(board: Path) -> list[str]:
    lines = (board / MANIFEST).read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def page_files(board: Path) -> dict[str, bytes]:
    """The generated files of a pages folder by relative path: the pages, the list of records and the figures."""
    paths = [*board.glob("*.md"), *board.glob("*.png"), *board.glob("curves/*.png"), board / MANIFEST]
    return {p.relative_to(board).as_posix(): p.read_bytes() for p in paths}


def stale_pages(board: Path, work: Path) -> list[str]:
    """Regenerate ``board``'s pages and figures from the records its manifest lists, in the committed layout
    (records under ``results/`` beside the pages, which the pages link to); the names of the files that differ."""
    names = listed_records(board)
    missing = [name for name in names if not (board / "results" / name).is_file()]
    assert names and not missing, f"records listed in {MANIFEST} are missing: {missing[:5]}"
    out = work / "leaderboards"
    results = out / "results"
    results.mkdir(parents=True)
    for name in names:
        shutil.copy(board / "results" / name, results / name)
    assert main(["leaderboard", "--results", str(results), "--out", str(out), "--bench", str(board / "bench")]) == 0
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    assert main(["history", "--results", str(results), "--out", str(out)]) == 0
    # prior.md comes from another folder of records (harness prior, leaderboards/prior/)
    assert main(["prior", "--results", str(board / "prior"), "--out", str(out)]) == 0
    generated, committed = page_files(out), page_files(board)
    assert sorted(committed) == sorted(generated)
    return [name for name, data in generated.items() if committed[name] != data]


def test_committed_pages_are_regenerated_from_the_records_they_list(tmp_path):
    stale = stale_pages(COMMITTED, tmp_path)
    assert not stale, f"{stale} differ from the records: run `harness leaderboard`, `report`, `history`, `prior`"


def test_every_link_of_the_committed_pages_exists():
    """Each figure and record a page links to (learning curves under each table, a row's record) is committed."""
    links = {(page.name, target) for page in COMMITTED.glob("*.md")
             for target in re.findall(r"\]\(([^)#]+)\)", page.read_text()) if "://" not in target}
    assert any(target.startswith("curves/") for _, target in links)
    assert any(target.startswith("results/") for _, target in links)
    broken = sorted((page, target) for page, target in links if not (COMMITTED / target).is_file())
    assert not broken, f"links to missing files: {broken[:5]}"


def test_a_users_run_into_the_committed_folder_leaves_the_check_passing(tmp_path, run_main):
    """The README's order: the main job writes a record into leaderboards/results, then the tests run. The run adds
    its own files under results/ and changes none the check reads (the pages, the list of records and the records it
    lists, from which :func:`test_committed_pages_are_regenerated_from_the_records_they_list` regenerates the
    pages); its record is not among the listed ones, which regenerating from the whole folder would count. The run
    is called in this process: what it writes, not its process, is checked (``harness run`` has its own subprocess
    tests)."""
    board = tmp_path / "leaderboards"
    shutil.copytree(COMMITTED, board, ignore=shutil.ignore_patterns(".*"))

    def files() -> dict[Path, bytes]:
        return {p.relative_to(board): p.read_bytes() for p in board.rglob("*") if p.is_file()}

    before = files()
    out = run_main(main, "run", "--domain", "tiny", "--loss", "infonce", "--seeds", "0", "--set", "epochs=1",
                   "--results", str(board / "results"), "--quiet")
    assert out.returncode == 0, out.stderr
    after = files()
    assert not [path for path, data in before.items() if after.get(path) != data]  # none changed, none removed
    added = sorted(set(after) - set(before))
    assert any(path.suffix == ".json" for path in added) and all(path.parts[0] == "results" for path in added), added
    assert not {path.name for path in added} & set(listed_records(board))
