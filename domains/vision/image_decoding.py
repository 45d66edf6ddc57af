"""Encoded images (PNG or JPEG bytes, or image files) decoded into a uint8 tensor, for :mod:`domains.vision.hub`.

PIL decodes each image (grey, palette and RGBA become RGB); one of another size than the target is resized as
:class:`images.FolderImages` does (shorter side, bilinear with antialiasing, centre crop). Chunks of images are
decoded in parallel, in forked processes where the platform has them (32x32 PNGs are decoded faster than Python
threads can share one interpreter), with a progress bar on a terminal."""

from __future__ import annotations

import io
import os
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from domains.base import require
from domains.errors import UserError

if TYPE_CHECKING:  # annotations only: PIL is imported where an image is opened
    import PIL.Image

CHUNK = 1024  # images per decoding task

Blob = bytes | str  # encoded bytes, or the path of a local image file (image-folder datasets)
_BLOBS: list[Blob] = []  # the images being decoded; forked workers inherit the list instead of receiving it


class UndecodableImage(UserError):
    """An image that PIL cannot decode: its position in its split, for the caller to name the file."""

    def __init__(self, index: int, split: str, reason: str):
        super().__init__(f"image {index} of the {split} split cannot be decoded ({reason})")
        self.index, self.split, self.reason = index, split, reason


def open_image(blob: Blob) -> PIL.Image.Image:
    """``blob`` opened by PIL (its pixels are read when first used)."""
    from PIL import Image

    return Image.open(io.BytesIO(blob) if isinstance(blob, bytes) else blob)


def _pixels(blob: Blob, size: int) -> np.ndarray:
    """One image as uint8 ``[size, size, 3]``, or ``[size, size, 1]`` for a grey one (its value is every RGB
    channel's, as PIL's conversion gives), resized (shorter side) and centre-cropped where needed."""
    with open_image(blob) as img:
        if img.mode not in ("L", "RGB"):
            img = img.convert("RGB")
        if img.size != (size, size):
            tvf = require("torchvision.transforms.functional", "vision")
            img = tvf.center_crop(tvf.resize(img, size), size)  # PIL images: PIL does the work, as FolderImages
        pixels = np.asarray(img)
    return pixels[..., None] if pixels.ndim == 2 else pixels


def _decode_range(lo: int, hi: int, size: int) -> np.ndarray | tuple[int, str]:
    """Images ``lo:hi`` of ``_BLOBS``, or (index, reason) of the first that cannot be decoded."""
    from PIL import UnidentifiedImageError

    out = np.empty((hi - lo, size, size, 3), np.uint8)
    for i in range(lo, hi):
        try:
            out[i - lo] = _pixels(_BLOBS[i], size)
        except UnidentifiedImageError:
            return i, "not in an image format PIL knows"
        except (OSError, ValueError, SyntaxError) as exc:  # what PIL raises for damaged data
            return i, f"{type(exc).__name__}: {exc}"
    return out


def _workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _executor(workers: int) -> Executor:
    """Forked processes (each inherits ``_BLOBS``; a worker touches PIL and numpy only, never torch's thread
    pools), else threads where the platform cannot fork."""
    import multiprocessing

    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    return ThreadPoolExecutor(workers)


def decode(blobs: list[Blob], size: int, split: str = "train", workers: int = 0) -> Tensor:
    """uint8 ``[N, 3, size, size]`` from the encoded images of ``split``, ``CHUNK`` at a time on ``workers``
    processes (0: every core this process may use), with a progress bar on a terminal; UserError naming the
    first image that cannot be decoded."""
    from tqdm.auto import tqdm

    global _BLOBS
    require("torchvision.transforms.functional", "vision")  # imported once here, inherited by forked workers
    out = np.empty((len(blobs), size, size, 3), np.uint8)
    chunks = [(lo, min(lo + CHUNK, len(blobs))) for lo in range(0, len(blobs), CHUNK)]
    _BLOBS = blobs
    try:
        with _executor(min(workers or _workers(), len(chunks))) as pool, \
                tqdm(total=len(blobs), desc=f"decoding {split}", unit="img", leave=False, disable=None) as bar:
            tasks = {pool.submit(_decode_range, lo, hi, size): lo for lo, hi in chunks}
            for task in as_completed(tasks):
                result = task.result()
                if isinstance(result, tuple):
                    for pending in tasks:
                        pending.cancel()
                    raise UndecodableImage(result[0], split, result[1])
                lo = tasks[task]
                out[lo:lo + len(result)] = result
                bar.update(len(result))
    finally:
        _BLOBS = []
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()
