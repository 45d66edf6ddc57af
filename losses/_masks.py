"""Sets of entries of an ``[A, K]`` matrix, as the losses read them: :class:`Mask` (a bool matrix, or the few
entries left out of it), the True entries of a bool matrix (:func:`true_entries`) and counts per row
(:func:`per_row`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from losses.scores import Entries


def true_entries(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Row and column of every True entry of a bool matrix, in row-major order: ``mask.nonzero``.

    Positives are sparse, and ``nonzero`` over a large bool matrix is slow on the CPU; reading the
    mask as 64-bit words (8 entries each), finding the nonzero words, and expanding only those is
    several times faster."""
    flat = mask.reshape(-1)
    if mask.device.type != "cpu" or flat.numel() % 8 or flat.storage_offset() % 8:
        return mask.nonzero(as_tuple=True)
    words = flat.view(torch.int64).nonzero().squeeze(1)
    cells = (words[:, None] * 8 + torch.arange(8)).reshape(-1)
    index = cells[flat[cells]]
    return index // mask.shape[1], index % mask.shape[1]


@dataclass(frozen=True)
class Mask:
    """A set of entries of an ``[A, K]`` matrix: a bool matrix (``dense``), or the entries left out of
    it (``outside_rows`` and their flat indices ``a·K + k``), when those are few and known. The
    second form costs no pass over a bool matrix."""

    shape: tuple[int, int]
    dense: Tensor | None = None
    outside_rows: Tensor | None = None
    outside_flat: Tensor | None = None

    @staticmethod
    def excluding(shape: tuple[int, int], *parts: Entries) -> Mask:
        rows = torch.cat([r for r, _ in parts])
        cols = torch.cat([c for _, c in parts])
        return Mask(shape, outside_rows=rows, outside_flat=rows * shape[1] + cols)

    def count(self) -> Tensor:
        """Entries per row, float [A]."""
        if self.dense is not None:
            return self.dense.sum(dim=1, dtype=torch.float32)  # exact below 2^24 entries a row
        return self.shape[1] - per_row(self.outside_rows, self.shape[0])

    def fill_outside(self, x: Tensor, value: float) -> Tensor:
        """A copy of ``x`` with ``value`` outside the mask (differentiable)."""
        if self.dense is not None:
            return torch.where(self.dense, x, value)
        return x.reshape(-1).index_fill(0, self.outside_flat, value).view(self.shape)

    def zero_outside_(self, x: Tensor) -> Tensor:
        """``x`` (contiguous, not needing grad) with 0 outside the mask, in place."""
        if self.dense is not None:
            return x.mul_(self.dense)
        x.view(-1).index_fill_(0, self.outside_flat, 0.0)
        return x


def per_row(rows: Tensor, n_rows: int) -> Tensor:
    """How many of the entries listed by their ``rows`` lie in each of ``n_rows`` rows: float [n_rows]."""
    return torch.zeros(n_rows, device=rows.device).index_add_(0, rows, torch.ones(rows.shape, device=rows.device))
