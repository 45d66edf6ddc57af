"""Hostile or broken inputs to the page commands (records from other machines, bench files, the prior runs): each is
one ``error:`` line naming the file and the problem, exit 2, and no page written; never a traceback or a hang."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import tiny_domain  # noqa: F401  (registers the tiny domain)
from tiny_domain import synthetic_record, write_records

from harness.cli import main
from harness.pages import curves
from harness.records import MAX_NAME, InvalidRecordError, load_record

REPO = Path(__file__).resolve().parents[1]
GRAPH = sorted((REPO / "leaderboards" / "results").glob("graph-DD-infograph-dcl-b18bdb48-s*.json"))


def _graph_records(results: Path) -> list[Path]:
    results.mkdir(parents=True)
    return [Path(shutil.copy(p, results)) for p in GRAPH]


def _refused(run_main, tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    proc = run_main(main, *args, "--out", str(out))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists() or not any(out.rglob("*.*")), sorted(out.rglob("*"))
    return proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_among_the_records_is_refused_not_read(tmp_path, run_main):
    """Opening a FIFO for reading blocks until something writes to it: the leaderboard hung."""
    write_records(tmp_path / "results", [synthetic_record("infonce", seed, 80.0 + seed) for seed in range(3)])
    os.mkfifo(tmp_path / "results" / "x.json")
    said = _refused(run_main, tmp_path, "leaderboard", "--results", str(tmp_path / "results"))
    assert "x.json: is a FIFO (named pipe), not a regular file" in said
    with pytest.raises(Exception, match="not a regular file"):
        load_record(tmp_path / "results" / "x.json")


def test_a_record_whose_config_its_domain_cannot_build_is_refused(tmp_path, run_main):
    """Kept as written, the record reached the graph page's setting note without its batch_size: KeyError."""
    paths = _graph_records(tmp_path / "results")
    data = json.loads(paths[1].read_text())
    data["config"]["epochs"] = "x"
    paths[1].write_text(json.dumps(data))
    with pytest.raises(InvalidRecordError, match="its config does not build the graph domain's config: epochs: "):
        load_record(paths[1])
    said = _refused(run_main, tmp_path, "leaderboard", "--results", str(tmp_path / "results"))
    assert f"{paths[1].name}: invalid run record: its config does not build" in said


def test_a_record_of_a_dataset_this_code_does_not_know_is_kept_as_written(tmp_path):
    """Only values the config class refuses make a record invalid: a dataset (or method) that this code cannot
    resolve, a collaborator's newer one or one since removed, is no fault of the record (the first version of the
    check refused it)."""
    data = json.loads(sorted((REPO / "leaderboards" / "results").glob("rl-*.json"))[0].read_text())
    data["dataset"] = "walker-run"  # no task of this code's: resolving the rl config refuses it
    path = tmp_path / f"{data['run_id']}.json"
    path.write_text(json.dumps(data))
    assert load_record(path).dataset == "walker-run"


def test_a_dataset_name_too_long_for_a_file_name_still_gets_a_figure(tmp_path, run_main):
    long = "D" * 1000  # past the 255 bytes of a file name
    records = [synthetic_record("infonce", seed, 80.0 + seed, dataset=long) for seed in range(3)]
    for r in records:
        r["run_id"] = f"tiny-long-s{r['seed']}"
        r["curve"] = [{"epoch": e, "loss": 3.0 - e / 10} for e in (1, 2, 3)]
    write_records(tmp_path / "results", records)
    proc = run_main(main, "leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    [figure] = (tmp_path / "out" / "curves").glob("*.png")
    assert len(figure.name) < 200 and figure.name != Path(curves.figure_path("tiny", "D" * 999)).name


@pytest.mark.parametrize("field", ["run_id", "domain"])
def test_a_name_that_names_a_file_must_fit_a_file_name(tmp_path, run_main, field):
    record = synthetic_record("infonce", 0, 80.0)
    record[field] = "x" * (MAX_NAME + 1)
    path = tmp_path / "results" / "tiny-long-s0.json"
    path.parent.mkdir()
    path.write_text(json.dumps(record))
    said = _refused(run_main, tmp_path, "leaderboard", "--results", str(tmp_path / "results"))
    assert f"{field}: 'xxxx" in said and f"is {MAX_NAME + 1} characters long" in said


def _tiny_results(tmp_path: Path, **edit) -> Path:
    records = [synthetic_record(loss, seed, 80.0 + seed) for loss in ("infonce", "dcl") for seed in range(3)]
    for r in records:
        r["curve"] = [{"epoch": e, "loss": 3.0 - e / 10} for e in (1, 2, 3)]
        r["timings"] = {"total_s": 10.0}
        if r["loss"] == "dcl":
            for part, value in edit.items():
                r[part] = {k: value for k in r[part]}
    write_records(tmp_path / "results", records)
    return tmp_path / "results"


DEEP = "[" * 100_000


@pytest.mark.parametrize("content", [
    '{"rows":[],"hardware":["x"]}', '{"rows":[],"software":{"git_commit":5}}', '{"rows":[],"sessions":[1,2]}',
    '{"rows":[],"sessions":[{"parts":[1]},{"parts":[2]}]}', '{"rows":[],"complete":false,"parts_done":5}',
    '{"rows":[],"command":5}', '{"rows":[],"columns":[[1]]}', b"\xff", '{"rows":[],"x":' + "1" * 5000 + "}", DEEP,
    '{"rows":[{"seconds":' + "9" * 400 + '}]}'])
def test_a_bench_file_of_the_wrong_shape_is_refused_before_any_page(tmp_path, run_main, content):
    """The page read the fields it prints without checking their types: a traceback after README.md, the domain's
    page, records.txt and the curves were written, bench.md left stale."""
    results = _tiny_results(tmp_path)
    (tmp_path / "bench").mkdir()
    path = tmp_path / "bench" / "losses-cpu.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    said = _refused(run_main, tmp_path, "leaderboard", "--results", str(results), "--bench", str(tmp_path / "bench"))
    assert f"{path} is not a" in said and "bench file" in said


def test_a_bench_file_that_is_a_symbolic_link_is_refused_not_read(tmp_path, run_main):
    """A record that is a link is refused; a bench file was read through one, and a bench-shaped JSON file anywhere
    (a committed link's target) printed on the page."""
    results = _tiny_results(tmp_path)
    (tmp_path / "bench").mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"rows": [{"loss": "nt_xent", "ms": 1.0}], "device": "a secret"}))
    (tmp_path / "bench" / "losses-cpu.json").symlink_to(elsewhere)
    said = _refused(run_main, tmp_path, "leaderboard", "--results", str(results), "--bench", str(tmp_path / "bench"))
    assert f"{tmp_path / 'bench' / 'losses-cpu.json'} is a symbolic link" in said


@pytest.mark.parametrize("command", ["leaderboard", "report"])
@pytest.mark.parametrize("edit", [{"metrics": 1e308}, {"timings": -1e308}])
def test_values_too_large_to_average_are_refused_as_compare_refuses_them(tmp_path, run_main, command, edit):
    said = _refused(run_main, tmp_path, command, "--results", str(_tiny_results(tmp_path, **edit)))
    assert "tiny / blobs / linear / dcl" in said and "values are too large to compute a mean" in said


AUTO = REPO / "leaderboards" / "prior" / "graph-DD-infograph-dcl-b3d9f859-s0.json"


def _set(data: dict, where: str, value) -> None:
    *parents, last = where.split(".")
    for key in parents:
        data = data[key]
    data[last] = value


@pytest.mark.parametrize("where, value, said", [
    ("info.prior", "x", "info.prior: must be an object, got 'x'"),
    ("curve", [{"epoch": "a", "prior": "b"}], "curve[0].epoch: must be a number, got 'a'"),
    ("details.label_prior", "x", "details.label_prior: must be a number in (0, 1], got 'x'"),
    ("info.prior", {"final": [1]}, "info.prior.final: must be a number in (0, 1], got [1]"),
    ("details.label_classes", [3], "details.label_classes: must be a positive integer"),
    ("loss_params.tau_plus", "x", "loss_params.tau_plus: must be a number or 'auto', got 'x'"),
    ("info.negative_same_class_fraction", 0.0, "info.negative_same_class_fraction: is 0, the τ+ that this auto run"),
])
def test_a_prior_record_with_a_malformed_free_form_field_is_refused_naming_it(tmp_path, run_main, where, value, said):
    """The prior page read a record's free-form fields (details, info, curve) as the harness writes them: another
    type gave an AttributeError, a ValueError or a TypeError with a traceback."""
    data = json.loads(AUTO.read_text())
    _set(data, where, value)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / AUTO.name).write_text(json.dumps(data))
    message = _refused(run_main, tmp_path, "prior", "--results", str(tmp_path / "results"))
    assert f"{AUTO.name}: the class-prior page cannot read this record: {said}" in message


def test_a_measured_share_of_0_is_read_where_no_estimate_is_judged_against_it(tmp_path, run_main):
    """SameClassShare writes 0.0 where no negative shared the anchor's class; the first version of the prior page's
    check refused it in every record, though only an auto run's relative error divides by it."""
    data = json.loads(AUTO.read_text())
    data["loss_params"]["tau_plus"], data["info"]["negative_same_class_fraction"] = 0.1, 0.0
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / AUTO.name).write_text(json.dumps(data))
    out = run_main(main, "prior", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out"))
    assert out.returncode == 0, out.stderr
