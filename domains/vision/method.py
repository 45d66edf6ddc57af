"""What every pretraining method shares: the batch it receives, what it knows of the data, and the
base class. A method is an ``nn.Module`` whose ``forward(batch)`` returns the training loss (so one
``DistributedDataParallel`` wrapper serves all of them) and whose ``features(images)`` gives the frozen
representation for evaluation. Banks and queues are buffers, so checkpoints carry them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from domains.vision import augment as aug
from domains.vision.config import VisionConfig
from domains.vision.images import ImageSet
from losses.distributed import is_distributed


@dataclass
class Batch:
    index: Tensor  # long [B]: positions in the pretraining set (the CMC bank rows)
    images: Tensor  # uint8 [B, 3, H, W] on the device
    labels: Tensor  # long [B], -1 for unlabelled images
    bias: Tensor | None = None  # long [B]: bias labels of the biased datasets


@dataclass
class DataInfo:
    """What a method may know of its pretraining set."""

    size: int  # number of pretraining images
    labels: Tensor  # long [size]: class labels (-1 unlabelled), for the oracle's bank labels
    num_classes: int
    image_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]


class Method(nn.Module):
    """Base class: ``cfg`` is resolved (:func:`config.resolved`); ``loss`` a core loss or None."""

    # Whether the loss's negatives are the batch's other images (SimCLR), not a bank or a queue: then the
    # pretraining loop counts the share of them that share the anchor's class (for the prior page).
    in_batch_negatives = False

    def __init__(self, cfg: VisionConfig, info: DataInfo, loss, needs_labels: bool):
        super().__init__()
        self.cfg, self.info, self.loss, self.needs_labels = cfg, info, loss, needs_labels
        # Under torchrun the candidates of every rank are scored (gather=True in the constructors).
        self.gather = is_distributed()

    def view(self, images: Tensor) -> Tensor:
        """One augmented, normalised view of a uint8 batch."""
        x = aug.augment(images, self.cfg.augment, self.info.image_size, self.cfg.crop_min_scale)
        return aug.normalize(x, self.info.mean, self.info.std)

    def eval_input(self, images: Tensor) -> Tensor:
        return aug.normalize(aug.evaluation_view(images, self.info.image_size), self.info.mean, self.info.std)

    def labels_for_loss(self, batch: Batch) -> Tensor | None:
        """The labels the loss may read: only the oracle (and supervised losses) get them."""
        return batch.labels if self.needs_labels else None

    def _make_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        if self.cfg.optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.cfg.lr, momentum=self.cfg.momentum,
                                   weight_decay=self.cfg.weight_decay)
        return torch.optim.Adam(params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay)

    def optimizer(self) -> torch.optim.Optimizer:
        """The pretraining optimizer (``cfg.optimizer``) over every trainable parameter; called once the
        method is on its device."""
        return self._make_optimizer([p for p in self.parameters() if p.requires_grad])

    def inner_optimizers(self) -> list[torch.optim.Optimizer]:
        """Optimizers that :meth:`optimizer`'s step runs from its hooks (the biased track's online classifier):
        a captured training step freezes their learning rates too, and they must be capturable."""
        return []

    def graph_unsafe(self) -> str | None:
        """Why a training step of this method cannot be replayed from a CUDA graph, or None when it can.
        A graph replays the step's kernels and nothing of its Python: the steps must do the same work every
        time, on device values only. An estimated class prior breaks that: the loss keeps each step's
        embeddings on the host side (``observe``) and is rebound to a new prior between epochs."""
        if getattr(self.loss, "prior", None) is not None:
            return "an estimated class prior (the loss observes each step on the host)"
        return None

    def monitor(self, test: ImageSet, device: torch.device) -> dict[str, float]:
        """Cheap per-epoch metrics for the learning curve (the biased track: its online classifier)."""
        return {}

    def reported_metrics(self, test_f: Tensor, test_y: Tensor, test_bias: Tensor | None,
                         curve: list[dict]) -> dict[str, float]:
        """Metrics that take the place of the linear probe's (which stay beside as ``probe_*``), from the
        test set's frozen features, labels and bias labels (on the device); {} for none."""
        return {}

    def forward(self, batch: Batch) -> Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        """Frozen encoder features of a uint8 batch (the caller sets eval mode)."""
        raise NotImplementedError
