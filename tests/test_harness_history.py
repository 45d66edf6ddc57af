"""``harness history``: a setting's metric over the code versions that ran it, steps marked, regenerated identically."""

from __future__ import annotations

from scipy import stats
from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main


def _version(loss: str, values: list[float], digest: str, date: str, commit: str | None = None, dirty: bool = False,
             **kw) -> list[dict]:
    software = {"source_digest": digest * 64, "git_commit": commit or digest * 40, "git_commit_date": date,
                "git_dirty": dirty}
    return [synthetic_record(loss, seed, v, software=software, **kw) for seed, v in enumerate(values)]


def test_history_marks_a_real_step_and_only_it(tmp_path, capsys):
    records = (_version("dcl", [85.0, 85.4, 84.8, 85.2, 85.1], "a", "2026-01-01T00:00:00+00:00")
               + _version("dcl", [85.2, 85.1, 84.9, 85.3, 85.0], "b", "2026-02-01T00:00:00+00:00")
               + _version("dcl", [75.1, 75.6, 74.7, 75.3, 75.0], "c", "2026-03-01T00:00:00+00:00")
               + _version("infonce", [80.0, 81.0], "a", "2026-01-01T00:00:00+00:00"))  # one version: not shown
    write_records(tmp_path / "results", records)
    out = tmp_path / "out"
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "history.md").read_text()
    assert "1 settings ran with more than one version (1 with one only, not shown)" in page
    rows = [line for line in page.splitlines() if line.startswith("| aaaaaaa") or line.startswith("| bbbbbbb")
            or line.startswith("| ccccccc")]
    assert [r.split(" | ")[0] for r in rows] == ["| aaaaaaa (2026-01-01)", "| bbbbbbb (2026-02-01)",
                                                "| ccccccc (2026-03-01)"]
    assert "**step**" not in rows[1] and "**step**" in rows[2] and "-9.96" in rows[2]
    assert (out / "history.png").stat().st_size > 1000
    first = page
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    assert (out / "history.md").read_text() == first


def test_an_edited_tree_comes_after_the_commit_it_edits_whatever_the_digests(tmp_path, capsys):
    """Commit c ran clean, then an edit of it (dirty, a digest that sorts first) ran later and lost 10 points: the
    page shows the drop from c to the edit, not a rise from the edit to c."""
    date = "2026-01-01T00:00:00+00:00"
    records = (_version("dcl", [85.0, 85.4, 84.8], "f", date, commit="c" * 40, finished_at="2026-01-02T00:00:00+00:00")
               + _version("dcl", [75.0, 75.4, 74.8], "0", date, commit="c" * 40, dirty=True,
                          finished_at="2026-01-05T00:00:00+00:00"))
    write_records(tmp_path / "results", records)
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 0
    rows = [line.split(" | ")[:4] for line in (tmp_path / "out" / "history.md").read_text().splitlines()
            if line.startswith("| ccccccc")]
    assert rows == [["| ccccccc (2026-01-01)", "3", "85.07 ± 0.31", "–"],
                    ["| ccccccc+dirty (src 0000000) (2026-01-01)", "3", "75.07 ± 0.31", "-10.00"]]


def test_a_version_whose_seeds_read_different_data_is_refused_not_averaged(tmp_path, capsys):
    """Version b ran seeds 0-2 on the data as it was and seeds 3-5 on changed files (same code): one mean of the
    six would show a step that no code made; the page refuses it and writes nothing."""
    changed = _version("dcl", [70.0, 70.4, 69.8, 0, 0, 0], "b", "2026-02-01T00:00:00+00:00")[3:]
    for record in changed:
        record["data_fingerprint"] = {"dataset": "blobs", "files": "v2"}
        record["run_id"] += "-v2"
    write_records(tmp_path / "results", _version("dcl", [85.0, 85.4, 84.8], "a", "2026-01-01T00:00:00+00:00")
                  + _version("dcl", [85.0, 85.4, 84.8], "b", "2026-02-01T00:00:00+00:00") + changed)
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "version bbbbbbb (2026-02-01): its seeds read different data" in err and "seed(s) 3,4,5" in err
    assert not (tmp_path / "out").exists()


def test_history_with_nothing_to_show_fails_loudly(tmp_path, capsys):
    write_records(tmp_path, _version("dcl", [85.0, 85.4], "a", "2026-01-01T00:00:00+00:00"))
    assert main(["history", "--results", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "no setting" in capsys.readouterr().err and not (tmp_path / "out").exists()



def test_a_version_that_diverged_on_every_seed_is_shown_as_diverged(tmp_path):
    """A version whose every seed has a non-finite metric is a row that says so, not left out; no change is
    measured to or from it."""
    nan, inf = float("nan"), float("inf")
    records = (_version("dcl", [85.0, 85.4, 84.8], "a", "2026-01-01T00:00:00+00:00")
               + _version("dcl", [nan, nan, nan], "b", "2026-02-01T00:00:00+00:00")
               + _version("dcl", [85.2, 85.1, 84.9], "c", "2026-03-01T00:00:00+00:00")
               + _version("infonce", [80.0, 81.0], "a", "2026-01-01T00:00:00+00:00")
               + _version("infonce", [inf, inf], "b", "2026-02-01T00:00:00+00:00"))
    write_records(tmp_path / "results", records)
    out = tmp_path / "out"
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "history.md").read_text()
    assert "2 settings ran with more than one version (0 with one only" in page
    cells = [line.split(" | ")[1:4] for line in page.splitlines() if line.startswith(("| bbbbbbb", "| ccccccc"))]
    assert cells == [["0", "diverged on 2 of 2 seeds", "–"],  # infonce
                     ["0", "diverged on 3 of 3 seeds", "–"], ["3", "85.07 ± 0.15", "–"]]  # dcl
    assert (out / "history.png").exists()


def test_the_header_counts_the_changes_holms_correction_is_over(tmp_path):
    """Holm's correction is over the changes that have a p: a change from one seed has none, so the page must not say
    it corrected over every change. b -> c is the one tested (paired t on 3 seeds): its p is scipy's, times 1."""
    records = (_version("dcl", [85.0], "a", "2026-01-01T00:00:00+00:00")
               + _version("dcl", [85.2, 85.1, 84.9], "b", "2026-02-01T00:00:00+00:00")
               + _version("dcl", [75.1, 75.6, 74.7], "c", "2026-03-01T00:00:00+00:00"))
    write_records(tmp_path / "results", records)
    assert main(["history", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "history.md").read_text()
    assert "Holm's correction over the 1 of the 2 changes of this page that have one" in page
    p = stats.ttest_rel([75.1, 75.6, 74.7], [85.2, 85.1, 84.9]).pvalue
    assert [line.split(" | ")[4] for line in page.splitlines() if line.startswith("| ")][1:] == ["–", "–", f"{p:.3g}"]


def test_values_too_large_to_compute_with_are_refused_naming_their_records(tmp_path):
    """Each version's seeds have a mean, but the paired step from one to the next (-9e307 after 9e307: a seed's
    difference overflows) ended in a traceback from the test; a version whose own mean overflows (1e308 on every
    seed) too, and a figure whose means span more than a float holds."""
    cases = {"steps": ([9e307, 8e307], [-9e307, -8e307], "a test"),
             "means": ([1e308, 1e308, 1e308], [85.0, 85.1, 85.2], "a mean"),
             # one seed a version: no test, no sum, but the figure's axis would span 1.8e308
             "figure": ([9e307], [-9e307], "a figure")}
    for name, (first, second, computing) in cases.items():
        records = (_version("dcl", first, "a", "2026-01-01T00:00:00+00:00")
                   + _version("dcl", second, "b", "2026-02-01T00:00:00+00:00"))
        write_records(tmp_path / name, records)
        out = harness("history", "--results", str(tmp_path / name), "--out", str(tmp_path / f"{name}-out"))
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        [line] = out.stderr.splitlines()
        assert f"its accuracy values are too large to compute {computing} with" in line, line
        assert line.endswith("; nothing was written") and "(records tiny-blobs-linear-dcl-" in line
        assert not (tmp_path / f"{name}-out").exists()
