"""CMC (Tian et al., ECCV 2020, "Contrastive Multiview Coding") on the L and ab views of Lab colour.

Two encoders (L: 1 channel, ab: 2 channels), each with its projection head, and a memory bank per view
holding one L2-normalised embedding per training image. For a batch, the L embedding of image i is the
anchor; its positive is the ab bank's row i, its negatives K rows of the ab bank; and the other way
round (ab anchors against the L bank). The loss is the sum of the two directions. After the step each
bank row i becomes ``normalize(m·row_i + (1 - m)·z_i)`` (momentum m = 0.5).

Negatives: one draw of K distinct rows per step, shared by the batch's anchors (the ``bank_scores``
layout; CMC draws per anchor, with the same uniform distribution per anchor), never a row of the
batch itself, so an image is never its own negative; with fewer than K other rows all are used.
Under torchrun every rank draws K / world rows and ``gather=True`` concatenates them; the banks are
kept identical on every rank by applying every rank's updates.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

import losses
from domains.vision import augment as aug
from domains.vision.method import Batch, Method
from domains.vision.models import encoder, projection_head
from losses.distributed import gather_with_grad


class CMC(Method):
    def __init__(self, cfg, info, loss, needs_labels):
        super().__init__(cfg, info, loss, needs_labels)
        self.enc_l, self.enc_ab = encoder(cfg.arch, 1, info.image_size), encoder(cfg.arch, 2, info.image_size)
        self.head_l, self.head_ab = projection_head(cfg.arch, cfg.proj_dim), projection_head(cfg.arch, cfg.proj_dim)
        self.register_buffer("bank_l", F.normalize(torch.randn(info.size, cfg.proj_dim), dim=1))
        self.register_buffer("bank_ab", F.normalize(torch.randn(info.size, cfg.proj_dim), dim=1))
        self.register_buffer("bank_labels", info.labels.clone())

    def embed(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Projected embeddings of both views of images ``x`` in [0, 1]."""
        l, ab = aug.lab_views(x)
        return self.head_l(self.enc_l(l)), self.head_ab(self.enc_ab(ab))

    def sample_negatives(self, index: Tensor) -> Tensor:
        """Up to K distinct bank rows outside the batch ``index`` (distinct rows), uniformly at random
        (this rank's share under torchrun)."""
        world = torch.distributed.get_world_size() if self.gather else 1
        k = max(1, self.cfg.num_negatives // world)
        others = self.info.size - index.numel()
        if k >= others:  # every other row, in order: the first ``others`` of a stable sort that puts the
            # batch's rows last (nonzero would give the same rows, after waiting for the device)
            in_batch = torch.zeros(self.info.size, dtype=torch.uint8, device=index.device).index_fill_(0, index, 1)
            return in_batch.argsort(stable=True)[:others]
        # The K smallest of uniform keys, the batch's rows keyed out of reach: a uniform K-subset in
        # random order, with a size known in advance (nonzero would wait for the device).
        keys = torch.rand(self.info.size, device=index.device).index_fill_(0, index, 2.0)
        return keys.topk(k, largest=False).indices

    @torch.no_grad()
    def update_banks(self, index: Tensor, z_l: Tensor, z_ab: Tensor) -> None:
        """``bank[i] = normalize(m·bank[i] + (1 - m)·z_i)`` for both views (every rank's rows)."""
        if self.gather:
            index, z_l, z_ab = (gather_with_grad(t)[0] for t in (index, z_l, z_ab))
        m = self.cfg.cmc_momentum
        for bank, z in ((self.bank_l, z_l), (self.bank_ab, z_ab)):
            bank[index] = F.normalize(m * bank[index] + (1 - m) * F.normalize(z.float(), dim=1), dim=1)

    def forward(self, batch: Batch) -> Tensor:
        x = aug.augment(batch.images, self.cfg.augment, self.info.image_size, self.cfg.crop_min_scale)
        z_l, z_ab = self.embed(x)
        neg = self.sample_negatives(batch.index)
        labels = self.labels_for_loss(batch)
        self.loss.observe(z_l)  # for an estimated class prior (else a no-op)
        bank_labels = self.bank_labels[neg] if labels is not None else None
        t, total = self.cfg.temperature, 0.0
        for query, bank in ((z_l, self.bank_ab), (z_ab, self.bank_l)):
            scores = losses.bank_scores(query, bank[batch.index].clone(), bank[neg], t, labels=labels,
                                        bank_labels=bank_labels, gather=self.gather)
            total = total + self.loss(scores)
        self.update_banks(batch.index, z_l.detach(), z_ab.detach())
        return total

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        l, ab = aug.lab_views(aug.evaluation_view(images, self.info.image_size))
        return torch.cat([self.enc_l(l), self.enc_ab(ab)], dim=1)
