"""The biased-data track (Barbano et al., ICLR 2023, "Unbiased Supervised Contrastive Learning").

Supervised contrastive pretraining of a SimpleConvNet on two views of each image (Barbano et al. use
the image itself twice on Biased-MNIST: ``augment="none"``): the 2B embeddings are scored with
``label_scores`` (positives: same class) and trained with ``supcon``, ``eps_supcon`` or
``eps_supinfonce``, optionally regularised by FairKL (Eq. 10) on the first view's features:

    objective = alpha · L_contrastive + lambda · FairKL(z, labels, bias labels)

``ce`` is the cross-entropy baseline: a linear classifier on the same encoder, trained jointly (plus
lambda · FairKL where lambda > 0). Every objective is evaluated the same way afterwards: a linear
classifier on the frozen features, trained on the (biased) training set, tested on the unbiased set.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import losses
from domains.vision.method import Batch, Method
from domains.vision.models import FEATURE_DIM, encoder, projection_head

CE = "ce"
SUPERVISED = ("supcon", "eps_supcon", "eps_supinfonce", CE)


class Biased(Method):
    def __init__(self, cfg, info, loss, needs_labels):
        super().__init__(cfg, info, loss, needs_labels)
        # Barbano et al.: the small nets end in tanh and the loss acts on their features (no head);
        # a ResNet keeps its projection head. The cross-entropy baseline trains a classifier instead.
        small = cfg.arch in ("small", "simpleconvnet")
        self.encoder = encoder(cfg.arch, 3, info.image_size, final="tanh" if small else "relu")
        self.head = (nn.Identity() if small else projection_head(cfg.arch, cfg.proj_dim)) if loss is not None else None
        self.classifier = nn.Linear(FEATURE_DIM[cfg.arch], info.num_classes) if loss is None else None

    def forward(self, batch: Batch) -> Tensor:
        b = batch.labels.shape[0]
        feats = self.encoder(torch.cat([self.view(batch.images), self.view(batch.images)]))
        labels2 = batch.labels.repeat(2)
        if self.loss is None:
            main = F.cross_entropy(self.classifier(feats).float(), labels2)
        else:
            main = self.loss(losses.label_scores(self.head(feats), labels2, self.cfg.temperature, gather=self.gather))
        total = self.cfg.alpha * main
        if self.cfg.fairkl_lambda > 0:
            reg = losses.fairkl(feats[:b], batch.labels, batch.bias, moments=self.cfg.fairkl_moments)
            total = total + self.cfg.fairkl_lambda * reg
        return total

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        return self.encoder(self.eval_input(images))
