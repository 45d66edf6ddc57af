"""Biased-MNIST's colouring (Bahng et al., ICML 2020, "Learning De-biased Representations with Biased
Representations"), as Barbano et al. ran it (EIDOSLAB/unbiased-contrastive-learning, src/data/biased_mnist.py,
``color_background=True``): each class has a colour; per class ``int(n·rho)`` training samples take it and the
rest are split in chunks of ``ceil(rest/9)`` over the other nine colours in random order; the bias label is the
colour. Every pixel that is not 0 becomes white (255), every 0 pixel the background colour; the tenth colour is
(50, 255, 128) as in their background mode, not Bahng's grey. The embedded ``biased-digits`` take their colours
the same way, from Bahng's ten, their gray levels blended with the background (:func:`colourize`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from domains.vision.images import ImageSet

# Bahng et al.'s ten background colours, one per class.
COLOURS = torch.tensor([[255, 0, 0], [0, 255, 0], [0, 0, 255], [225, 225, 0], [225, 0, 225],
                        [0, 255, 255], [255, 128, 0], [255, 0, 128], [128, 0, 255], [128, 128, 128]])
# Barbano et al.'s background mode replaces the tenth colour (grey would be hard to tell from white digits).
MNIST_COLOURS = torch.cat([COLOURS[:9], torch.tensor([[50, 255, 128]])])


def assign_colours(labels: Tensor, rho: float, generator: torch.Generator, n_colours: int = 10) -> Tensor:
    """Biased-MNIST's bias: per class, ``floor(n·rho)`` samples (chosen at random) take the class's
    colour, the rest are split evenly over the other colours in random order."""
    colour = torch.empty_like(labels)
    for c in labels.unique().tolist():
        members = (labels == c).nonzero().flatten()
        members = members[torch.randperm(len(members), generator=generator)]
        n_aligned = math.floor(len(members) * rho + 1e-9)
        colour[members[:n_aligned]] = c
        rest = members[n_aligned:]
        others = [(c + k) % n_colours for k in range(1, n_colours)]
        others = [others[i] for i in torch.randperm(len(others), generator=generator).tolist()]
        if len(rest):
            for part, other in zip(torch.split(rest, math.ceil(len(rest) / len(others))), others):
                colour[part] = other
    return colour


def colourize(gray: Tensor, colour: Tensor) -> Tensor:
    """White digits ``gray [N, 1, H, W]`` in [0, 1] over background colours ``COLOURS[colour]``."""
    bg = COLOURS[colour].float()[:, :, None, None]
    return (gray * 255.0 + (1.0 - gray) * bg).round().clamp(0, 255).to(torch.uint8)


def colourize_binary(digits: Tensor, colour: Tensor) -> Tensor:
    """Barbano et al.'s Biased-MNIST pixels: uint8 ``digits [N, H, W]``; a non-zero pixel becomes
    white, a zero pixel the background colour ``MNIST_COLOURS[colour]``."""
    ink = (digits != 0)[:, None]
    bg = MNIST_COLOURS[colour].to(torch.uint8)[:, :, None, None]
    return torch.where(ink, torch.full_like(bg, 255), bg).contiguous()


def biased(gray: Tensor, labels: Tensor, rho: float, seed: int) -> ImageSet:
    colour = assign_colours(labels, rho, torch.Generator().manual_seed(seed))
    return ImageSet(colourize(gray, colour), labels, colour)


def biased_mnist(digits: Tensor, labels: Tensor, rho: float, seed: int) -> ImageSet:
    colour = assign_colours(labels, rho, torch.Generator().manual_seed(seed))
    return ImageSet(colourize_binary(digits, colour), labels, colour)
