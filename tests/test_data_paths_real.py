"""The real data under the data root read as ``shared/data/MANIFEST.md`` describes it: CIFAR-10 from the hub's
parquet shards pixel for pixel (the manifest's whole-array digests, split sizes and class counts), MNIST's label
counts, and each TU set's files as the committed records fingerprint them. Skipped without the real data; CIFAR-10
decodes 60,000 PNGs (about 10 s on two cores), so that test is marked slow."""

from __future__ import annotations

import hashlib

import pytest

from domains.vision import data as vision_data

CIFAR_TRAIN_SHA256 = "47af8b02cfcfb6cdf3dbbd1969ad7f1b70f4413f6f80f437b020ee4e5bc8304a"
CIFAR_TEST_SHA256 = "d1246028f2cd1339d882924011f41ff5058e70f2c72cfc4b7ae5f00ba1f8a6ec"
MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
MNIST_TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
# The sha256 of each TU set's files as the committed records in leaderboards/results fingerprint them.
TU_SHA256 = {"MUTAG": "2b973df5", "PTC_MR": "41d676de", "ENZYMES": "e945ec4b", "PROTEINS": "f84dd47c",
             "IMDB-BINARY": "ffa94016", "DD": "83b78ac0", "REDDIT-BINARY": "3c0a6c7d"}


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.slow
def test_real_cifar10_from_the_hub_shards_is_pixel_exact(data_root, data_set):
    data_set("cifar10", "plain_text")
    d = vision_data.load("cifar10", data_root)
    for split, n, digest in ((d.train, 50000, CIFAR_TRAIN_SHA256), (d.test, 10000, CIFAR_TEST_SHA256)):
        pixels = split.images.permute(0, 2, 3, 1).contiguous().numpy()  # (N, 32, 32, 3), the manifest's layout
        assert pixels.shape == (n, 32, 32, 3)
        assert hashlib.sha256(pixels.tobytes()).hexdigest() == digest
        assert split.labels.bincount().tolist() == [n // 10] * 10
    assert d.num_classes == 10 and d.pretrain is d.train
    assert d.train.labels[:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]  # data_batch_1's first labels


def test_real_mnist_is_read_from_its_gzipped_files(data_root, data_set):
    data_set("MNIST", "raw")
    d = vision_data.load("mnist", data_root)
    assert d.train.labels.bincount().tolist() == MNIST_TRAIN_COUNTS
    assert d.test.labels.bincount().tolist() == MNIST_TEST_COUNTS
    assert d.train.images.shape == (60000, 3, 28, 28)


@pytest.mark.parametrize("name", sorted(TU_SHA256))
def test_real_tu_files_fingerprint_as_the_committed_records(data_root, data_set, name):
    from domains.graph import data as graph_data

    data_set("TU", name, "raw")
    assert graph_data.tu_files(name, data_root, False).sha256[:8] == TU_SHA256[name]
