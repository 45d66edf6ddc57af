"""Batch-wise image augmentations on whatever device the batch is on (the GPU when there is one, so
data loading never bounds throughput), and the Lab views of CMC.

SimCLR's augmentation (Chen et al. 2020, as used by Chuang et al. 2020): random resized crop
(scale ``(s, 1)``, aspect ratio ``(3/4, 4/3)``) with a horizontal flip (p 0.5), colour jitter
(brightness 0.4, contrast 0.4, saturation 0.4, hue 0.1) with p 0.8, grayscale with p 0.2. Each sample
draws its own crop, flip, jitter factors and order of the four jitter operations (as torchvision and
SimCLR's code do). Images enter as uint8 ``[B, 3, H, W]`` and leave as float in [0, 1]; :func:`normalize`
or :func:`lab_views` follow.

Speed: every random number of a step is drawn on the batch's device by its default generator, in one call
per operation group (no per-sample loop, nothing read back to the host, no choice made on the host), so a
training step captured as a CUDA graph draws new numbers at every replay; constants live on the device once
(a host-to-device copy of a fresh tensor waits for the device), and the pixel work is done by a few pure
functions (``@_kernel``) that :func:`set_compiled` runs through ``torch.compile``, which fuses each into one
or two kernels. The random draws stay outside those functions, so compiled and eager augmentation see the
same numbers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

JITTER = (0.4, 0.4, 0.4, 0.1)
JITTER_P, GRAY_P = 0.8, 0.2
# CMC's Lab normalisation: each channel's range, from the sRGB gamut, mapped to [-1, 1].
LAB_MEAN = (50.0, (-86.183 + 98.233) / 2, (-107.857 + 94.478) / 2)
LAB_STD = (50.0, (86.183 + 98.233) / 2, (107.857 + 94.478) / 2)
# sRGB (D65) to CIE XYZ, and the D65 white point (the constants of scikit-image's rgb2lab).
_RGB_TO_XYZ = ((0.412453, 0.357580, 0.180423), (0.212671, 0.715160, 0.072169), (0.019334, 0.119193, 0.950227))
_WHITE = (0.95047, 1.0, 1.08883)
_LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))

_compiled = False
_compiled_fns: dict[Callable, Callable] = {}  # each pixel function's torch.compile'd form, once built
Fn = TypeVar("Fn", bound=Callable)


def set_compiled(enabled: bool) -> bool:
    """Run the pixel functions through ``torch.compile`` (True) or eagerly; returns the old setting."""
    global _compiled
    previous, _compiled = _compiled, bool(enabled)
    return previous


def _kernel(fn: Fn) -> Fn:
    """``fn`` eagerly, or its ``torch.compile``d form (built on first use) while :func:`set_compiled`."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not _compiled:
            return fn(*args, **kwargs)
        if fn not in _compiled_fns:
            _compiled_fns[fn] = torch.compile(fn)
        return _compiled_fns[fn](*args, **kwargs)

    return run  # type: ignore[return-value]


@functools.lru_cache(maxsize=64)
def _constant(values: tuple, device: torch.device, shape: tuple[int, ...]) -> Tensor:
    """A float32 constant on ``device``, made once: ``torch.tensor(..., device=cuda)`` copies from
    pageable host memory, which blocks until the device has finished its queue."""
    return torch.tensor(values, dtype=torch.float32, device=device).view(shape)


def to_unit(images: Tensor) -> Tensor:
    """uint8 [0, 255] to float [0, 1]."""
    return images.float().div_(255.0)


def grayscale(x: Tensor) -> Tensor:
    """ITU-R 601 luma, [B, 1, H, W]."""
    return 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]


@_kernel
def _crop(x: Tensor, u: Tensor, size: int, min_scale: float, flip: bool, scale: float) -> Tensor:
    # u [5, B]: area, log aspect ratio, centre x, centre y, flip.
    area = min_scale + (1.0 - min_scale) * u[0]
    ratio = (_LOG_RATIO[0] + (_LOG_RATIO[1] - _LOG_RATIO[0]) * u[1]).exp()
    w = (area * ratio).sqrt().clamp(max=1.0)  # fractions of the image width / height
    h = (area / ratio).sqrt().clamp(max=1.0)
    cx = (u[2] * 2 - 1) * (1 - w)  # centres in [-1, 1] keeping the crop inside
    cy = (u[3] * 2 - 1) * (1 - h)
    sx = torch.where(u[4] < 0.5, -w, w) if flip else w
    # affine_grid's sampling grid for theta = [[sx, 0, cx], [0, h, cy]], built elementwise: affine_grid
    # takes a batched matmul, which autocast would run in bf16.
    base = torch.arange(size, device=x.device, dtype=torch.float32).mul_(2 / size).add_(1 / size - 1)
    gx = (sx[:, None] * base + cx[:, None])[:, None, :].expand(-1, size, -1)
    gy = (h[:, None] * base + cy[:, None])[:, :, None].expand(-1, -1, size)
    grid = torch.stack([gx, gy], -1)
    out = F.grid_sample(x.float(), grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    return out * scale if scale != 1.0 else out


def random_resized_crop(x: Tensor, size: int, min_scale: float, flip: bool = True) -> Tensor:
    """Per-sample crops of area fraction U(min_scale, 1) and log-uniform aspect ratio in [3/4, 4/3],
    resized bilinearly to ``size`` (one ``grid_sample``); a side longer than the image is clamped.
    A uint8 batch comes back in [0, 1]."""
    u = torch.rand(5, x.shape[0], device=x.device)
    return _crop(x, u, size, min_scale, flip, 1 / 255 if x.dtype == torch.uint8 else 1.0)


def center_crop(x: Tensor, size: int) -> Tensor:
    """The central ``size`` square (folders are stored slightly larger), else a resize to ``size``."""
    h, w = x.shape[-2:]
    if h >= size and w >= size:
        top, left = (h - size) // 2, (w - size) // 2
        return x[..., top:top + size, left:left + size]
    return F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)


def _hsv(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Hue in [0, 1), saturation and value, each [B, H, W]."""
    maxc, argmax = x.max(1)
    delta = maxc - x.amin(1)
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    # Channel c's hue numerator is x[c+1] - x[c+2] (g-b, b-r, r-g), offset by 2c sextants.
    diff = (x.roll(-1, 1) - x.roll(-2, 1)).gather(1, argmax.unsqueeze(1)).squeeze(1)
    hue = torch.where(delta > 0, ((diff / safe + 2 * argmax) % 6) / 6, torch.zeros_like(delta))
    sat = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    return hue, sat, maxc


def _rgb(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """HSV to RGB in closed form: channel n in (5, 3, 1) is ``v - v·s·clamp(min(k, 4-k), 0, 1)`` with
    ``k = (n + 6h) mod 6``."""
    n = torch.arange(5.0, 0.0, -2.0, device=h.device).view(1, 3, 1, 1)  # made on the device: no copy
    k = (n + 6 * h.unsqueeze(1)) % 6
    return v.unsqueeze(1) * (1 - s.unsqueeze(1) * torch.minimum(k, 4 - k).clamp(0, 1))


def rgb_to_hsv(x: Tensor) -> Tensor:
    return torch.stack(_hsv(x), 1)


def hsv_to_rgb(x: Tensor) -> Tensor:
    return _rgb(*x.unbind(1))


# The jitter operations take their uniform draws ``u`` [B] and the strength ``s``.
def _factor(u: Tensor, s: float) -> Tensor:
    lo = max(0.0, 1 - s)
    return (lo + (1 + s - lo) * u).view(-1, 1, 1, 1)


def _brightness(x: Tensor, u: Tensor, s: float) -> Tensor:
    return (x * _factor(u, s)).clamp(0, 1)


def _contrast(x: Tensor, u: Tensor, s: float) -> Tensor:
    mean = grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
    return torch.lerp(mean, x, _factor(u, s)).clamp(0, 1)


def _saturation(x: Tensor, u: Tensor, s: float) -> Tensor:
    return torch.lerp(grayscale(x), x, _factor(u, s)).clamp(0, 1)


def _hue(x: Tensor, u: Tensor, s: float) -> Tensor:
    h, sat, v = _hsv(x)
    return _rgb(h + ((2 * u - 1) * s).view(-1, 1, 1), sat, v)


JITTER_OPS = (_brightness, _contrast, _saturation, _hue)  # in the order of ``strength``
SUBSETS_ON = frozenset({"cpu"})
"""Devices where a jitter position applies each operation to the images that drew it, found by ``nonzero``
(which waits for any other device); elsewhere every operation runs on the batch and each image keeps its own."""


@_kernel
def _jitter_position(x: Tensor, which: Tensor, u: Tensor, strength: tuple[float, ...]) -> Tensor:
    """Operation ``which[i]`` (an index of :data:`JITTER_OPS`) on image ``i``: every operation of nonzero
    strength is computed on the whole batch and each image keeps the one it drew, a choice made on the device
    (four passes where one would do, so that nothing waits for the device; compiled, one fused pass)."""
    out = x
    for k, op in enumerate(JITTER_OPS):
        if strength[k] != 0:
            out = torch.where((which == k).view(-1, 1, 1, 1), op(x, u[k], strength[k]), out)
    return out


def _jitter_subsets(x: Tensor, which: Tensor, u: Tensor, strength: tuple[float, ...]) -> Tensor:
    """What :func:`_jitter_position` gives, with each operation applied only to the images that drew it."""
    out = x.clone()
    for k, op in enumerate(JITTER_OPS):
        rows = (which == k).nonzero().flatten()
        if strength[k] != 0 and rows.numel():
            out[rows] = op(x[rows], u[k, rows], strength[k])
    return out


@_kernel
def _choose(u: Tensor, p: float, changed: Tensor, x: Tensor) -> Tensor:
    return torch.where((u < p).view(-1, 1, 1, 1), changed, x)


def color_jitter(x: Tensor, strength: tuple[float, float, float, float] = JITTER, p: float = JITTER_P) -> Tensor:
    """Brightness, contrast, saturation and hue jitter with per-sample factors, in a per-sample random
    order, applied with probability ``p`` per sample; an operation of strength 0 is skipped."""
    u = torch.rand(5, x.shape[0], device=x.device)  # rows 0-3: the operations' factors, row 4: p
    # Each image's order of the four operations: the ranks of four uniform keys, a uniform permutation.
    order = torch.rand(x.shape[0], len(JITTER_OPS), device=x.device).argsort(dim=1)
    apply = _jitter_subsets if x.device.type in SUBSETS_ON else _jitter_position
    out = x
    for position in range(len(JITTER_OPS)):
        out = apply(out, order[:, position], u, tuple(strength))
    return _choose(u[4], p, out, x)


@_kernel
def _gray(u: Tensor, p: float, x: Tensor) -> Tensor:
    return torch.where((u < p).view(-1, 1, 1, 1), grayscale(x).expand_as(x), x)


def random_grayscale(x: Tensor, p: float = GRAY_P) -> Tensor:
    return _gray(torch.rand(x.shape[0], device=x.device), p, x)


def augment(images: Tensor, mode: str, size: int, min_scale: float) -> Tensor:
    """One augmented view in [0, 1]: ``simclr`` (crop, flip, jitter, grayscale), ``crop`` (crop and
    flip: CMC's) or ``none`` (the centre crop)."""
    if mode == "none":
        return center_crop(to_unit(images), size)
    x = random_resized_crop(images if images.dtype == torch.uint8 else to_unit(images), size, min_scale)
    if mode == "simclr":
        x = random_grayscale(color_jitter(x))
    return x


def evaluation_view(images: Tensor, size: int) -> Tensor:
    return center_crop(to_unit(images), size)


@_kernel
def _affine(x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    return torch.addcmul(shift, x, scale)


def normalize(x: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    """``(x - mean) / std`` per channel, as ``x·(1/std) - mean/std`` (one pass)."""
    shape = (1, len(mean), 1, 1)
    scale = _constant(tuple(1.0 / s for s in std), x.device, shape)
    shift = _constant(tuple(-m / s for m, s in zip(mean, std)), x.device, shape)
    return _affine(x, scale, shift)


@_kernel
def _lab(x: Tensor, to_xyz: Tensor, white: Tensor) -> Tensor:
    lin = torch.where(x > 0.04045, ((x + 0.055) / 1.055).clamp_min(0) ** 2.4, x / 12.92)
    # A weighted sum, not a matmul, so that it stays float32 under autocast.
    xyz = (to_xyz.view(1, 3, 3, 1, 1) * lin.unsqueeze(1)).sum(2) / white
    f = torch.where(xyz > 0.008856, xyz.clamp_min(1e-12) ** (1 / 3), 7.787 * xyz + 16 / 116)
    fx, fy, fz = f.unbind(1)
    return torch.stack([116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)], 1)


def rgb_to_lab(x: Tensor) -> Tensor:
    """sRGB in [0, 1] ``[B, 3, H, W]`` to CIE Lab (L in [0, 100])."""
    return _lab(x, _constant(_RGB_TO_XYZ, x.device, (3, 3)), _constant(_WHITE, x.device, (1, 3, 1, 1)))


def lab_views(x: Tensor) -> tuple[Tensor, Tensor]:
    """CMC's two views of an image in [0, 1]: its normalised L channel [B, 1] and ab channels [B, 2]."""
    lab = normalize(rgb_to_lab(x), LAB_MEAN, LAB_STD)
    return lab[:, :1], lab[:, 1:]
