"""Runs made within one second are still ordered by when they ran: a record's times are written to the
microsecond. To the second, two codes' runs in one second tied, and which code a page showed (and ``compare``
took for the newest) was the digests' alphabetical order."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain in this process)

from harness import records
from harness.cli import main


class OneSecond(datetime):
    """A clock that stays within one second: each reading is 1 ms after the one before."""

    readings = 0

    @classmethod
    def now(cls, tz=None):
        cls.readings += 1
        return datetime(2030, 1, 2, 3, 4, 5, 0, tzinfo=timezone.utc) + timedelta(milliseconds=cls.readings)


@pytest.mark.parametrize("older, newer", [("a" * 64, "b" * 64), ("b" * 64, "a" * 64)])
def test_of_two_codes_run_in_one_second_the_page_shows_the_one_run_last(tmp_path, monkeypatch, older, newer):
    """Two edits of one commit share its date and version: the code run last is the newer. The older code ran
    seeds 0 and 1, the newer seed 0 alone; both orders of the two digests, so that their alphabetical order cannot
    pick the right one by chance."""
    monkeypatch.setattr(records, "datetime", OneSecond)
    monkeypatch.setattr(OneSecond, "readings", 0)
    results = tmp_path / "results"
    for packages, seeds in ((older, "0,1"), (newer, "0")):
        monkeypatch.setattr("harness.version.package_digest", lambda packages=packages: packages)
        assert main(["run", "--domain", "tiny", "--loss", "infonce", "--seeds", seeds, "--quiet", "--tracker", "none",
                     "--results", str(results)]) == 0
    stamps = {p.name: records.load_record(p).finished_at for p in results.glob("*.json")}
    assert len(stamps) == 3 and all(s.startswith("2030-01-02T03:04:05.") for s in stamps.values()), stamps
    assert main(["leaderboard", "--results", str(results), "--out", str(tmp_path / "pages")]) == 0
    [row] = [line for line in (tmp_path / "pages" / "tiny.md").read_text().splitlines()
             if line.startswith("| linear | infonce |")]
    assert "(1 seed)" in row, row
