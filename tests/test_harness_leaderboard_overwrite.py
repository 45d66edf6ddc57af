"""The page commands replace and remove only what a page command generated at ``--out``: a page that does not start
with its generated-page marker, or a figure no generated page shows, is a user's file, left as it is (an error
naming it, nothing written). A broken bench file, too, fails ``harness leaderboard`` before anything is written."""

from __future__ import annotations

import tiny_domain  # noqa: F401  (registers the tiny domain)
from tiny_domain import synthetic_record, write_records

from harness.cli import main

MINE = "my own notes\n"


def _curved(loss: str, seed: int, value: float, **kw) -> dict:
    """A record with a learning curve, so that its dataset gets a figure under curves/."""
    record = synthetic_record(loss, seed, value, **kw)
    record["curve"] = [{"epoch": 1, "loss": 1.0 + seed}, {"epoch": 2, "loss": 0.5 + seed}]
    return record


def _records(datasets: tuple[str, ...] = ("blobs",)) -> list[dict]:
    return [_curved(loss, s, 80.0 + s + i, dataset=d, loss_params=params) for d in datasets
            for i, (loss, params) in enumerate((("infonce", {}), ("dcl", {"tau_plus": 0.1}))) for s in range(2)]


def _files(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _refused(args: list[str], capsys, name: str) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert name in err and "nothing was written" in err, err


def test_leaderboard_leaves_a_users_page_and_writes_nothing(tmp_path, capsys):
    write_records(tmp_path / "results", _records())
    args = ["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "lb")]
    for name in ("README.md", "tiny.md", "records.txt", "bench.md"):
        out = tmp_path / "lb"
        out.mkdir()
        (out / name).write_text(MINE)
        if name == "bench.md":
            (out / "bench").mkdir()
            (out / "bench" / "losses-cpu.json").write_text('{"rows": [{"loss": "nt_xent", "ms": 1.0}]}')
        before = _files(out)
        _refused(args, capsys, str(out / name))
        assert _files(out) == before, name
        for path in sorted(out.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        out.rmdir()


def test_leaderboard_out_dot_keeps_the_projects_readme(tmp_path, capsys, monkeypatch):
    write_records(tmp_path / "results", _records())
    (tmp_path / "README.md").write_text("# My project\n")
    monkeypatch.chdir(tmp_path)
    _refused(["leaderboard", "--results", "results", "--out", "."], capsys, "README.md")
    assert (tmp_path / "README.md").read_text() == "# My project\n" and not (tmp_path / "tiny.md").exists()


def test_leaderboard_removes_only_the_figures_it_drew(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "lb"
    write_records(results, _records(("blobs", "blobs_hard")))
    args = ["leaderboard", "--results", str(results), "--out", str(out)]
    assert main(args) == 0
    assert {"curves/tiny-blobs.png", "curves/tiny-blobs_hard.png"} <= set(_files(out))
    (out / "curves" / "mine.png").write_bytes(b"a user's figure")
    for path in results.glob("tiny-blobs_hard-*.json"):
        path.unlink()
    assert main(args) == 0
    assert not (out / "curves" / "tiny-blobs_hard.png").exists()  # its dataset is gone: the stale figure too
    assert (out / "curves" / "mine.png").read_bytes() == b"a user's figure"
    # A user's file where a figure would be drawn is not replaced.
    fresh = tmp_path / "fresh"
    (fresh / "curves").mkdir(parents=True)
    (fresh / "curves" / "tiny-blobs.png").write_bytes(b"a user's figure")
    _refused(["leaderboard", "--results", str(results), "--out", str(fresh)], capsys, "tiny-blobs.png")
    assert _files(fresh) == {"curves/tiny-blobs.png": b"a user's figure"}


def test_report_history_and_prior_leave_a_users_page(tmp_path, capsys):
    software = {"git_commit_date": "2026-01-01T00:00:00+00:00"}
    records = _records() + [synthetic_record("infonce", s, 70.0 + s, software={**software, "source_digest": "b" * 64})
                            for s in range(2)]
    write_records(tmp_path / "results", records)
    for command, page in (("report", "report.md"), ("history", "history.md"), ("prior", "prior.md")):
        out = tmp_path / command
        out.mkdir()
        (out / page).write_text(MINE)
        _refused([command, "--results", str(tmp_path / "results"), "--out", str(out)], capsys, str(out / page))
        assert _files(out) == {page: MINE.encode()}, command


def test_report_keeps_a_users_figure_of_a_figures_name(tmp_path, capsys):
    """report_cd.png beside no report of ours is someone's: without a Friedman block it is not removed, and with
    one it is not replaced."""
    records = [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl") for s in range(2)]
    write_records(tmp_path / "results", records)
    out = tmp_path / "lb"
    out.mkdir()
    (out / "report_cd.png").write_bytes(b"a user's figure")
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    assert (out / "report_cd.png").read_bytes() == b"a user's figure"


def test_a_broken_bench_file_writes_nothing(tmp_path, capsys):
    write_records(tmp_path / "results", _records())
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "losses-cpu.json").write_text("{not json")
    out = tmp_path / "lb"
    _refused(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out), "--bench", str(bench)],
             capsys, "is not a readable bench file")
    assert not out.exists()


def test_leaderboard_neither_draws_nor_removes_figures_through_a_linked_curves_folder(tmp_path, capsys):
    """A curves/ that is a symbolic link (a committed one, say) took the figures drawn, and the removal of those no
    longer drawn, to wherever it points: the command is refused, naming it, and nothing there or at --out changes."""
    results, out, elsewhere = tmp_path / "results", tmp_path / "lb", tmp_path / "elsewhere"
    write_records(results, _records(("blobs", "blobs_hard")))
    args = ["leaderboard", "--results", str(results), "--out", str(out)]
    assert main(args) == 0
    (out / "curves").rename(elsewhere)  # the figures a page of ours shows, now behind a link
    (out / "curves").symlink_to(elsewhere)
    for path in results.glob("tiny-blobs_hard-*.json"):
        path.unlink()  # its figure would be removed, blobs' drawn again
    before, there = _files(out), _files(elsewhere)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{out / 'curves'} is a symbolic link" in err, err
    assert _files(out) == before and _files(elsewhere) == there
    (out / "curves").unlink()  # one page of ours linking a figure through the link is refused alike
    (out / "curves").mkdir()
    (out / "curves" / "tiny-blobs.png").symlink_to(elsewhere / "tiny-blobs.png")
    assert main(args) == 2
    assert f"{out / 'curves' / 'tiny-blobs.png'} is a symbolic link" in capsys.readouterr().err
    assert _files(elsewhere) == there
