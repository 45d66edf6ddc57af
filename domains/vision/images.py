"""What a vision dataset is once loaded (:func:`domains.vision.data.load`) and how it is batched: an
:class:`ImageSet` holds its images as one uint8 tensor ``[N, 3, H, W]`` or, for the sets too large to hold, as
image files decoded on demand (:class:`FolderImages`), with class labels (-1: unlabelled) and, for the biased-data
track, bias labels; :class:`VisionData` is a dataset's splits and what the encoder needs to know of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from domains.base import require


class FolderImages(torch.utils.data.Dataset):
    """Image files decoded on demand: shorter side resized to ``size``, centre-cropped square, uint8."""

    def __init__(self, paths: list[Path], size: int):
        self.paths, self.size = paths, size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> Tensor:
        tvf = require("torchvision.transforms.functional", "vision")
        from PIL import Image

        with Image.open(self.paths[i]) as img:
            img = tvf.center_crop(tvf.resize(img.convert("RGB"), self.size), self.size)
            return tvf.pil_to_tensor(img)


@dataclass
class ImageSet:
    """Images (a uint8 tensor or a folder), labels (long, -1 unlabelled) and optional bias labels."""

    images: Tensor | FolderImages
    labels: Tensor
    bias: Tensor | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def to(self, device: torch.device) -> ImageSet:
        """The same set with its tensors on ``device`` (folders stay where they are)."""
        images = self.images.to(device) if isinstance(self.images, Tensor) else self.images
        return ImageSet(images, self.labels.to(device), None if self.bias is None else self.bias.to(device))


@dataclass
class VisionData:
    name: str
    pretrain: ImageSet  # what the encoder is trained on (STL-10: train + unlabeled)
    train: ImageSet  # labelled: linear evaluation and the kNN bank
    test: ImageSet
    num_classes: int
    image_size: int  # the size the encoder sees; folders are stored larger and centre-cropped
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    fingerprint: dict = field(default_factory=dict)

    def to(self, device: torch.device) -> VisionData:
        """The same data with every in-memory split on ``device`` (a split shared by two roles stays shared)."""
        moved: dict[int, ImageSet] = {}
        for split in (self.pretrain, self.train, self.test):
            moved.setdefault(id(split), split.to(device))
        return replace(self, pretrain=moved[id(self.pretrain)], train=moved[id(self.train)],
                       test=moved[id(self.test)])


def chunks(order: Tensor, batch_size: int, drop_last: bool) -> list[Tensor]:
    """Consecutive ``batch_size`` slices of ``order`` (views: nothing is copied), the last shorter one dropped
    when ``drop_last``."""
    parts = list(torch.split(order, batch_size))
    if drop_last and parts and len(parts[-1]) < batch_size:
        parts.pop()
    return parts


def batches(images: ImageSet, order: Tensor, batch_size: int, drop_last: bool,
            num_workers: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
    """``(index, uint8 images)`` for consecutive chunks of ``order``; in-memory images are indexed where
    they are (on the device: one copy of ``order``, none per batch)."""
    if isinstance(images.images, Tensor):
        order = order.to(images.images.device)
    parts = chunks(order, batch_size, drop_last)
    if isinstance(images.images, Tensor):
        for idx in parts:
            yield idx, images.images[idx]
        return
    loader = torch.utils.data.DataLoader(images.images, batch_sampler=[c.tolist() for c in parts],
                                         num_workers=num_workers, pin_memory=torch.cuda.is_available())
    yield from zip(parts, loader)
