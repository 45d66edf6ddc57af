"""Vision augmentations: CMC's Lab views against published colour values, the batch-wise SimCLR ops."""

from __future__ import annotations

import pytest
import torch

from domains.vision import augment as aug

# CIE Lab (D65) of the sRGB primaries and white, as given by colour references (and scikit-image).
LAB = {(1.0, 0.0, 0.0): (53.2408, 80.0925, 67.2032), (0.0, 1.0, 0.0): (87.7347, -86.1827, 83.1793),
       (0.0, 0.0, 1.0): (32.2970, 79.1875, -107.8602), (1.0, 1.0, 1.0): (100.0, 0.0, 0.0),
       (0.0, 0.0, 0.0): (0.0, 0.0, 0.0), (0.5, 0.5, 0.5): (53.3890, 0.0, 0.0)}


def _image(rgb: tuple[float, float, float]) -> torch.Tensor:
    return torch.tensor(rgb).view(1, 3, 1, 1).expand(1, 3, 2, 2).contiguous()


@pytest.mark.parametrize("rgb", list(LAB))
def test_rgb_to_lab_known_values(rgb):
    lab = aug.rgb_to_lab(_image(rgb))[0, :, 0, 0]
    assert lab.tolist() == pytest.approx(LAB[rgb], abs=0.02)


def test_lab_views_split_and_normalise():
    x = torch.rand(4, 3, 8, 8)
    l, ab = aug.lab_views(x)
    assert l.shape == (4, 1, 8, 8) and ab.shape == (4, 2, 8, 8)
    lab = aug.rgb_to_lab(x)
    # L in [0, 100] maps to [-1, 1]; a and b map into [-1, 1] over the sRGB gamut (CMC's constants).
    assert torch.allclose(l, (lab[:, :1] - 50) / 50, atol=1e-5)
    assert ab.abs().max() <= 1.0 + 1e-4
    extremes = torch.eye(3).view(3, 3, 1, 1)  # the primaries reach the ends of the a and b ranges
    _, ab_ext = aug.lab_views(extremes)
    assert ab_ext.abs().max() == pytest.approx(1.0, abs=1e-3)


def test_hsv_round_trip_and_known_hue():
    x = torch.rand(3, 3, 5, 5)
    assert torch.allclose(aug.hsv_to_rgb(aug.rgb_to_hsv(x)), x, atol=1e-5)
    hsv = aug.rgb_to_hsv(_image((0.0, 1.0, 0.0)))
    assert hsv[0, :, 0, 0].tolist() == pytest.approx([1 / 3, 1.0, 1.0])


def test_jitter_and_grayscale_probabilities():
    torch.manual_seed(0)
    x = torch.rand(64, 3, 6, 6)
    assert torch.equal(aug.color_jitter(x, p=0.0), x)
    gray = aug.random_grayscale(x, p=1.0)
    assert torch.allclose(gray[:, 0], gray[:, 1]) and torch.allclose(gray[:, 1], gray[:, 2])
    jittered = aug.color_jitter(x, p=1.0)
    changed = (jittered - x).abs().flatten(1).amax(1) > 1e-4
    assert changed.all() and jittered.min() >= 0 and jittered.max() <= 1
    # Per-sample factors: two copies of one image get different brightness.
    same = x[:1].expand(8, -1, -1, -1)
    out = aug.color_jitter(same, strength=(0.4, 0.0, 0.0, 0.0), p=1.0)
    assert (out.flatten(1).mean(1).unique().numel()) > 1


def test_random_resized_crop_is_per_sample_and_in_range():
    torch.manual_seed(0)
    ramp = torch.linspace(0, 1, 16).view(1, 1, 1, 16).expand(32, 3, 16, 16).contiguous()
    out = aug.random_resized_crop(ramp, 8, min_scale=0.1, flip=False)
    assert out.shape == (32, 3, 8, 8)
    assert out.min() >= -1e-6 and out.max() <= 1 + 1e-6
    # Without flips the horizontal ramp stays increasing; its spans differ across samples.
    assert (out[:, 0, 0, 1:] >= out[:, 0, 0, :-1] - 1e-6).all()
    assert out[:, 0, 0, 0].unique().numel() > 10
    flipped = aug.random_resized_crop(ramp, 8, min_scale=0.5, flip=True)
    decreasing = (flipped[:, 0, 0, -1] < flipped[:, 0, 0, 0])
    assert 0 < int(decreasing.sum()) < 32


def test_augment_modes_and_center_crop():
    images = torch.randint(0, 256, (5, 3, 20, 20), dtype=torch.uint8)
    assert aug.augment(images, "simclr", 16, 0.2).shape == (5, 3, 16, 16)
    centre = aug.augment(images, "none", 16, 0.2)
    assert torch.equal(centre, images[:, :, 2:18, 2:18].float() / 255)
