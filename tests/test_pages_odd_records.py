"""The generated pages on odd records: names with markdown's special characters, one seed, a row that
diverged on every seed, records without curves; every figure a page shows exists, none is left over, and the
figures label their axes."""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain)
from tiny_domain import harness, synthetic_record, write_records

from harness.cli import main
from harness.pages import figures, generated

ODD = "we|rd [set] (x)*_`<b>`"
LINK = re.compile(r"!\[(?:\\.|[^\[\]\\]|\[[^\[\]]*\])*\]\(([^)\s]+)\)")


def _hash(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def _file_name(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:+=@,-]", "_", run_id)


def _odd_records() -> list[dict]:
    records = []
    for dataset in (ODD, "L" * 120, "blobs"):
        for seed, value in enumerate([80.0, 82.0, 81.0]):
            records.append(synthetic_record("infonce", seed, value, dataset=dataset))
            records.append(
                synthetic_record(
                    "dcl", seed, value + 3 + seed / 10, dataset=dataset, loss_params={"tau_plus": 0.1, "mode": "a|b"}
                )
            )
    records.append(synthetic_record("pucl", 0, 99.0, loss_params={"alpha": 0.1, "c": 0.01}))  # one seed, no curve
    for seed in range(3):  # diverged on every seed
        records.append(synthetic_record("hcl", seed, 0.0, loss_params={"tau_plus": 0.1, "beta": 1.0}))
    for record in records:
        record["run_id"] = _file_name(record["run_id"])
        if record["loss"] == "hcl":
            record["metrics"]["accuracy"] = None
        if record["loss"] in ("infonce", "dcl"):
            value = record["metrics"]["accuracy"]
            record["curve"] = [{"epoch": e, "step": 10 * e, "loss": 5.0 - 0.3 * e + value / 100} for e in (1, 2, 3)]
    return records


def _pages(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not p.name.startswith(".")
    }


def _shown(out: Path) -> set[Path]:
    return {
        (page.parent / link).resolve()
        for page in out.glob("*.md")
        for link in LINK.findall(page.read_text())
        if link.endswith(".png")
    }


def test_a_dataset_named_with_brackets_regenerates_byte_for_byte(tmp_path):
    write_records(tmp_path / "results", _odd_records())
    out = tmp_path / "out"
    args = ["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out)]
    assert main(args) == 0
    first = _pages(out)
    page = (out / "tiny.md").read_text()
    # The name prints as it is, escaped where markdown or HTML would act on it: the old page rendered `<b>` as code
    # and the `*_` could open emphasis (tests/test_pages_escaping.py renders every page)
    assert "![learning curves of the we|rd \\[set\\] (x)\\*\\_\\`\\<b>\\` rows](curves/" in page
    assert "\n## we|rd [set] (x)\\*\\_\\`\\<b>\\`\n" in page  # "[set] (x)" is no link: a space parts them
    assert generated.shown_figures(out / "tiny.md", "leaderboard", re.compile(r"curves/.+\.png")) == {
        out / "curves" / name
        for name in (f"tiny-we_rd_set_x___b_-{_hash('tiny-' + ODD)}.png", f"tiny-{'L' * 120}.png", "tiny-blobs.png")
    }
    assert main(args) == 0  # the old page hid its own figure from the second run, which refused to replace it
    assert _pages(out) == first


def test_a_page_of_the_old_format_with_brackets_in_its_alt_text_still_owns_its_figure(tmp_path):
    page = tmp_path / "tiny.md"
    page.write_text(f"{generated.marker('leaderboard')}\n\n![learning curves of the a [b] rows](curves/tiny-a.png)\n")
    assert generated.shown_figures(page, "leaderboard", re.compile(r"curves/.+\.png")) == {
        tmp_path / "curves" / "tiny-a.png"
    }


def test_odd_records_give_tables_that_keep_their_columns_and_figures_that_all_exist(tmp_path):
    write_records(tmp_path / "results", _odd_records())
    out = tmp_path / "out"
    for command in ("leaderboard", "report", "prior"):
        assert main([command, "--results", str(tmp_path / "results"), "--out", str(out)]) == 0, command
    for page in out.glob("*.md"):
        widths = set()
        for line in page.read_text().splitlines():
            if line.startswith("|"):
                widths.add(len(re.findall(r"(?<!\\)\|", line)))
            elif widths:
                assert len(widths) == 1, (page.name, widths)  # a '|' in a name would add a column
                widths = set()
    shown = _shown(out)
    drawn = {p.resolve() for p in out.rglob("*.png")}
    assert shown <= drawn, f"shown but not drawn: {sorted(shown - drawn)}"
    assert drawn <= shown, f"drawn but shown by no page: {sorted(drawn - shown)}"
    tiny = (out / "tiny.md").read_text()
    assert "| linear | hcl | beta=1, tau_plus=0.1 | quick, 3 epochs | diverged on 3 of 3 seeds |" in tiny
    assert "| *published* | Linear+InfoNCE |" in tiny and "**90.00" not in tiny  # published: never the best


def test_the_prior_page_links_its_figure_only_when_it_draws_one(tmp_path):
    # infonce and dcl at fixed priors: no `auto` run, so no estimate to draw
    write_records(tmp_path / "results", _odd_records())
    out = tmp_path / "out"
    assert main(["prior", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    page = (out / "prior.md").read_text()
    assert not (out / "prior_error.png").exists()
    assert "prior_error.png" not in page  # the old page linked a figure it had not written: a broken image
    assert "No figure: no `auto` run on a synthetic set has estimates to draw." in page


def test_the_history_figure_names_its_metric_and_wraps_long_titles(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(figures, "save", lambda fig, path, dpi=100: saved.append(fig))
    long = "x" * 150
    series = [
        (f"tiny/blobs dcl {long}\nquick (epochs=3)", "accuracy", [(80.0, 1.0, False), (82.0, 1.0, True)]),
        ("rl/cartpole infonce –\ncpu", "return", [(100.0, 5.0, False), (120.0, 3.0, False)]),
    ]
    assert figures.history_lines(series, tmp_path / "history.png")
    [fig] = saved
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_ylabel() for ax in axes] == ["accuracy (mean ± std)", "return (mean ± std)"]
    assert all(len(line) <= 55 for ax in axes for line in ax.get_title().splitlines())


def test_two_datasets_whose_names_differ_in_odd_characters_only_get_a_figure_each(tmp_path):
    records = []
    for dataset in ("a b", "a_b", "a/b"):
        for seed, loss in enumerate(["infonce", "dcl"] * 2):
            record = synthetic_record(loss, seed // 2, 80.0 + seed, dataset=dataset)
            record["run_id"] = _file_name(record["run_id"]) + "-" + _hash(dataset)
            record["curve"] = [{"epoch": 1, "loss": 5.0 + seed}, {"epoch": 2, "loss": 4.0 + seed}]
            records.append(record)
    write_records(tmp_path / "results", records)
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    links = re.findall(r"\]\((curves/[^)]+\.png)\)", (out / "tiny.md").read_text())
    # the old names were all curves/tiny-a_b.png: one figure drawn three times, the last dataset's under every table
    assert len(set(links)) == 3 and "curves/tiny-a_b.png" in links
    assert all((out / link).is_file() for link in links)


def test_a_record_link_into_a_folder_with_spaces_and_brackets_stays_one_link(tmp_path):
    results = tmp_path / "my results (v2)"
    write_records(results, [synthetic_record(loss, s, 80.0 + s) for loss in ("infonce", "dcl") for s in range(2)])
    out = tmp_path / "out"
    assert main(["leaderboard", "--results", str(results), "--out", str(out)]) == 0
    page = (out / "tiny.md").read_text()
    assert "[s0](<../my results (v2)/tiny-blobs-linear-dcl-0.1.0-" in page
    assert re.search(r"\[s0\]\(\.\./my results", page) is None


def test_rows_that_differ_by_the_same_amount_on_every_seed_print_no_scipy_warning(tmp_path, capfd):
    records = [synthetic_record("infonce", s, v) for s, v in enumerate([80.0, 82.0, 81.0])]
    records += [synthetic_record("dcl", s, v + 3.0, loss_params={"tau_plus": 0.1}) for s, v in enumerate([80, 82, 81])]
    write_records(tmp_path / "results", records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's "Precision loss ... catastrophic cancellation" was printed
        assert main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 0
    assert "| +3.00† |" in (tmp_path / "out" / "tiny.md").read_text()  # a constant shift on every seed: p = 0


def test_an_interrupted_figure_leaves_the_old_one_not_half_a_png(tmp_path):
    path = tmp_path / "history.png"
    path.write_bytes(b"the old figure")
    fig = figures.plt.figure()

    def interrupted(target, **kwargs):
        file = open(target, "wb") if isinstance(target, (str, os.PathLike)) else target  # noqa: SIM115
        file.write(b"\x89PNG half")
        file.flush()
        raise KeyboardInterrupt

    fig.savefig = interrupted
    with pytest.raises(KeyboardInterrupt):
        figures.save(fig, path)
    assert path.read_bytes() == b"the old figure"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.png"]  # no temporary file left
    assert not figures.plt.fignum_exists(fig.number)  # closed all the same


@pytest.mark.parametrize("field, name", [("dataset", "blobs\n\n| forged | row |"), ("method", "linear\u2028## forged"),
                                         ("metric", "accuracy\r\n<img src=x>"), ("dataset", "blobs\x00")])
def test_a_record_name_with_a_control_character_is_refused_before_a_page_is_written(tmp_path, field, name):
    """A page prints the names of its records as they are, in headings and prose too: a newline in one would forge
    a row or a section of the page. Such a record is named, and no page is written."""
    records = [synthetic_record("infonce", seed, 80.0 + seed) for seed in range(3)]
    records[1] = {**synthetic_record("infonce", 1, 81.0, **{field: name}), "run_id": "tiny-forged-s1"}
    write_records(tmp_path / "results", records)
    proc = harness("leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert "tiny-forged-s1.json: invalid run record: " in proc.stderr
    assert f"{repr(name)} holds a control character" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_run_whose_dataset_name_holds_a_newline_is_refused_before_it_starts(tmp_path):
    proc = harness("run", "--domain", "tiny", "--dataset", "blobs\nforged", "--loss", "infonce", "--seeds", "0",
                   "--results", str(tmp_path / "results"))
    assert proc.returncode == 2
    assert "the dataset name 'blobs\\nforged' holds a control character" in proc.stderr
    assert not list((tmp_path / "results").glob("*.json"))
