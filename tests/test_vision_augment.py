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


@pytest.mark.parametrize("subsets", [True, False], ids=["cpu-subsets", "accelerator-where"])
def test_jitter_applies_each_images_own_order_of_the_operations(subsets, monkeypatch):
    """Per image, the four operations in its own drawn order with its own factors (as torchvision draws them),
    on both paths: the CPU's subsets of images and the accelerator's choice on the device."""
    monkeypatch.setattr(aug, "SUBSETS_ON", frozenset({"cpu"}) if subsets else frozenset())
    n = 48
    x = torch.rand(n, 3, 5, 5)
    torch.manual_seed(7)
    out = aug.color_jitter(x)
    torch.manual_seed(7)  # the same draws, in color_jitter's order: the factors and p, then the order keys
    u, order = torch.rand(5, n), torch.rand(n, 4).argsort(dim=1)
    assert len({tuple(o) for o in order.tolist()}) > 1  # the images do not share one order
    for i in range(n):
        expected = x[i:i + 1]
        if u[4, i] < aug.JITTER_P:
            for k in order[i].tolist():
                expected = aug.JITTER_OPS[k](expected, u[k, i:i + 1], aug.JITTER[k])
        assert torch.allclose(out[i:i + 1], expected, atol=1e-6), i


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


def test_hsv_matches_colorsys_per_pixel():
    import colorsys

    torch.manual_seed(1)
    x = torch.rand(2, 3, 4, 5)
    x[0, :, 0, 0] = torch.tensor([0.3, 0.3, 0.3])  # grey: hue and saturation 0
    x[0, :, 0, 1] = torch.tensor([0.8, 0.8, 0.1])  # a tie for the maximum
    hsv = aug.rgb_to_hsv(x)
    for b, i, j in ((b, i, j) for b in range(2) for i in range(4) for j in range(5)):
        expected = colorsys.rgb_to_hsv(*x[b, :, i, j].tolist())
        assert hsv[b, :, i, j].tolist() == pytest.approx(expected, abs=1e-5)
    shifted = hsv.clone()
    shifted[:, 0] = (shifted[:, 0] + 0.37) % 1.0
    rgb = aug.hsv_to_rgb(shifted)
    for b, i, j in ((b, i, j) for b in range(2) for i in range(4) for j in range(5)):
        assert rgb[b, :, i, j].tolist() == pytest.approx(colorsys.hsv_to_rgb(*shifted[b, :, i, j].tolist()), abs=1e-5)


def test_hue_jitter_keeps_saturation_and_value_and_shifts_each_image_by_one_amount():
    torch.manual_seed(2)
    x = torch.rand(16, 3, 6, 6) * 0.8 + 0.1
    out = aug.color_jitter(x, strength=(0.0, 0.0, 0.0, 0.1), p=1.0)
    before, after = aug.rgb_to_hsv(x), aug.rgb_to_hsv(out)
    assert torch.allclose(before[:, 1:], after[:, 1:], atol=1e-5)
    shift = (after[:, 0] - before[:, 0] + 0.5) % 1.0 - 0.5  # signed, in (-0.5, 0.5]
    per_image = shift.flatten(1)
    assert (per_image - per_image[:, :1]).abs().max() < 1e-4
    assert per_image.abs().max() <= 0.1 + 1e-5 and per_image[:, 0].unique().numel() == 16


def test_brightness_jitter_scales_each_image_by_one_factor_in_range():
    torch.manual_seed(3)
    x = torch.rand(32, 3, 5, 5) * 0.5 + 0.1  # 1.4 x 0.6 < 1: nothing clips
    ratio = (aug.color_jitter(x, strength=(0.4, 0.0, 0.0, 0.0), p=1.0) / x).flatten(1)
    assert (ratio - ratio[:, :1]).abs().max() < 1e-5
    assert ratio.min() >= 0.6 - 1e-6 and ratio.max() <= 1.4 + 1e-6 and ratio[:, 0].std() > 0.1


def test_normalize_is_per_channel_standardisation():
    x = torch.rand(3, 3, 4, 4)
    mean, std = (0.1, 0.5, 0.9), (0.2, 0.3, 0.4)
    expected = torch.stack([(x[:, c] - mean[c]) / std[c] for c in range(3)], 1)
    assert torch.allclose(aug.normalize(x, mean, std), expected, atol=1e-6)


def test_crop_of_uint8_equals_crop_of_its_unit_floats():
    images = torch.randint(0, 256, (6, 3, 12, 12), dtype=torch.uint8)
    torch.manual_seed(4)
    from_uint8 = aug.random_resized_crop(images, 8, 0.3)
    torch.manual_seed(4)
    from_float = aug.random_resized_crop(images.float() / 255, 8, 0.3)
    assert torch.allclose(from_uint8, from_float, atol=1e-6)


def test_set_compiled_routes_every_pixel_function_through_torch_compile(monkeypatch):
    compiled = []

    def fake_compile(fn, **kwargs):
        compiled.append(fn.__name__)
        return fn

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(aug, "_compiled_fns", {})
    images = torch.randint(0, 256, (4, 3, 10, 10), dtype=torch.uint8)
    torch.manual_seed(5)
    eager = aug.normalize(aug.augment(images, "simclr", 8, 0.2), (0.5,) * 3, (0.25,) * 3)
    previous = aug.set_compiled(True)
    try:
        torch.manual_seed(5)
        routed = aug.normalize(aug.augment(images, "simclr", 8, 0.2), (0.5,) * 3, (0.25,) * 3)
    finally:
        aug.set_compiled(previous)
    assert torch.equal(eager, routed)  # the random draws stay outside the compiled functions
    assert {"_crop", "_choose", "_gray", "_affine"} <= set(compiled) and len(compiled) == len(set(compiled))


def test_crop_samples_the_grid_of_affine_grid():
    torch.manual_seed(6)
    x = torch.rand(8, 3, 12, 12)
    u = torch.rand(5, 8)
    got = aug._crop(x, u, 7, 0.2, True, 1.0)
    # The crop box from the same draws, through torch's affine_grid.
    area = 0.2 + 0.8 * u[0]
    ratio = torch.exp(torch.log(torch.tensor(3 / 4)) + torch.log(torch.tensor(16 / 9)) * u[1])
    w, h = (area * ratio).sqrt().clamp(max=1.0), (area / ratio).sqrt().clamp(max=1.0)
    theta = torch.zeros(8, 2, 3)
    theta[:, 0, 0] = torch.where(u[4] < 0.5, -w, w)
    theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = (2 * u[2] - 1) * (1 - w), h, (2 * u[3] - 1) * (1 - h)
    grid = torch.nn.functional.affine_grid(theta, [8, 3, 7, 7], align_corners=False)
    expected = torch.nn.functional.grid_sample(x, grid, padding_mode="reflection", align_corners=False)
    assert torch.allclose(got, expected, atol=1e-5)


def test_lab_stays_float32_under_autocast():
    x = torch.rand(2, 3, 4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lab = aug.rgb_to_lab(x)
    assert lab.dtype == torch.float32 and torch.allclose(lab, aug.rgb_to_lab(x))
