"""Vision data: the Biased-MNIST colouring, the embedded digits, and missing-data errors."""

from __future__ import annotations

import math

import pytest
import torch

from domains.errors import DatasetMissingError
from domains.vision import colouring, data
from domains.vision.images import batches


@pytest.mark.parametrize("rho", [0.999, 0.997, 0.99, 0.1])
def test_colour_assignment_fraction_equals_rho(rho):
    labels = torch.arange(10).repeat_interleave(2000)
    colour = colouring.assign_colours(labels, rho, torch.Generator().manual_seed(1))
    aligned = (colour == labels).float().mean().item()
    assert aligned == pytest.approx(rho, abs=1e-3)
    for c in range(10):  # the conflicting samples of a class spread evenly over the 9 other colours
        other = colour[(labels == c) & (colour != c)]
        counts = torch.bincount(other, minlength=10)
        assert counts[c] == 0
        n_rest = 2000 - math.floor(2000 * rho + 1e-9)
        if n_rest >= 9:
            nonzero = counts[counts > 0]
            assert nonzero.max() - nonzero.min() <= math.ceil(n_rest / 9)


def test_colourize_puts_colour_on_the_background_and_white_on_the_digit():
    gray = torch.zeros(2, 1, 4, 4)
    gray[:, :, 1:3, 1:3] = 1.0
    img = colouring.colourize(gray, torch.tensor([0, 5]))
    assert img[0, :, 0, 0].tolist() == colouring.COLOURS[0].tolist()
    assert img[1, :, 0, 0].tolist() == colouring.COLOURS[5].tolist()
    assert img[:, :, 1, 1].eq(255).all()


def test_digits_split_is_fixed_and_stratified():
    d1 = data.load("digits", "/nonexistent")
    d2 = data.load("digits", "/nonexistent")
    assert (len(d1.train), len(d1.test)) == (1257, 540)
    assert d1.fingerprint == d2.fingerprint
    assert d1.train.images.dtype == torch.uint8 and d1.train.images.shape[1:] == (3, 16, 16)
    counts = torch.bincount(d1.test.labels, minlength=10)
    assert counts.min() >= 50 and counts.max() <= 56


@pytest.mark.parametrize("rho", [0.99, 0.997])
def test_biased_digits_fraction_and_unbiased_test(rho):
    d = data.load("biased-digits", "/nonexistent", rho=rho)
    smallest = int(torch.bincount(d.train.labels).min())
    aligned = (d.train.bias == d.train.labels).float().mean().item()
    assert aligned == pytest.approx(rho, abs=1.0 / smallest)
    assert aligned < 1.0  # there are bias-conflicting training samples
    test_aligned = (d.test.bias == d.test.labels).float().mean().item()
    assert test_aligned == pytest.approx(0.1, abs=0.03)
    # The background (the corner pixel, blank in every digit) carries the bias colour.
    corner = d.train.images[:, :, 0, 0].long()
    assert (corner == colouring.COLOURS[d.train.bias]).all(dim=1).float().mean() > 0.95
    assert data.load("biased-digits", "/nonexistent", rho=rho).fingerprint == d.fingerprint


def test_missing_torchvision_sets_say_where_to_put_the_files(tmp_path):
    for name, where in (("cifar10", "cifar-10-batches-py"), ("biased-mnist", "MNIST"), ("imagenet100", "imagenet100"),
                        ("corrupted-cifar10", "cifar10c")):
        with pytest.raises(DatasetMissingError, match=where):
            data.load(name, tmp_path)


def test_mnist_is_read_from_its_root_and_never_from_a_copy_in_the_cache(tmp_path, monkeypatch):
    """The gzipped idx files are read where they are: nothing is unpacked into the cache (a copy there served an
    older version of the files, or another root's), and a root without MNIST is reported missing."""
    import gzip
    import struct

    import numpy as np

    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    full = tmp_path / "full" / "MNIST" / "raw"
    full.mkdir(parents=True)
    for prefix, n in (("train", 3), ("t10k", 2)):
        with gzip.open(full / f"{prefix}-images-idx3-ubyte.gz", "wb") as fh:
            fh.write(struct.pack(">IIII", 2051, n, 28, 28) + np.full((n, 28, 28), 9, np.uint8).tobytes())
        with gzip.open(full / f"{prefix}-labels-idx1-ubyte.gz", "wb") as fh:
            fh.write(struct.pack(">II", 2049, n) + bytes(range(n)))
    d = data.load("mnist", tmp_path / "full")
    assert d.train.images.shape == (3, 3, 28, 28) and d.train.labels.tolist() == [0, 1, 2]
    assert not (tmp_path / "cache").exists()
    with pytest.raises(DatasetMissingError, match="MNIST"):
        data.load("mnist", tmp_path / "empty")


def test_imagenet100_is_the_cmc_list():
    assert len(data.IMAGENET100) == len(set(data.IMAGENET100)) == 100
    assert list(data.IMAGENET100) == sorted(data.IMAGENET100)
    assert {"n02869837", "n02090622", "n01558993"} <= set(data.IMAGENET100)


def test_bias_folder_reads_labels_and_bias_from_file_names(tmp_path):
    from PIL import Image

    base = tmp_path / "cifar10c"
    files = {"0.5pct/align/0/a_0_0.png": (0, 0), "0.5pct/align/1/b_1_1.png": (1, 1),
             "0.5pct/conflict/1/c_1_0.png": (1, 0), "test/0/d_0_1.png": (0, 1), "test/1/e_1_1.png": (1, 1)}
    for rel, (label, _) in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 30), (200 * label, 10, 10)).save(base / rel)
    d = data.load("corrupted-cifar10", tmp_path)
    assert len(d.train) == 3 and len(d.test) == 2 and d.image_size == 32
    assert d.train.labels.tolist() == [0, 1, 1] and d.train.bias.tolist() == [0, 1, 0]
    assert d.test.bias.tolist() == [1, 1]
    (idx, images), = batches(d.train, torch.arange(3), 8, drop_last=False)
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.uint8
    assert images[1, 0, 5, 5] == 200 and images[0, 0, 5, 5] == 0
