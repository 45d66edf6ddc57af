"""Vision data: the Biased-MNIST colouring, the embedded digits, and missing-data errors."""

from __future__ import annotations

import math

import pytest
import torch

from domains.base import DatasetMissingError
from domains.vision import data


@pytest.mark.parametrize("rho", [0.999, 0.997, 0.99, 0.1])
def test_colour_assignment_fraction_equals_rho(rho):
    labels = torch.arange(10).repeat_interleave(2000)
    colour = data.assign_colours(labels, rho, torch.Generator().manual_seed(1))
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
    img = data.colourize(gray, torch.tensor([0, 5]))
    assert img[0, :, 0, 0].tolist() == data.COLOURS[0].tolist()
    assert img[1, :, 0, 0].tolist() == data.COLOURS[5].tolist()
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
    assert (corner == data.COLOURS[d.train.bias]).all(dim=1).float().mean() > 0.95
    assert data.load("biased-digits", "/nonexistent", rho=rho).fingerprint == d.fingerprint


def test_missing_torchvision_sets_say_where_to_put_the_files(tmp_path):
    for name, where in (("cifar10", "cifar-10-batches-py"), ("biased-mnist", "MNIST"), ("imagenet100", "imagenet100"),
                        ("corrupted-cifar10", "cifar10c")):
        with pytest.raises(DatasetMissingError, match=where):
            data.load(name, tmp_path)
