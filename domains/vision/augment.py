"""Batch-wise image augmentations on whatever device the batch is on (the GPU when there is one, so
data loading never bounds throughput), and the Lab views of CMC.

SimCLR's augmentation (Chen et al. 2020, as used by Chuang et al. 2020): random resized crop
(scale ``(s, 1)``, aspect ratio ``(3/4, 4/3)``) with a horizontal flip (p 0.5), colour jitter
(brightness 0.4, contrast 0.4, saturation 0.4, hue 0.1) with p 0.8, grayscale with p 0.2. Each sample
draws its own crop, flip and jitter factors; the order of the four jitter operations is drawn once
per batch (torchvision draws it per image). Images enter as uint8 ``[B, 3, H, W]`` and leave as float
in [0, 1]; :func:`normalize` or :func:`lab_views` follow.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

JITTER = (0.4, 0.4, 0.4, 0.1)
JITTER_P, GRAY_P = 0.8, 0.2
# CMC's Lab normalisation: each channel's range, from the sRGB gamut, mapped to [-1, 1].
LAB_MEAN = (50.0, (-86.183 + 98.233) / 2, (-107.857 + 94.478) / 2)
LAB_STD = (50.0, (86.183 + 98.233) / 2, (107.857 + 94.478) / 2)


def to_unit(images: Tensor) -> Tensor:
    """uint8 [0, 255] to float [0, 1]."""
    return images.float().div_(255.0)


def random_resized_crop(x: Tensor, size: int, min_scale: float, flip: bool = True) -> Tensor:
    """Per-sample crops of area fraction U(min_scale, 1) and log-uniform aspect ratio in [3/4, 4/3],
    resized bilinearly to ``size`` (one ``grid_sample``); a side longer than the image is clamped."""
    b = x.shape[0]
    dev = x.device
    area = torch.empty(b, device=dev).uniform_(min_scale, 1.0)
    log_ratio = torch.empty(b, device=dev).uniform_(math.log(3 / 4), math.log(4 / 3))
    w = (area * log_ratio.exp()).sqrt().clamp(max=1.0)  # fractions of the image width / height
    h = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
    cx = (torch.rand(b, device=dev) * 2 - 1) * (1 - w)  # centres in [-1, 1] keeping the crop inside
    cy = (torch.rand(b, device=dev) * 2 - 1) * (1 - h)
    sx = w * (torch.where(torch.rand(b, device=dev) < 0.5, -1.0, 1.0) if flip else 1.0)
    theta = torch.zeros(b, 2, 3, device=dev)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, cx, h, cy
    grid = F.affine_grid(theta, [b, x.shape[1], size, size], align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def center_crop(x: Tensor, size: int) -> Tensor:
    """The central ``size`` square (folders are stored slightly larger), else a resize to ``size``."""
    h, w = x.shape[-2:]
    if h >= size and w >= size:
        top, left = (h - size) // 2, (w - size) // 2
        return x[..., top:top + size, left:left + size]
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


def grayscale(x: Tensor) -> Tensor:
    """ITU-R 601 luma, [B, 1, H, W]."""
    return (0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3])


def rgb_to_hsv(x: Tensor) -> Tensor:
    r, g, b = x.unbind(1)
    maxc, argmax = x.max(1)
    minc = x.min(1).values
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    hue = torch.where(argmax == 0, ((g - b) / safe) % 6,
                      torch.where(argmax == 1, (b - r) / safe + 2, (r - g) / safe + 4))
    hue = torch.where(delta > 0, hue / 6.0, torch.zeros_like(hue))
    sat = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    return torch.stack([hue, sat, maxc], 1)


def hsv_to_rgb(x: Tensor) -> Tensor:
    h, s, v = x.unbind(1)
    h6 = (h % 1.0) * 6
    i = h6.floor()
    f = h6 - i
    p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
    i = i.long() % 6
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros_like(x)
    for k, (r, g, b) in enumerate(table):
        sel = (i == k).unsqueeze(1)
        out = torch.where(sel, torch.stack([r, g, b], 1), out)
    return out


def _factor(b: int, strength: float, device: torch.device) -> Tensor:
    return torch.empty(b, 1, 1, 1, device=device).uniform_(max(0.0, 1 - strength), 1 + strength)


def color_jitter(x: Tensor, strength: tuple[float, float, float, float] = JITTER, p: float = JITTER_P) -> Tensor:
    """Brightness, contrast, saturation and hue jitter with per-sample factors, applied with
    probability ``p`` per sample."""
    b, dev = x.shape[0], x.device
    bri, con, sat, hue = strength
    out = x
    for op in torch.randperm(4).tolist():
        if op == 0:
            out = (out * _factor(b, bri, dev)).clamp(0, 1)
        elif op == 1:
            mean = grayscale(out).mean(dim=(1, 2, 3), keepdim=True)
            out = ((out - mean) * _factor(b, con, dev) + mean).clamp(0, 1)
        elif op == 2:
            gray = grayscale(out)
            out = ((out - gray) * _factor(b, sat, dev) + gray).clamp(0, 1)
        else:
            hsv = rgb_to_hsv(out)
            shift = torch.empty(b, 1, 1, device=dev).uniform_(-hue, hue)
            hsv = torch.stack([hsv[:, 0] + shift, hsv[:, 1], hsv[:, 2]], 1)
            out = hsv_to_rgb(hsv)
    apply = (torch.rand(b, 1, 1, 1, device=dev) < p)
    return torch.where(apply, out, x)


def random_grayscale(x: Tensor, p: float = GRAY_P) -> Tensor:
    apply = torch.rand(x.shape[0], 1, 1, 1, device=x.device) < p
    return torch.where(apply, grayscale(x).expand_as(x), x)


def augment(images: Tensor, mode: str, size: int, min_scale: float) -> Tensor:
    """One augmented view in [0, 1]: ``simclr`` (crop, flip, jitter, grayscale), ``crop`` (crop and
    flip: CMC's) or ``none`` (the centre crop)."""
    x = to_unit(images)
    if mode == "none":
        return center_crop(x, size)
    x = random_resized_crop(x, size, min_scale)
    if mode == "simclr":
        x = random_grayscale(color_jitter(x))
    return x


def evaluation_view(images: Tensor, size: int) -> Tensor:
    return center_crop(to_unit(images), size)


def normalize(x: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    m = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=x.device).view(1, -1, 1, 1)
    return (x - m) / s


# sRGB (D65) to CIE XYZ, and the D65 white point (the constants of scikit-image's rgb2lab).
_RGB_TO_XYZ = ((0.412453, 0.357580, 0.180423), (0.212671, 0.715160, 0.072169), (0.019334, 0.119193, 0.950227))
_WHITE = (0.95047, 1.0, 1.08883)


def rgb_to_lab(x: Tensor) -> Tensor:
    """sRGB in [0, 1] ``[B, 3, H, W]`` to CIE Lab (L in [0, 100])."""
    lin = torch.where(x > 0.04045, ((x + 0.055) / 1.055).clamp_min(0) ** 2.4, x / 12.92)
    m = torch.tensor(_RGB_TO_XYZ, device=x.device, dtype=x.dtype)
    xyz = torch.einsum("ij,bjhw->bihw", m, lin) / torch.tensor(_WHITE, device=x.device).view(1, 3, 1, 1)
    f = torch.where(xyz > 0.008856, xyz.clamp_min(1e-12) ** (1 / 3), 7.787 * xyz + 16 / 116)
    fx, fy, fz = f.unbind(1)
    return torch.stack([116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)], 1)


def lab_views(x: Tensor) -> tuple[Tensor, Tensor]:
    """CMC's two views of an image in [0, 1]: its normalised L channel [B, 1] and ab channels [B, 2]."""
    lab = normalize(rgb_to_lab(x), LAB_MEAN, LAB_STD)
    return lab[:, :1], lab[:, 1:]
