"""MNIST's idx files (torchvision's layout, ``<root>/MNIST/raw``, plain or gzipped), read directly from the data
root and checked, so that a damaged file is named and never read as a shorter set."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from domains.base import require
from domains.errors import UserError

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")


MNIST_SHAPES = {"images": (2051, 3), "labels": (2049, 1)}  # idx magic number and number of dimensions


def mnist_file(raw: Path, name: str) -> Path | None:
    """``raw/name`` (the idx file) or ``raw/name.gz``, whichever is there (the plain file first), else None."""
    return next((p for p in (raw / name, raw / f"{name}.gz") if p.is_file()), None)


def read_idx(path: Path, kind: str) -> np.ndarray:
    """An MNIST idx file (``kind`` images: uint8 ``[N, 28, 28]``; labels: uint8 ``[N]`` in 0..9), plain or
    gzipped, read in full and checked (magic number, dimensions, length, label range): UserError naming the file and
    what is wrong, never a shorter set."""
    import gzip
    import zlib

    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise UserError(f"{path} cannot be read ({type(exc).__name__}: {exc}); download it again") from None
    magic, dims = MNIST_SHAPES[kind]
    header = 4 + 4 * dims
    if len(raw) < header:
        raise UserError(f"{path} is truncated ({len(raw)} bytes, shorter than its idx header); download it again")
    values = np.frombuffer(raw[:header], dtype=">u4")
    shape = tuple(int(v) for v in values[1:])
    if int(values[0]) != magic or (kind == "images" and shape[1:] != (28, 28)):
        raise UserError(f"{path} is not an MNIST {kind} file (magic {int(values[0])}, shape {shape}; expected magic "
                        f"{magic}{', N x 28 x 28' if kind == 'images' else ''})")
    expected = int(np.prod(shape))
    if len(raw) - header != expected:
        raise UserError(f"{path} holds {len(raw) - header} bytes of data where its header announces {expected} "
                        f"({' x '.join(map(str, shape))}): truncated or damaged; download it again")
    array = np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)
    if kind == "labels" and array.size and int(array.max()) > 9:
        row = int(np.argmax(array > 9))
        raise UserError(f"{path}: label {int(array[row])} of row {row} is not a digit 0..9")
    return array


def read_mnist(root: Path, download: bool, missing: Callable[[], Exception]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """uint8 digits ``[N, 28, 28]`` and labels of the MNIST train and test sets, from torchvision's files in
    ``<root>/MNIST/raw`` (plain or gzipped idx files), read directly: nothing is unpacked into a cache, which would
    serve the files of another root or an older copy of these. ``download``: torchvision's download, where the
    files are missing; ``missing``: the error to raise when they still are."""
    raw = root / "MNIST" / "raw"
    found = {name: mnist_file(raw, name) for name in MNIST_FILES}
    if download and None in found.values():
        tvd = require("torchvision.datasets", "vision")
        try:
            tvd.MNIST(str(root), train=True, download=True)
        except (RuntimeError, OSError) as exc:
            raise missing() from exc
        found = {name: mnist_file(raw, name) for name in MNIST_FILES}
    if None in found.values():
        raise missing()
    out = []
    for prefix in ("train", "t10k"):
        images = read_idx(found[f"{prefix}-images-idx3-ubyte"], "images")
        labels = read_idx(found[f"{prefix}-labels-idx1-ubyte"], "labels")
        if len(images) != len(labels):
            raise UserError(f"{found[f'{prefix}-images-idx3-ubyte']} holds {len(images)} images but "
                            f"{found[f'{prefix}-labels-idx1-ubyte']} {len(labels)} labels: one of them is truncated")
        out += [torch.from_numpy(images.copy()), torch.from_numpy(labels.astype(np.int64))]
    return out[0], out[1], out[2], out[3]
