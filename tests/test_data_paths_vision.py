"""The vision domain's data paths under damage: MNIST's idx files (read directly: no unpacked copy that could go
stale or serve another root), the hub's parquet shards (a missing shard, labels out of range, a damaged decoded
cache), the bias folders' file names, and the folder sets' fingerprint (their bytes, not where they lie). Every
set is written by the test; nothing is downloaded."""

from __future__ import annotations

import gzip
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from domains.errors import DatasetMissingError, UserError
from domains.vision import data, hub


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def write_mnist(root: Path, n_train: int = 20, n_test: int = 10, pixel: int = 0, first_label: int | None = None,
                gz: bool = True) -> Path:
    """A tiny MNIST in torchvision's layout: idx files (gzipped or plain) of random digits, labels 0..9 in turn."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        images[0, 0, 0] = pixel
        labels = (np.arange(n) % 10).astype(np.uint8)
        if first_label is not None:
            labels[0] = first_label
        for name, body in ((f"{prefix}-images-idx3-ubyte", struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes()),
                           (f"{prefix}-labels-idx1-ubyte", struct.pack(">II", 2049, n) + labels.tobytes())):
            if gz:
                (raw / f"{name}.gz").write_bytes(gzip.compress(body))
            else:
                (raw / name).write_bytes(body)
    return raw


def test_mnist_one_changed_pixel_is_read_and_changes_the_fingerprint(tmp_path):
    """The gzipped files were unpacked into the cache once and the unpacked copy then served every later run: a
    changed file was never read again, so neither the data nor the fingerprint changed."""
    write_mnist(tmp_path / "root")
    before = data.load("mnist", tmp_path / "root")
    write_mnist(tmp_path / "root", pixel=7)
    after = data.load("mnist", tmp_path / "root")
    assert int(after.train.images[0, 0, 0, 0]) == 7 and int(before.train.images[0, 0, 0, 0]) == 0
    assert after.fingerprint != before.fingerprint
    assert data.load("mnist", tmp_path / "root").fingerprint == after.fingerprint  # nothing changed: the same


def test_mnist_of_another_root_is_never_served_from_the_first_roots_copy(tmp_path):
    write_mnist(tmp_path / "a")
    write_mnist(tmp_path / "b", n_train=30)
    assert len(data.load("mnist", tmp_path / "a").train) == 20
    assert len(data.load("mnist", tmp_path / "b").train) == 30
    assert len(data.load("biased-mnist", tmp_path / "b").train) == 30


def test_mnist_plain_and_gzipped_idx_files_give_the_same_set(tmp_path):
    write_mnist(tmp_path / "gz")
    write_mnist(tmp_path / "plain", gz=False)
    assert data.load("mnist", tmp_path / "gz").fingerprint["splits"] == \
        data.load("mnist", tmp_path / "plain").fingerprint["splits"]


def test_mnist_truncated_file_is_named(tmp_path):
    raw = write_mnist(tmp_path / "root")
    shard = raw / "train-images-idx3-ubyte.gz"
    shard.write_bytes(shard.read_bytes()[:200])
    with pytest.raises(UserError, match=r"train-images-idx3-ubyte\.gz cannot be read"):
        data.load("mnist", tmp_path / "root")
    plain = write_mnist(tmp_path / "plain", gz=False) / "t10k-labels-idx1-ubyte"
    plain.write_bytes(plain.read_bytes()[:-3])
    with pytest.raises(UserError, match=r"t10k-labels-idx1-ubyte holds 7 bytes of data where its header announces 10"):
        data.load("mnist", tmp_path / "plain")


def test_mnist_label_out_of_range_and_foreign_file_are_named(tmp_path):
    write_mnist(tmp_path / "root", first_label=12)
    with pytest.raises(UserError, match=r"train-labels-idx1-ubyte\.gz: label 12 of row 0 is not a digit"):
        data.load("mnist", tmp_path / "root")
    raw = write_mnist(tmp_path / "swapped")
    (raw / "t10k-images-idx3-ubyte.gz").write_bytes((raw / "t10k-labels-idx1-ubyte.gz").read_bytes())
    with pytest.raises(UserError, match=r"t10k-images-idx3-ubyte\.gz is not an MNIST images file"):
        data.load("biased-mnist", tmp_path / "swapped")


def test_mnist_images_and_labels_of_different_lengths(tmp_path):
    raw = write_mnist(tmp_path / "root")
    write_mnist(tmp_path / "other", n_train=25)
    (raw / "train-labels-idx1-ubyte.gz").write_bytes((tmp_path / "other/MNIST/raw/train-labels-idx1-ubyte.gz")
                                                     .read_bytes())
    with pytest.raises(UserError, match="holds 20 images but .* 25 labels"):
        data.load("mnist", tmp_path / "root")


def test_mnist_missing_file_still_lists_both_layouts(tmp_path):
    raw = write_mnist(tmp_path / "root")
    (raw / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DatasetMissingError, match="in either layout"):
        data.load("mnist", tmp_path / "root")


# ---------------------------------------------------------------------------------- the hub's parquet shards

datasets = pytest.importorskip("datasets")


def write_shards(folder: Path, splits: dict[str, list[int]], labels: dict[str, list[int]] | None = None) -> Path:
    """``folder/plain_text/<split>-0000i-of-0000n.parquet``, one shard per list entry, each of 8 random 8x8 images."""
    from PIL import Image

    rng = np.random.default_rng(1)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(names=list("abc"))})
    for split, shards in splits.items():
        for i, rows in enumerate(shards):
            images = [Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)) for _ in range(rows)]
            ys = (labels or {}).get(f"{split}{i}", [r % 3 for r in range(rows)])
            path = folder / "plain_text" / f"{split}-{i:05d}-of-{len(shards):05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            datasets.Dataset.from_dict({"img": images, "label": ys}, features=features).to_parquet(str(path))
    return folder


def test_hub_missing_shard_is_named_not_a_smaller_split(tmp_path):
    folder = write_shards(tmp_path / "cifar10", {"train": [8, 8, 8], "test": [8]})
    assert len(data.load("cifar10", tmp_path).train) == 24
    (folder / "plain_text" / "train-00001-of-00003.parquet").unlink()
    with pytest.raises(UserError, match=r"plain_text: 1 of 3 shards of train missing "
                                        r"\(train-00001-of-00003\.parquet\)"):
        data.load("cifar10", tmp_path)


def test_hub_label_out_of_range_is_named_by_shard_and_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = write_shards(tmp_path / "set", {"train": [8, 8], "test": [8]})
    shard = folder / "plain_text" / "train-00001-of-00002.parquet"
    table = pq.read_table(shard)
    bad = pa.array([0, 1, 2, 7, 0, 1, 2, 0], type=table.schema.field("label").type)
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label", bad), shard)
    with pytest.raises(UserError, match=r"train-00001-of-00002\.parquet: the label in row 3: label 7 is not a class "
                                        r"index 0\.\.2 \(1 such rows in the train split\)"):
        data.load(f"hf:{folder}", tmp_path)


def test_hub_unlabelled_rows_in_a_labelled_split_are_refused(tmp_path):
    folder = write_shards(tmp_path / "set", {"train": [8], "test": [8]}, labels={"test0": [0, 1, 2, -1, 0, 1, 2, 0]})
    with pytest.raises(UserError, match=r"test-00000-of-00001\.parquet: the label in row 3: label -1"):
        data.load(f"hf:{folder}", tmp_path)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign"])
def test_hub_damaged_decoded_cache_is_named_and_rebuilt(tmp_path, cache, damage):
    folder = write_shards(tmp_path / "set", {"train": [8], "test": [8]})
    first = data.load(f"hf:{folder}", tmp_path)
    (path,) = (cache / "vision-hub").glob("*.pt")
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:300])
    elif damage == "garbage":
        path.write_bytes(b"not a torch file")
    else:  # a sound file of other images under this key
        fields = torch.load(path, weights_only=True)
        fields["train"] = (torch.zeros(3, 3, 8, 8, dtype=torch.uint8), torch.zeros(3, dtype=torch.int64))
        fields["source"] = {**fields["source"], "files": {"other.parquet": "0"}}
        torch.save(fields, path)
    with pytest.warns(UserWarning, match=f"the decoded-image cache {path} is damaged"):
        again = data.load(f"hf:{folder}", tmp_path)
    assert torch.equal(again.train.images, first.train.images) and again.fingerprint == first.fingerprint
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten: sound now
        hub.load(folder)


# ---------------------------------------------------------------------------------------------- image folders


def _bias_set(root: Path, names: list[str], colour: int = 10) -> None:
    from PIL import Image

    for rel in names:
        (root / "cifar10c" / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (colour, 10, 10)).save(root / "cifar10c" / rel)


BIAS_FILES = ["0.5pct/align/0/a_0_0.png", "0.5pct/conflict/1/c_1_0.png", "test/0/d_0_1.png", "test/1/e_1_1.png"]


def test_bias_folder_with_a_stray_file_names_it(tmp_path):
    _bias_set(tmp_path, BIAS_FILES)
    (tmp_path / "cifar10c" / "0.5pct" / "align" / "0" / "notes.txt").write_text("x")
    with pytest.raises(UserError, match=r"align/0/notes\.txt: the file name does not end in _<label>_<bias>"):
        data.load("corrupted-cifar10", tmp_path)


def test_folder_fingerprint_follows_the_bytes_not_the_machines_path(tmp_path):
    _bias_set(tmp_path / "a", BIAS_FILES)
    _bias_set(tmp_path / "b", BIAS_FILES)
    first = data.load("corrupted-cifar10", tmp_path / "a").fingerprint
    assert data.load("corrupted-cifar10", tmp_path / "b").fingerprint == first  # same files elsewhere: the same
    _bias_set(tmp_path / "b", BIAS_FILES[2:3], colour=11)  # one test image changed
    assert data.load("corrupted-cifar10", tmp_path / "b").fingerprint != first


def test_a_damaged_torchvision_folder_is_named_not_reported_missing(tmp_path):
    """torchvision's "Dataset not found or corrupted" read as "cifar10 not found ... in either layout" for a folder
    that is there with a damaged file."""
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
                 "batches.meta"):
        (folder / name).write_bytes(b"truncated")
    with pytest.raises(UserError, match=r"cifar-10-batches-py: torchvision cannot read it .* missing, truncated or "
                                        r"damaged") as raised:
        data.load("cifar10", tmp_path)
    assert not isinstance(raised.value, DatasetMissingError)


@pytest.mark.parametrize("percent", ["../../cifar10c/elsewhere", "/etc", ".."])
def test_bias_percent_names_a_folder_never_a_path(tmp_path, percent):
    _bias_set(tmp_path / "root", BIAS_FILES)
    _bias_set(tmp_path, ["elsewhere/align/0/x_0_0.png", "elsewhere/conflict/0/y_0_1.png"])
    with pytest.raises(UserError, match="is not a folder name"):
        data.load("corrupted-cifar10", tmp_path / "root", bias_percent=percent)


def test_named_set_shares_its_train_split_for_pretraining_and_fingerprints_it_once(tmp_path, monkeypatch):
    """``cifar10`` from the hub's shards: pretraining and linear evaluation were two copies of one split, each
    hashed for the fingerprint (and each moved to the device)."""
    write_shards(tmp_path / "cifar10", {"train": [8], "test": [8]})
    hashed = []
    tensor_hash = data._tensor_hash
    monkeypatch.setattr(data, "_tensor_hash", lambda t: hashed.append(t.shape) or tensor_hash(t))
    d = data.load("cifar10", tmp_path)
    assert d.pretrain is d.train
    assert len(hashed) == 4  # pixels and labels of train, then of test
