"""MoCo v2 (He et al., CVPR 2020; Chen et al. 2020, "Improved Baselines with Momentum Contrastive
Learning"): a query encoder trained by the loss, a key encoder that follows it by momentum
``θ_k ← m·θ_k + (1 - m)·θ_q``, an MLP head, and a queue of the K most recent keys as negatives.

Per step: the query ``q`` of one view, the key ``k`` of another (key encoder, no gradient), the scores
``bank_scores(q, k, queue)`` (column 0 the own key, then the K queued keys), the loss; then the batch's
keys replace the oldest queue entries. The queue is read before it is written, so a key is never a
negative of its own query. Under torchrun the keys of every rank are enqueued on every rank, so the
queue (already global) is scored with ``gather=False``. The oracle reads the queued keys' labels.
Not implemented: MoCo's shuffled BatchNorm across GPUs.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import losses
from domains.vision.method import Batch, Method
from domains.vision.models import encoder, projection_head
from losses.distributed import gather_with_grad


class MoCo(Method):
    def __init__(self, cfg, info, loss, needs_labels):
        super().__init__(cfg, info, loss, needs_labels)
        self.encoder = encoder(cfg.arch, 3, info.image_size)
        self.head = projection_head(cfg.arch, cfg.proj_dim, batch_norm=False)
        self.key_encoder = copy.deepcopy(nn.Sequential(self.encoder, self.head))
        self.key_encoder.requires_grad_(False)
        self.register_buffer("queue", F.normalize(torch.randn(cfg.num_negatives, cfg.proj_dim), dim=1))
        self.register_buffer("queue_labels", torch.full((cfg.num_negatives,), -1, dtype=torch.long))
        self.register_buffer("queue_ptr", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def momentum_update(self) -> None:
        query = [p.detach() for p in (*self.encoder.parameters(), *self.head.parameters())]
        # θ_k + (1 - m)(θ_q - θ_k) = m·θ_k + (1 - m)·θ_q, as a few multi-tensor kernels instead of two per tensor
        torch._foreach_lerp_(list(self.key_encoder.parameters()), query, 1 - self.cfg.moco_momentum)

    @torch.no_grad()
    def enqueue(self, keys: Tensor, labels: Tensor) -> None:
        """Write ``keys`` over the oldest entries (a ring buffer) and advance the pointer."""
        if self.gather:
            keys, labels = gather_with_grad(keys)[0], gather_with_grad(labels)[0]
        n = len(self.queue)
        slots = (self.queue_ptr + torch.arange(keys.shape[0], device=keys.device)) % n
        self.queue[slots] = F.normalize(keys.float(), dim=1)
        self.queue_labels[slots] = labels
        self.queue_ptr.copy_((self.queue_ptr + keys.shape[0]) % n)

    def forward(self, batch: Batch) -> Tensor:
        q = self.head(self.encoder(self.view(batch.images)))
        with torch.no_grad():
            self.momentum_update()
            k = self.key_encoder(self.view(batch.images))
        labels = self.labels_for_loss(batch)
        self.loss.observe(q)  # for an estimated class prior (else a no-op)
        scores = losses.bank_scores(q, k, self.queue.clone(), self.cfg.temperature, labels=labels,
                                    bank_labels=self.queue_labels.clone() if labels is not None else None)
        loss = self.loss(scores)
        self.enqueue(k.detach(), batch.labels)
        return loss

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        return self.encoder(self.eval_input(images))
