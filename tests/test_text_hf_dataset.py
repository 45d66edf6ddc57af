"""The text domain's ``hf-text`` on a researcher's own data: the files read are the run's identity, a column that is
not there and a path that is not there are one line each, null rows are left out, a name is looked for under the
data root as vision's ``hf:`` does, one file and a ``save_to_disk`` folder are read, and ``datasets``' own bars
follow ``--quiet``. Every dataset is written by the test; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError
from domains.files import hash_files
from domains.text import TextDomain, hf_text
from domains.text.config import TextConfig
from domains.text.corpus import load_hf
from domains.text.hf_text import resolve
from harness.run import runner

datasets = pytest.importorskip("datasets")
TEXT = TextDomain()
SENTENCES = [f"sentence number {i} of the corpus ." for i in range(6)]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _parquet(folder: Path, columns: dict[str, list]) -> Path:
    """``folder`` in the hub's layout: one parquet shard of the train split."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict(columns).to_parquet(folder / "data" / "train-00000-of-00001.parquet")
    return folder


def _load(source: Path | str, root: Path, log=print, bars: bool = False, **fields) -> list[str]:
    cfg = TextConfig(hf_dataset=str(source), **fields)
    return load_hf(cfg, resolve(cfg, root), log, bars).sentences


def _run(source: Path | str, root: Path, method: str = "quickthought") -> tuple[RunSpec, RunContext]:
    """A run of ``method`` on hf-text ``source``, evaluated on a CR of 12 lines a class under ``root`` (the fewest
    that the protocol's 10 folds split, and each training fold again, which ``prepare`` checks)."""
    (root / "senteval" / "CR").mkdir(parents=True, exist_ok=True)
    for name in ("custrev.pos", "custrev.neg"):
        (root / "senteval" / "CR" / name).write_text("good .\n" * 12)
    spec = RunSpec("text", method, "hf-text", "infonce", {}, "quick", 0,
                   TextConfig(hf_dataset=str(source), senteval_tasks=("CR",)))
    return spec, RunContext(seed=0, device=torch.device("cpu"), data_root=root, work_dir=root / "work", quiet=True)


def _fingerprint(source: Path | str, root: Path, method: str = "quickthought") -> dict:
    return TEXT.data_fingerprint(*_run(source, root, method))


def test_a_trained_run_resolves_its_dataset_once(tmp_path, monkeypatch):
    """Preparing a run resolved ``hf_dataset`` twice, once for the fingerprint's file hashes and once for the rows
    (for a hub id, two requests to the hub); one builder now serves both, and the fingerprint is the one
    data_fingerprint gives alone."""
    spec, ctx = _run(_parquet(tmp_path / "pq", {"text": SENTENCES}), tmp_path)
    resolved = []
    builder_for = hf_text.builder_for
    monkeypatch.setattr(hf_text, "builder_for", lambda *args: resolved.append(args) or builder_for(*args))
    prepared = TEXT.prepare(spec, ctx)
    assert len(resolved) == 1 and prepared.data.corpus.sentences == SENTENCES
    assert prepared.fingerprint == TEXT.data_fingerprint(spec, ctx)


def test_a_harness_run_resolves_its_dataset_once(tmp_path, monkeypatch):
    """``harness run`` took the fingerprint for its skip check (``Domain.data_fingerprint``) and then prepared the
    data, each resolving ``hf_dataset`` (for a hub id, a request to the hub each); the run now resolves it once, and
    its record's fingerprint holds the files read."""
    folder = _parquet(tmp_path / "pq", {"text": SENTENCES})
    (tmp_path / "senteval" / "CR").mkdir(parents=True)
    for name, word in (("custrev.pos", "good"), ("custrev.neg", "bad")):  # enough lines for 2 folds
        (tmp_path / "senteval" / "CR" / name).write_text(f"{word} .\n" * 4)
    resolved = []
    builder_for = hf_text.builder_for
    monkeypatch.setattr(hf_text, "builder_for", lambda *args: resolved.append(args) or builder_for(*args))
    request = runner.RunRequest(domain="text", method="quickthought", dataset="hf-text", loss="infonce", seeds=[0],
                                sets={"hf_dataset": str(folder), "senteval_tasks": "CR", "kfold": "2"},
                                device="cpu", data_root=str(tmp_path), results=str(tmp_path / "results"),
                                quiet=True, trackers=[])
    [outcome] = runner.execute(request)
    assert outcome.status == "completed", outcome.error
    assert len(resolved) == 1
    assert outcome.record.data_fingerprint["hf_files"] == {"data/train-00000-of-00001.parquet": hash_files(
        [folder / "data" / "train-00000-of-00001.parquet"])}


def test_the_files_read_are_the_runs_identity(tmp_path):
    """The fingerprint held only the path string: rewritten data ran as '(exists)', and --force wrote the new run
    under the old id."""
    folder = _parquet(tmp_path / "pq", {"text": SENTENCES})
    before = _fingerprint(folder, tmp_path)
    assert set(before["hf_files"]) == {"data/train-00000-of-00001.parquet"}
    _parquet(folder, {"text": [s.replace("corpus", "zebra") for s in SENTENCES]})
    assert _fingerprint(folder, tmp_path)["hf_files"] != before["hf_files"]
    saved = tmp_path / "saved"
    datasets.Dataset.from_dict({"text": SENTENCES}).save_to_disk(saved)
    assert any(name.endswith(".arrow") for name in _fingerprint(saved, tmp_path)["hf_files"])


@pytest.mark.parametrize("method", ["bow", "hf"])
def test_the_evaluation_only_methods_neither_resolve_nor_hash_the_corpus(tmp_path, monkeypatch, method):
    """bow and hf read no corpus, yet their fingerprint resolved the hub id (offline: "cannot load 'bookcorpus' from
    the Hugging Face hub (no network ...)") and hashed the files, a new run id whenever the unread corpus changed."""
    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    monkeypatch.setattr(datasets, "load_dataset_builder", no_hub)
    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    offline = _fingerprint("bookcorpus", tmp_path, method)
    assert set(offline) == {"dataset", "senteval_sha256", "hf_dataset", "hf_split"}
    assert (offline["hf_dataset"], offline["hf_split"]) == ("bookcorpus", "train")
    folder = _parquet(tmp_path / "pq", {"text": SENTENCES})
    before = _fingerprint(folder, tmp_path, method)
    _parquet(folder, {"text": [s.replace("corpus", "zebra") for s in SENTENCES]})
    assert _fingerprint(folder, tmp_path, method) == before


def test_a_column_that_is_not_there_is_named_with_the_columns_there_are(tmp_path):
    """A KeyError traceback, after the dataset was read."""
    folder = _parquet(tmp_path / "pq", {"text": SENTENCES, "doc": ["a"] * 6})
    with pytest.raises(UserError, match=r"pq has no column 'body' \(hf_text_field\); its columns: text, doc"):
        _load(folder, tmp_path, hf_text_field="body")
    with pytest.raises(UserError, match=r"pq has no column 'chapter' \(hf_doc_field\); its columns: text, doc"):
        _load(folder, tmp_path, hf_doc_field="chapter")
    assert _load(_parquet(tmp_path / "body", {"body": SENTENCES}), tmp_path, hf_text_field="") == SENTENCES


def test_null_text_rows_are_left_out_and_counted(tmp_path):
    """A null text was read as the sentence "None"."""
    folder = _parquet(tmp_path / "nulls", {"text": [None if i % 3 == 0 else s for i, s in enumerate(SENTENCES)]})
    lines: list[str] = []
    sentences = _load(folder, tmp_path, log=lines.append)
    assert sentences == [s for i, s in enumerate(SENTENCES) if i % 3]
    assert lines == [f"{folder}: skipped 2 of 6 rows whose 'text' is null"]


def test_a_name_is_a_path_as_given_else_under_the_data_root_else_a_hub_id(tmp_path):
    """A missing path was reported as 'no network', and a folder under the data root was taken as a hub id."""
    root = tmp_path / "root"
    _parquet(root / "mine" / "set", {"text": SENTENCES})
    assert _load("mine/set", root) == SENTENCES
    with pytest.raises(UserError, match=r"no file or folder /nonexistent/set; a local text dataset is a folder"):
        _load("/nonexistent/set", root)
    with pytest.raises(UserError, match="'hf_dataset=a:b' is neither a file or folder nor a hub id"):
        _load("a:b", root)


@pytest.mark.parametrize("suffix", [".txt", ".csv", ".json", ".jsonl", ".parquet"])
def test_a_missing_data_file_is_named_not_sent_to_the_hub(tmp_path, monkeypatch, suffix):
    """'mytext/missing.jsonl' reads as <owner>/<name>: it went to the hub, and offline the message said "no network"."""
    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked")

    root = tmp_path / "root"
    name = f"mytext/missing{suffix}"
    with monkeypatch.context() as patched:
        patched.setattr(datasets, "load_dataset_builder", no_hub)
        with pytest.raises(UserError, match=rf"^no file {name} or {root}/{name}; a local text dataset is a folder"):
            _load(name, root)
    (root / "mytext").mkdir(parents=True)
    (root / "mytext" / "there.txt").write_text("".join(f"{s}\n" for s in SENTENCES))
    assert _load("mytext/there.txt", root) == SENTENCES  # found under the data root, as before


def test_one_file_and_a_save_to_disk_folder_are_read(tmp_path):
    """One file: "Couldn't find any data file"; a save_to_disk folder: "Please use load_from_disk instead". Read as
    plain Arrow files, a saved DatasetDict would lose its split names: every split but the known ones was train."""
    (tmp_path / "train.txt").write_text("".join(f"{s}\n" for s in SENTENCES))
    assert _load(tmp_path / "train.txt", tmp_path) == SENTENCES
    datasets.Dataset.from_dict({"text": SENTENCES}).save_to_disk(tmp_path / "one")
    assert _load(tmp_path / "one", tmp_path) == SENTENCES
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": SENTENCES[:2]}),
                                   "held_out": datasets.Dataset.from_dict({"text": SENTENCES[2:]})})
    splits.save_to_disk(tmp_path / "dict")
    assert _load(tmp_path / "dict", tmp_path, hf_split="held_out") == SENTENCES[2:]
    with pytest.raises(UserError, match=r"dict has no split 'test' \(--set hf_split\); its splits: train, held_out"):
        _load(tmp_path / "dict", tmp_path, hf_split="test")


def test_datasets_bars_follow_quiet(tmp_path, capfd):
    """--quiet still printed datasets' "Generating train split" bar."""
    _load(_parquet(tmp_path / "quiet", {"text": SENTENCES}), tmp_path, bars=False)
    assert "Generating" not in capfd.readouterr().err
    _load(_parquet(tmp_path / "shown", {"text": SENTENCES}), tmp_path, bars=True)
    assert "Generating train split" in capfd.readouterr().err


@pytest.mark.parametrize("whole", [True, False])
def test_a_saved_folder_whose_state_names_a_file_outside_it_is_refused(tmp_path, whole):
    """A save_to_disk folder's state.json names its Arrow files, and load_from_disk read "../other/..." as well:
    rows from outside the folder, which its fingerprint (the folder's files) does not cover, so a run on changed data
    kept its id. Refused, naming the file, whether the folder holds a Dataset or a DatasetDict's split."""
    import json

    datasets.Dataset.from_dict({"text": ["from outside ."] * 3}).save_to_disk(tmp_path / "other")
    saved, rows = tmp_path / "mine", datasets.Dataset.from_dict({"text": SENTENCES})
    rows.save_to_disk(saved) if whole else datasets.DatasetDict({"train": rows}).save_to_disk(saved)
    state = saved / "state.json" if whole else saved / "train" / "state.json"
    fields = json.loads(state.read_text())
    fields["_data_files"] = [{"filename": f"{'../' * (1 if whole else 2)}other/data-00000-of-00001.arrow"}]
    state.write_text(json.dumps(fields))
    with pytest.raises(UserError) as err:
        _load(saved, tmp_path)
    assert str(err.value).startswith(f"{saved}: its state.json names ") and str(err.value).endswith(
        "other/data-00000-of-00001.arrow, outside the dataset's folder; a dataset's files are inside its folder")
