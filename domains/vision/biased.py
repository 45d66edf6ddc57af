"""The biased-data track (Barbano et al., ICLR 2023, "Unbiased Supervised Contrastive Learning"),
as the authors ran it on Biased-MNIST (EIDOSLAB/unbiased-contrastive-learning, src/main_infonce.py).

Supervised contrastive pretraining of a SimpleConvNet: the B embeddings of a batch are scored with
``label_scores`` (positives: same class) and trained with ``supcon``, ``eps_supcon`` or
``eps_supinfonce``, optionally regularised by FairKL on the L2-normalised encoder features. Without
augmentation (``augment="none"``, theirs on Biased-MNIST) each image is seen once; with augmentation
two views are scored. The objective:

    objective="paper":    alpha · L + lambda · R
    objective="authors":  alpha · (alpha · (T / 0.07) · L) + lambda · R   with FairKL (lambda > 0)
                          alpha · (T / 0.07) · L                         without it

(their script wraps the loss in alpha once, and a second time only when it adds FairKL (``--lambd`` not
0); their loss scales by temperature / base_temperature with base 0.07).

A linear classifier is trained online on the detached, normalised features of every step (its own
Adam, lr ``online_lr``, no weight decay); its test accuracy on the unbiased set is what they report,
and what this track records as ``top1`` (last epoch) beside ``online_best_top1`` (their "best
accuracy" over epochs). The logged loss includes that classifier's cross-entropy.

The network is their ``SupConSimpleConvNet`` (debiasing/models/simpleconvnet.py) at main_infonce.py's
default ``--train_on_head true``: no projection head, the encoder ends in tanh, and the loss and the
classifier both read the normalised features. ``biased_head=true`` (preset ``paper-biased-head``) is their
other variant, ``--train_on_head false``: the encoder ends in ReLU, the loss scores a head
Linear(128, 128), ReLU, Linear(128, proj_dim) (no BatchNorm; trained with the encoder), and the classifier
reads the raw encoder features. FairKL reads the normalised encoder features in both.

``ce`` is the cross-entropy baseline (their main_ce.py): a loss whose positive is the sample's class among
the classes (``positives=CLASS``), so it scores the classifier's logits (``class_scores``); the classifier is
trained jointly with the encoder on its features (ReLU-ended; tanh and L2-normalised when FairKL is on),
``alpha·CE + lambda·R``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import losses
from domains.errors import UserError
from domains.vision.evaluate import extract, group_accuracy, topk_accuracy
from domains.vision.images import ImageSet
from domains.vision.method import Batch, Method
from domains.vision.models import FEATURE_DIM, encoder, projection_head

BASE_TEMPERATURE = 0.07  # the authors' loss multiplies by temperature / 0.07 (SupContrast's convention)
EVAL_CHUNK = 4096


class Biased(Method):
    def __init__(self, cfg, info, loss, needs_labels):
        super().__init__(cfg, info, loss, needs_labels)
        small = cfg.arch in ("small", "simpleconvnet")
        self.ce = loss.spec.positives == losses.CLASS  # the loss scores the classifier's logits: it trains it
        # FairKL's hyper-parameters checked once, here, not at every step
        self.fairkl = (losses.get("fairkl", moments=cfg.fairkl_moments, form=cfg.fairkl_form, kld=cfg.fairkl_kld)
                       if cfg.fairkl_lambda > 0 else None)
        if self.ce and cfg.biased_head:
            raise UserError("biased_head=true is for the contrastive losses: ce scores the classifier's logits")
        # The small nets score a head only as the authors' train_on_head=false variant; ResNets always do.
        small_head = small and cfg.biased_head
        # The classifier reads L2-normalised features, except the plain CE baseline's and the small nets'
        # head variant's; the authors' nets end in tanh wherever the features are normalised, else in ReLU.
        self.normalized = (not self.ce or cfg.fairkl_lambda > 0) and not small_head
        final = "tanh" if small and self.normalized else "relu"
        self.encoder = encoder(cfg.arch, 3, info.image_size, final=final)
        if cfg.arch == "simpleconvnet":  # the authors' initialisation
            for m in self.encoder.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if small_head:  # their SupConSimpleConvNet's 'mlp' head: no BatchNorm
            self.head = projection_head(cfg.arch, cfg.proj_dim, batch_norm=False)
        elif not self.ce and not small:
            self.head = projection_head(cfg.arch, cfg.proj_dim)
        else:
            self.head = nn.Identity()
        self.classifier = nn.Linear(FEATURE_DIM[cfg.arch], info.num_classes)
        self.online: torch.optim.Optimizer | None = None  # built in optimizer(), once on the device
        self._pending_online_state: dict | None = None

    def optimizer(self) -> torch.optim.Optimizer:
        """The encoder's optimizer; for the contrastive losses the online classifier has its own Adam,
        stepped right after it (their optimizer_fc), so its gradient never reaches the encoder."""
        if self.ce:
            return super().optimizer()
        main = self._make_optimizer([p for n, p in self.named_parameters() if not n.startswith("classifier.")])
        self.online = torch.optim.Adam(self.classifier.parameters(), lr=self.cfg.online_lr, weight_decay=0.0)
        if self._pending_online_state is not None:
            self.online.load_state_dict(self._pending_online_state)
        main.register_step_post_hook(lambda *_: self._step_online())
        return main

    def inner_optimizers(self) -> list[torch.optim.Optimizer]:
        return [] if self.online is None else [self.online]

    def _step_online(self) -> None:
        self.online.step()
        self.online.zero_grad(set_to_none=True)

    def get_extra_state(self) -> dict:  # checkpoints carry the online classifier's Adam state
        return {"online": None if self.online is None else self.online.state_dict()}

    def set_extra_state(self, state: dict) -> None:
        if state.get("online") is None:
            return
        if self.online is None:
            self._pending_online_state = state["online"]
        else:
            self.online.load_state_dict(state["online"])

    def _n_views(self) -> int:
        return 1 if self.cfg.augment == "none" else 2  # identical views would add only a trivial positive

    def forward(self, batch: Batch) -> Tensor:
        b, views = batch.labels.shape[0], self._n_views()
        x = torch.cat([self.view(batch.images) for _ in range(views)])
        feats = self.encoder(x)
        labels = batch.labels.repeat(views)
        if self.ce:
            total = self.cfg.alpha * self.loss(losses.class_scores(self._classify(feats), labels))
        else:
            main = self.loss(losses.label_scores(self.head(feats), labels, self.cfg.temperature, gather=self.gather))
            weight = self.cfg.alpha
            if self.cfg.objective == "authors":  # their second alpha comes with FairKL only
                twice = self.cfg.alpha if self.fairkl is not None else 1.0
                weight = self.cfg.alpha * twice * self.cfg.temperature / BASE_TEMPERATURE
            total = weight * main + F.cross_entropy(self._classify(feats[:b].detach()), batch.labels)
        if self.fairkl is not None:
            total = total + self.cfg.fairkl_lambda * self.fairkl(feats[:b], batch.labels, batch.bias)
        return total

    def _classify(self, feats: Tensor) -> Tensor:
        feats = feats.float()
        return self.classifier(F.normalize(feats, dim=1) if self.normalized else feats)

    @torch.no_grad()
    def features(self, images: Tensor) -> Tensor:
        return self.encoder(self.eval_input(images))

    def monitor(self, test: ImageSet, device: torch.device) -> dict[str, float]:
        """Each epoch: the online classifier's test accuracy, and ``zero_rows``, the test images whose features
        are all zero. Those carry nothing a classifier could read; ReLU-ended features (``biased_head``) can die
        so, and the count shows when, where the final record's ``class_structure`` shows only how many."""
        with torch.no_grad():
            feats = extract(self, test, device, batch_size=EVAL_CHUNK)
            pred = self._classify(feats).argmax(1)
            zero_rows = int((feats == 0).all(dim=1).sum())
        return {"online_top1": 100.0 * float((pred == test.labels.to(device)).float().mean()), "zero_rows": zero_rows}

    def reported_metrics(self, test_f: Tensor, test_y: Tensor, test_bias: Tensor | None,
                         curve: list[dict]) -> dict[str, float]:
        with torch.no_grad():
            top1, top5, pred = topk_accuracy(self._classify(test_f), test_y)
        out = {"top1": top1, "top5": top5}
        seen = [p["online_top1"] for p in curve if "online_top1" in p]
        out["online_best_top1"] = max([out["top1"], *seen])
        if test_bias is not None:
            out.update(group_accuracy(pred, test_y, test_bias))
        return out
