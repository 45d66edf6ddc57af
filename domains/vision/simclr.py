"""SimCLR (Chen et al., ICML 2020) with in-batch negatives, as in Chuang et al. 2020 (DCL).

Each image gives ``n_views`` augmented views; the encoder and the projection head map all of them in
one forward pass. With 2 views the scores are ``pair_scores`` (the positive of a row is its other
view, every other row of the 2B a negative); with V > 2 ``multiview_scores`` (M = V - 1 positives,
Chuang et al. Fig. 4c), except for ``debiased_pos`` with ``aggregation=combination``: its authors' "loss
combination" is the two-view loss averaged over the pairs of views, ``pairwise_scores``. The unbiased oracle
gets the class labels through ``labels=``.
"""

from __future__ import annotations

import torch
from torch import Tensor

import losses
from domains.vision.method import Batch, Method
from domains.vision.models import encoder, projection_head


class SimCLR(Method):
    in_batch_negatives = True

    def __init__(self, cfg, info, loss, needs_labels):
        super().__init__(cfg, info, loss, needs_labels)
        self.encoder = encoder(cfg.arch, 3, info.image_size)
        self.head = projection_head(cfg.arch, cfg.proj_dim)

    def forward(self, batch: Batch) -> Tensor:
        views = torch.cat([self.view(batch.images) for _ in range(self.cfg.n_views)])
        z = self.head(self.encoder(views)).chunk(self.cfg.n_views)
        labels, t = self.labels_for_loss(batch), self.cfg.temperature
        self.loss.observe(z[0])  # for an estimated class prior (else a no-op)
        if len(z) == 2:
            scores = losses.pair_scores(z[0], z[1], t, labels=labels, gather=self.gather)
        elif self.loss.hparams.get("aggregation") == "combination":  # debiased_pos (losses/debiased_pos.py)
            scores = losses.pairwise_scores(z, t, labels=labels, gather=self.gather)
        else:
            scores = losses.multiview_scores(z, t, labels=labels, gather=self.gather)
        return self.loss(scores)

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        return self.encoder(self.eval_input(images))
