"""Image sets in the Hugging Face format (``hf:<folder>``, and the hub's layout of ``cifar10`` under the data
root), and the lightly CIFAR-10 benchmark preset. Every set here is written by the test from scikit-learn's
embedded digits: parquet shards in the hub's layout with ``ClassLabel`` features, nothing downloaded."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import domains
from domains.base import RunSpec
from domains.errors import DatasetMissingError, UserError
from domains.files import hash_files
from domains.vision import augment, data, hub, image_decoding
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.images import FolderImages

datasets = pytest.importorskip("datasets")
Image = pytest.importorskip("PIL.Image")

N_TRAIN, N_TEST = 240, 60
SHARD = "plain_text/{}-00000-of-00001.parquet"  # the layout of uoft-cs/cifar10 on the hub


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray]:
    """300 grey 8x8 digits as uint8 and their labels: the reference every loaded set is checked against."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = np.round(bunch.images[: N_TRAIN + N_TEST] * 255.0 / 16.0).astype(np.uint8)
    return pixels, bunch.target[: N_TRAIN + N_TEST].astype(np.int64)


def write_shards(folder: Path, pixels: np.ndarray, labels: np.ndarray, splits: dict[str, slice],
                 columns: tuple[str, str | None] = ("img", "label"), shard: str = SHARD) -> Path:
    """``folder`` in the hub's layout: one parquet shard per split, images as PNG bytes (``Image`` feature)."""
    image_column, label_column = columns
    features = {image_column: datasets.Image()}
    if label_column:
        features[label_column] = datasets.ClassLabel(names=[str(c) for c in range(10)])
    for split, rows in splits.items():
        table = {image_column: [Image.fromarray(p) for p in pixels[rows]]}
        if label_column:
            table[label_column] = labels[rows].tolist()
        else:
            table["digit_id"] = list(range(len(pixels[rows])))
            features["digit_id"] = datasets.Value("int64")
        path = folder / shard.format(split)
        path.parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict(table, features=datasets.Features(features)).to_parquet(str(path))
    return folder


SPLITS = {"train": slice(0, N_TRAIN), "test": slice(N_TRAIN, N_TRAIN + N_TEST)}


@pytest.fixture(scope="module")
def hub_root(tmp_path_factory, digits) -> Path:
    """A data root holding ``cifar10/`` in the hub's layout (the digits standing in for CIFAR-10)."""
    root = tmp_path_factory.mktemp("root")
    write_shards(root / "cifar10", *digits, SPLITS)
    return root


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh harness cache per test: every test decodes for itself."""
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _rgb(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(pixels)[:, None].expand(-1, 3, -1, -1)


def test_hf_folder_gives_the_pngs_pixels_as_rgb_with_their_labels(hub_root, digits):
    pixels, labels = digits
    d = data.load(f"hf:{hub_root / 'cifar10'}", Path("/nonexistent"))
    assert d.train.images.dtype == torch.uint8 and d.image_size == 8 and d.num_classes == 10
    assert torch.equal(d.train.images, _rgb(pixels[:N_TRAIN])) and torch.equal(d.test.images, _rgb(pixels[N_TRAIN:]))
    assert d.train.labels.tolist() == labels[:N_TRAIN].tolist() and d.test.labels.tolist() == labels[N_TRAIN:].tolist()
    assert d.pretrain is d.train
    reference = pixels[:N_TRAIN] / 255.0  # normalised with the training pixels' statistics
    assert d.mean == pytest.approx((reference.mean(),) * 3) and d.std == pytest.approx((reference.std(),) * 3)
    # under the data root, the folder's name is enough
    assert torch.equal(data.load("hf:cifar10", hub_root).train.images, d.train.images)


def test_cifar10_name_reads_the_hub_layout_and_fingerprints_the_files_read(hub_root, digits):
    d = data.load("cifar10", hub_root)
    assert torch.equal(d.train.images, _rgb(digits[0][:N_TRAIN])) and d.mean == data.CIFAR_STATS[0]
    files = d.fingerprint["source"]["files"]
    assert files == {SHARD.format(s): hash_files([hub_root / "cifar10" / SHARD.format(s)]) for s in SPLITS}
    assert d.fingerprint["source"]["columns"] == ["img", "label"]
    assert data.load("cifar10", hub_root).fingerprint == d.fingerprint


def test_a_changed_shard_changes_the_fingerprint(tmp_path, digits):
    pixels, labels = digits
    folder = write_shards(tmp_path / "set", pixels, labels, SPLITS)
    before = data.load(f"hf:{folder}", tmp_path).fingerprint
    flipped = labels.copy()
    flipped[0] = (flipped[0] + 1) % 10
    write_shards(folder, pixels, flipped, {"train": SPLITS["train"]})
    after = data.load(f"hf:{folder}", tmp_path)
    assert after.train.labels[0] == flipped[0]  # a new key: decoded again, not the stale cache
    test_shard = SHARD.format("test")
    assert after.fingerprint["source"]["files"][test_shard] == before["source"]["files"][test_shard]
    assert after.fingerprint["source"]["files"] != before["source"]["files"]


def test_second_load_reads_the_cache_and_decodes_nothing(hub_root, cache, monkeypatch):
    calls = []
    decode = hub.decode
    monkeypatch.setattr(hub, "decode", lambda *a, **k: calls.append(a[2]) or decode(*a, **k))
    first = data.load("cifar10", hub_root)
    assert sorted(calls) == ["test", "train"] and len(list((cache / "vision-hub").glob("*.pt"))) == 1

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(hub, "decode", no_decode)
    second = data.load("cifar10", hub_root)
    assert torch.equal(first.train.images, second.train.images) and first.fingerprint == second.fingerprint
    with pytest.raises(AssertionError, match="decoded again"):  # another size is another cache entry
        data.load("cifar10", hub_root, image_size=12)


def test_parallel_decoding_equals_serial_and_resizes_as_image_folders_do(tmp_path, monkeypatch, digits):
    rng = np.random.default_rng(0)
    shapes = [(8, 8), (10, 6), (5, 9), (8, 8)] * 40
    blobs, paths = [], []
    for i, (h, w) in enumerate(shapes):
        mode = "L" if i % 2 else "RGB"
        img = Image.fromarray(rng.integers(0, 256, (h, w) if mode == "L" else (h, w, 3), dtype=np.uint8), mode)
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        blobs.append(buf.getvalue())
        paths.append(tmp_path / f"{i}.png")
        img.save(paths[-1])
    monkeypatch.setattr(image_decoding, "CHUNK", 16)
    serial = image_decoding.decode(blobs, 7, workers=1)
    assert torch.equal(image_decoding.decode(blobs, 7, workers=2), serial)
    folder = FolderImages(paths, 7)  # the image-folder sets' rule: shorter side, antialiased, centre crop
    assert all(torch.equal(serial[i], folder[i]) for i in range(len(paths)))


def test_missing_label_column_names_the_columns(tmp_path, digits):
    folder = write_shards(tmp_path / "unlabelled", *digits, SPLITS, columns=("image", None))
    with pytest.raises(UserError, match=r"no label column .*columns: image, digit_id; name it with --set label_column"):
        data.load(f"hf:{folder}", tmp_path)
    with pytest.raises(UserError, match="no column 'kind'"):
        data.load(f"hf:{folder}", tmp_path, label_column="kind")
    # any integer column may serve as labels when named
    assert len(data.load(f"hf:{folder}", tmp_path, label_column="digit_id").train) == N_TRAIN


def test_corrupted_shard_is_named(tmp_path, digits):
    folder = write_shards(tmp_path / "cifar10", *digits, SPLITS)
    shard = folder / SHARD.format("train")
    whole = shard.read_bytes()
    shard.write_bytes(whole[: len(whole) // 2])  # an interrupted download: no footer
    for name in ("cifar10", f"hf:{folder}"):
        with pytest.raises(UserError, match=f"{shard}.*not a readable parquet file"):
            data.load(name, tmp_path)
    damaged = bytearray(whole)  # a sound footer over damaged pages: found when the pages are read
    damaged[len(whole) // 3: len(whole) // 3 + 2000] = bytes(2000)
    shard.write_bytes(bytes(damaged))
    with pytest.raises(UserError, match=re.escape(str(shard))):  # in a page, or in an image's bytes
        data.load("cifar10", tmp_path)


def test_real_mnist_in_the_hub_layout_equals_torchvisions(data_root, data_set, tmp_path):
    """The hub's layout of MNIST (``mnist/mnist/*.parquet``, as ylecun/mnist), written from the real idx files:
    the same pixels and labels as torchvision's reader gives, for ``mnist`` and for ``biased-mnist``."""
    data_set("MNIST", "raw")
    real = data.load("mnist", data_root)
    features = datasets.Features({"image": datasets.Image(),
                                  "label": datasets.ClassLabel(names=[str(c) for c in range(10)])})
    for split, images in (("train", real.train), ("test", real.test)):
        rows = slice(0, 300) if split == "train" else slice(0, 100)
        table = {"image": [Image.fromarray(x[0].numpy()) for x in images.images[rows]],
                 "label": images.labels[rows].tolist()}
        path = tmp_path / "root" / "mnist" / "mnist" / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        datasets.Dataset.from_dict(table, features=features).to_parquet(str(path))
    hub_set = data.load("mnist", tmp_path / "root")
    assert torch.equal(hub_set.train.images, real.train.images[:300]) and torch.equal(hub_set.test.images,
                                                                                         real.test.images[:100])
    assert torch.equal(hub_set.train.labels, real.train.labels[:300]) and hub_set.mean == data.MNIST_STATS[0]
    assert hub_set.fingerprint["source"]["columns"] == ["image", "label"]
    assert data.load("biased-mnist", tmp_path / "root").fingerprint["source"] == hub_set.fingerprint["source"]


def test_undecodable_image_is_named_by_split_and_row(tmp_path, digits):
    blobs = [io.BytesIO() for _ in range(3)]
    for buf, p in zip(blobs, digits[0]):
        Image.fromarray(p).save(buf, format="PNG")
    damaged = [b.getvalue() for b in blobs]
    damaged[1] = damaged[1][:20]
    with pytest.raises(image_decoding.UndecodableImage, match="image 1 of the test split cannot be decoded"):
        image_decoding.decode(damaged, 8, "test")


def test_missing_test_split_takes_a_seeded_stratified_split_and_says_so(tmp_path, digits):
    pixels, labels = digits
    folder = write_shards(tmp_path / "train-only", pixels, labels, {"train": slice(0, N_TRAIN + N_TEST)})
    with pytest.warns(UserWarning, match="no test split: the test set is a seeded, stratified 20% of train"):
        d = data.load(f"hf:{folder}", tmp_path)
    assert (len(d.train), len(d.test)) == (240, 60)
    everything = torch.cat([d.train.labels, d.test.labels]).sort().values
    assert everything.tolist() == sorted(labels.tolist())
    held = torch.bincount(d.test.labels, minlength=10).float() / torch.bincount(torch.from_numpy(labels), minlength=10)
    assert held.min() >= 0.1 and held.max() <= 0.3  # stratified: every class gives about a fifth
    rows: dict[bytes, set[int]] = {}  # each held-out image keeps its own label
    for p, y in zip(pixels, labels.tolist()):
        rows.setdefault(p.tobytes(), set()).add(y)
    assert all(y in rows[img[0].numpy().tobytes()] for img, y in zip(d.test.images, d.test.labels.tolist()))
    assert "seeded" in d.fingerprint["source"]["test_split"]
    with pytest.warns(UserWarning, match="no test split"):  # the cached set says it again, with the same split
        assert torch.equal(data.load(f"hf:{folder}", tmp_path).test.labels, d.test.labels)


def test_validation_split_tests_and_unlabeled_split_pretrains(tmp_path, digits):
    pixels, labels = digits
    unlabelled = labels.copy()
    unlabelled[200:260] = -1  # ClassLabel's "no label"
    folder = tmp_path / "stl-like"  # data/<split>-...: any split name (as the hub's STL-10 copy is laid out)
    splits = {"train": slice(0, 200), "unlabeled": slice(200, 260), "validation": slice(260, 300)}
    write_shards(folder, pixels, unlabelled, splits, shard="data/{}-00000-of-00001.parquet")
    with pytest.warns(UserWarning, match="no test split: the test set is the validation split"):
        d = data.load(f"hf:{folder}", tmp_path)
    assert (len(d.pretrain), len(d.train), len(d.test)) == (260, 200, 40)
    assert torch.equal(d.pretrain.images[200:], _rgb(pixels[200:260])) and d.pretrain.labels[200:].eq(-1).all()
    assert d.test.labels.tolist() == labels[260:300].tolist()
    # under a config folder datasets knows only train/test/validation without the README: the rest is named
    write_shards(tmp_path / "config", pixels, unlabelled, splits)
    with pytest.warns(UserWarning) as caught:
        assert len(data.load(f"hf:{tmp_path / 'config'}", tmp_path).pretrain) == 200
    assert any("reads no split from plain_text/unlabeled-00000-of-00001.parquet" in str(w.message) for w in caught)


def test_missing_dataset_lists_both_layouts_and_where(tmp_path):
    with pytest.raises(DatasetMissingError) as err:
        data.load("cifar10", tmp_path)
    message = str(err.value)
    for where in (tmp_path / "cifar-10-batches-py", tmp_path / "cifar10", tmp_path / "uoft-cs/cifar10"):
        assert str(where) in message
    assert "parquet" in message and "download=true" in message
    with pytest.raises(DatasetMissingError, match=str(tmp_path / "mnist")):
        data.load("mnist", tmp_path)


def test_hub_id_without_network_and_missing_folder_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="cannot load 'someone/some-images' from the Hugging Face hub.*hf:<folder>"):
        data.load("hf:someone/some-images", tmp_path)
    with pytest.raises(UserError, match="no folder /nonexistent/set"):
        data.load("hf:/nonexistent/set", tmp_path)
    assert "hf:someone/some-images" in domains.get("vision").datasets


def test_a_hub_id_without_network_fails_at_once_in_one_line(tmp_path, monkeypatch, capfd):
    """Where the hub's host does not resolve, datasets retried each request five times over 25 s, printing each
    retry; now it is put in offline mode for the call (its cache, or one line), and the mode is put back after."""
    from domains import hub_network

    def no_dns(*args, **kw):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(hub_network.socket, "getaddrinfo", no_dns)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    start, mode = time.monotonic(), datasets.config.HF_HUB_OFFLINE
    with pytest.raises(UserError, match=r"\(no network: huggingface.co does not resolve, so only datasets' cache was "
                                        r"read\); without a network, download it"):
        data.load("hf:someone/some-images", tmp_path)
    assert time.monotonic() - start < 10 and "Retry" not in "".join(capfd.readouterr())
    assert datasets.config.HF_HUB_OFFLINE is mode
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")  # a proxy may resolve what the machine cannot
    assert not hub_network.hub_unreachable()


def test_cifar_bench_presets_hold_lightlys_protocol():
    for name, epochs in (("cifar-bench", 200), ("cifar-bench-800", 800)):
        o = PRESETS[name].overrides
        assert o["epochs"] == epochs and (o["arch"], o["optimizer"], o["lr_decay"]) == ("resnet18", "sgd", "cosine")
        assert o["lr"] == pytest.approx(0.06 * o["batch_size"] / 128) and o["batch_size"] == 512
        assert (o["momentum"], o["weight_decay"], o["crop_min_scale"]) == (0.9, 5e-4, 0.08)
        assert (o["knn_k"], o["knn_temperature"], o["knn_every"]) == (200, 0.1, 1)
    # lightly's SimCLRCollateFunction(cj_strength=0.5): jitter 0.8·0.5 and 0.2·0.5, p 0.8; grayscale p 0.2
    assert augment.JITTER == (0.4, 0.4, 0.4, 0.1) and (augment.JITTER_P, augment.GRAY_P) == (0.8, 0.2)
    from domains.vision.models import encoder

    net = encoder("resnet18", 3, 32)  # lightly's ResNetGenerator('resnet-18'): 3x3 stride-1 stem, no max-pool
    assert (net.conv1.kernel_size, net.conv1.stride) == ((3, 3), (1, 1)) and isinstance(net.maxpool, torch.nn.Identity)


def test_cifar_bench_accepts_every_loss_of_the_domain():
    vision = domains.get("vision")
    base = replace(VisionConfig(), **PRESETS["cifar-bench"].overrides)
    for loss in vision.losses:
        methods = ("biased",) if loss in ("supcon", "eps_supcon", "eps_supinfonce", "ce") else ("simclr", "cmc", "moco")
        for method in methods:
            cfg = resolved(base, method, "cifar10")
            assert cfg.augment == "simclr" and cfg.arch == "resnet18"
            vision.validate(RunSpec("vision", method, "cifar10", loss, {}, "cifar-bench", 0, cfg))


def test_one_epoch_through_the_cli_on_the_hub_layout(hub_root, tmp_path):
    """``harness run`` on ``cifar10`` in the hub's layout with the cifar-bench preset, shrunk to one CPU epoch."""
    tiny = ["--set", "epochs=1", "--set", "arch=small", "--set", "batch_size=64", "--set", "linear_epochs=1",
            "--set", "proj_dim=16"]
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "vision", "--dataset", "cifar10", "--loss", "dcl",
           "--preset", "cifar-bench", *tiny, "--seeds", "0", "--device", "cpu", "--quiet",
           "--data-root", str(hub_root), "--results", str(tmp_path / "results")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = (tmp_path / "results").glob("*.json")
    record = json.loads(path.read_text())
    assert record["status"] == "completed" and record["config"]["lr_decay"] == "cosine"
    assert set(record["data_fingerprint"]["source"]["files"]) == {SHARD.format(s) for s in SPLITS}
    metrics, monitored = record["metrics"], [p["knn_top1"] for p in record["curve"]]
    assert len(monitored) == 1 and metrics["knn_best_top1"] == max(*monitored, metrics["knn_top1"])
    assert list((tmp_path / "cache" / "vision-hub").glob("*.pt"))
