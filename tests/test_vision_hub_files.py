"""Which files an ``hf:<folder>`` set reads: its own files only (the parquet shards, or an image folder's
``train/<class>/*.png``), each hashed into the fingerprint and the decoded-image cache key; never an image file a
parquet row names by path, nor a file a ``README.md``'s ``configs: data_files`` names outside the folder. And a set
whose training pixels are constant, or whose probe training set the evaluation cannot score, is refused at load
time. Every set here is a few random 8x8 PNGs."""

from __future__ import annotations

import io
import types
from pathlib import Path

import numpy as np
import pytest
from tiny_domain import harness

from domains.errors import UserError
from domains.vision import data

datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")

SIZES = {"train": 12, "test": 4}
FEATURES = {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _png(seed: int, constant: bool = False) -> bytes:
    pixels = np.zeros((8, 8, 3), np.uint8) if constant else \
        np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def _write_set(folder: Path, images: dict[str, list[dict]], labels: dict[str, list[int]] | None = None,
               features: dict | None = None) -> Path:
    """``folder/data/<split>-00000-of-00001.parquet`` holding ``images`` (the Image feature's rows: bytes, path) and
    ``labels`` by split (default: alternately 0 and 1), of ``features`` (default FEATURES)."""
    for split, rows in images.items():
        path = folder / "data" / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        table = {"image": rows, "label": labels[split] if labels else [i % 2 for i in range(len(rows))]}
        datasets.Dataset.from_dict(table, features=datasets.Features(features or FEATURES)).to_parquet(str(path))
    return folder


def _bytes_rows(constant: bool = False) -> dict[str, list[dict]]:
    return {split: [{"bytes": _png(i, constant), "path": None} for i in range(n)] for split, n in SIZES.items()}


def test_a_parquet_row_naming_an_image_file_is_refused_by_shard_and_row(tmp_path):
    # The file lies outside the set: neither the fingerprint nor the cache key would cover it, so an edited image
    # would give the old run id, and even --force the old decoded pixels.
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(_png(0))
    rows = _bytes_rows()
    rows["train"][3] = {"bytes": None, "path": str(outside)}
    folder = _write_set(tmp_path / "set", rows)
    with pytest.raises(UserError) as err:
        data.load(f"hf:{folder}", tmp_path)
    message = str(err.value)
    assert message.startswith(f"{folder / 'data' / 'train-00000-of-00001.parquet'}: the image in row 3 holds no "
                              f"bytes but the path {outside}, which is not one of the dataset's own files")


def test_an_image_folder_reads_its_own_files_and_an_edited_one_is_a_new_fingerprint(tmp_path):
    folder = tmp_path / "folder"
    for split, n in SIZES.items():
        for i in range(n):
            (folder / split / str(i % 2)).mkdir(parents=True, exist_ok=True)
            (folder / split / str(i % 2) / f"{i}.png").write_bytes(_png(i))
    before = data.load(f"hf:{folder}", tmp_path)
    assert len(before.train.images) == SIZES["train"] and before.num_classes == 2
    assert len(before.fingerprint["source"]["files"]) == sum(SIZES.values())
    (folder / "train" / "0" / "0.png").write_bytes(_png(99))
    after = data.load(f"hf:{folder}", tmp_path)
    assert after.fingerprint != before.fingerprint
    assert not np.array_equal(after.train.images.numpy(), before.train.images.numpy())  # decoded again


def test_readme_data_files_outside_the_folder_are_refused(tmp_path):
    other = _write_set(tmp_path / "other", _bytes_rows())
    folder = tmp_path / "root" / "mine"
    folder.mkdir(parents=True)
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
        "    path: ../../other/data/train-*.parquet\n  - split: test\n"
        f"    path: {other}/data/test-*.parquet\n---\n")
    with pytest.raises(UserError) as err:
        data.load("hf:mine", tmp_path / "root")  # a name under the data root
    first = other / "data" / "test-00000-of-00001.parquet"
    assert str(err.value) == (f"{folder}: its README.md's data_files name {first} and 1 more, outside the dataset's "
                              "folder; a dataset's files are inside its folder")


def test_constant_training_pixels_are_refused_at_load_time(tmp_path):
    folder = _write_set(tmp_path / "black", _bytes_rows(constant=True))
    with pytest.raises(UserError, match=r"every training image has the same value in channel R, G, B \(pixel std 0\)"):
        data.load(f"hf:{folder}", tmp_path)


def test_a_hub_sets_rows_may_name_its_downloads_in_the_harness_datasets_cache_and_nothing_else(tmp_path, cache):
    """A hub image-folder repo's rows hold no bytes but the paths of its files as ``datasets`` downloaded them,
    into the cache the harness gives it (cache_dir()/hf-datasets; the URLs, pinned by commit, are the
    fingerprint's): those are read. A path elsewhere, one that leaves the cache by ``..``, or a link in the cache to
    a file elsewhere is refused. A fake builder and files: no network."""
    from types import SimpleNamespace

    from domains.vision.hub_reader import check_image_paths

    builder = SimpleNamespace(config=SimpleNamespace(data_files={"train": ["hf://datasets/user/set@0123abc/train/a/0.png"]}))
    downloads = cache / "hf-datasets" / "downloads"
    downloads.mkdir(parents=True)
    (downloads / "5e1f0c").write_bytes(_png(0))
    check_image_paths(builder, "user/set", "train", [_png(1), str(downloads / "5e1f0c")])
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(_png(2))
    (downloads / "link").symlink_to(outside)
    for path in (outside, downloads / ".." / ".." / ".." / "elsewhere.png", downloads / "link"):
        with pytest.raises(UserError) as err:
            check_image_paths(builder, "user/set", "train", [_png(1), str(path)])
        assert str(err.value).startswith(f"hub dataset 'user/set': image 1 of the train split holds no bytes but "
                                         f"the path {path}, which is not one of the dataset's own files"), err.value


def test_a_folder_with_a_dataset_script_is_one_error_and_runs_no_code(tmp_path):
    """``datasets`` runs no loading script any more: it raised a RuntimeError, which reached the user as a
    traceback. It is one error naming the script, and the script's code never ran."""
    folder = tmp_path / "scripted"
    for i in range(4):
        (folder / "train" / str(i % 2)).mkdir(parents=True, exist_ok=True)
        (folder / "train" / str(i % 2) / f"{i}.png").write_bytes(_png(i))
    ran = tmp_path / "ran"
    (folder / "scripted.py").write_text(f"open({str(ran)!r}, 'w').write('the script ran')\n")
    with pytest.raises(UserError, match=r"no dataset files that datasets can read \(.*scripted\.py"):
        data.load(f"hf:{folder}", tmp_path)
    assert not ran.exists()


def test_another_runtime_error_of_datasets_is_not_called_the_users_input(tmp_path):
    """Only datasets' refusal of a dataset script is the user's error: any other RuntimeError while loading (a
    fault in datasets or the harness) surfaces as itself, not as 'no dataset files that datasets can read'."""
    from domains.hub_datasets import builder_for
    from domains.vision.hub import WORDING

    def fails(*args, **kwargs):
        raise RuntimeError("an unrelated fault")

    (tmp_path / "set").mkdir()
    with pytest.raises(RuntimeError, match="^an unrelated fault$"):
        builder_for(types.SimpleNamespace(load_dataset_builder=fails), tmp_path / "set", WORDING)


def _vision_run(dataset: str, results: Path, cache: Path):
    """A one-epoch vision run of ``dataset`` on the CPU, small enough for 8x8 images and a dozen of them."""
    return harness("run", "--domain", "vision", "--dataset", dataset, "--loss", "infonce", "--seeds", "0",
                   "--device", "cpu", "--set", "epochs=1", "--set", "arch=small", "--set", "batch_size=4",
                   "--set", "linear_epochs=1", "--set", "proj_dim=16", "--results", str(results),
                   env={"HARNESS_CACHE_DIR": str(cache)}, timeout=300)


@pytest.mark.parametrize("labels, said", [([0] * 12, "are of 1 class;"), (list(range(12)), "are of 12 classes;")])
def test_a_probe_set_whose_classes_the_evaluation_cannot_score_is_refused_before_training(tmp_path, cache, labels,
                                                                                         said):
    """The evaluation's class structure needs 2 classes or more, and more images than classes: a probe training set
    of one class, or of one image per class, trained, then failed with 'ValueError: class_structure needs at least
    2 classes and more rows than classes'. The data decides it: refused before training, naming the set."""
    features = {**FEATURES, "label": datasets.ClassLabel(names=[f"c{k}" for k in range(12)])}
    folder = _write_set(tmp_path / "set", _bytes_rows(), {"train": labels, "test": [0, 1, 2, 3]}, features)
    results = tmp_path / "results"
    out = _vision_run(f"hf:{folder}", results, cache)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"error: hf:{folder}: its 12 training images (the linear probe's set"), out.stderr
    assert f"{said} the evaluation needs 2 classes or more, and more images than classes" in out.stderr
    assert not results.exists()


@pytest.mark.parametrize("train, test, refused", [(8, 12, True), (10, 4, False)])
def test_a_training_split_below_the_evaluations_minimum_is_refused_before_training(tmp_path, cache, train, test,
                                                                                   refused):
    """The evaluation's class structure (losses.prior.class_structure) needs MIN_ROWS (10) probe training images:
    with 8 the run trained, then failed with a traceback-like 'ValueError: class_structure needs at least 10
    embeddings'. It is refused before training, naming the set and the count; 10 images run to completion."""
    folder = tmp_path / "small"
    for split, n in (("train", train), ("test", test)):
        for i in range(n):
            (folder / split / str(i % 2)).mkdir(parents=True, exist_ok=True)
            (folder / split / str(i % 2) / f"{i}.png").write_bytes(_png(i + 100 * (split == "test")))
    results = tmp_path / "results"
    out = _vision_run(f"hf:{folder}", results, cache)
    if refused:
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"error: hf:{folder}: 8 training images"), out.stderr
        assert "the evaluation needs at least 10" in out.stderr and not results.exists()
    else:
        assert out.returncode == 0, out.stderr
