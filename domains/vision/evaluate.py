"""Evaluation of a frozen encoder.

- Linear evaluation (the DCL protocol, Chuang et al. 2020): the encoder's features of the un-augmented
  training and test images are computed once; a linear classifier is trained on the training features
  with Adam (lr 1e-3, weight decay 1e-6, batch 512; smaller on tiny sets) for N epochs (paper: 100);
  top-1 / top-5 accuracy
  (percent) on the test features.
- kNN monitor (Wu et al. 2018, as in DCL's training script): cosine similarity of each test feature to
  every training feature, the k = min(200, n) nearest vote with weights ``exp(sim / t)``; top-1 percent.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from domains.vision.images import ImageSet, batches
from domains.vision.method import Method

LINEAR_BATCH = 512


@torch.no_grad()
def extract(method: Method, images: ImageSet, device: torch.device, batch_size: int = 512,
            num_workers: int = 0) -> Tensor:
    """Features of every image of ``images`` in order (float32, on ``device``), in eval mode."""
    was_training = method.training
    method.eval()
    order = torch.arange(len(images))
    out = [method.features(x.to(device, non_blocking=True)).float()
           for _, x in batches(images, order, batch_size, drop_last=False, num_workers=num_workers)]
    method.train(was_training)
    return torch.cat(out)


@torch.no_grad()
def knn_top1(train_f: Tensor, train_y: Tensor, test_f: Tensor, test_y: Tensor, num_classes: int,
             k: int = 200, temperature: float = 0.5, chunk: int = 1024) -> float:
    """Weighted kNN accuracy (percent) of ``test_f`` against the labelled ``train_f``."""
    keep = train_y >= 0
    train_f, train_y = F.normalize(train_f[keep], dim=1), train_y[keep]
    test_f = F.normalize(test_f, dim=1)
    k = min(k, len(train_y))
    correct = torch.zeros((), dtype=torch.long, device=test_f.device)  # read once, at the end
    for start in range(0, len(test_f), chunk):
        sim, idx = (test_f[start:start + chunk] @ train_f.T).topk(k, dim=1)
        votes = torch.zeros(sim.shape[0], num_classes, device=sim.device)
        votes.scatter_add_(1, train_y[idx], (sim / temperature).exp())
        correct += (votes.argmax(1) == test_y[start:start + chunk]).sum()
    return 100.0 * int(correct) / max(1, len(test_f))


def linear_eval(train_f: Tensor, train_y: Tensor, test_f: Tensor, test_y: Tensor, num_classes: int, *,
                epochs: int = 100, lr: float = 1e-3, weight_decay: float = 1e-6, seed: int = 0,
                batch_size: int = LINEAR_BATCH) -> dict:
    """Train a linear classifier on frozen features; ``top1``/``top5`` (percent) on the test set and
    the test predictions (for per-group accuracies)."""
    keep = train_y >= 0
    train_f, train_y = train_f[keep], train_y[keep]
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    clf = nn.Linear(train_f.shape[1], num_classes).to(train_f.device)
    opt = torch.optim.Adam(clf.parameters(), lr=lr, weight_decay=weight_decay)
    with torch.enable_grad():
        for _ in range(epochs):
            # One copy of the epoch's order to the device, not one per batch (each would wait for it).
            for idx in torch.randperm(len(train_y), generator=gen).to(train_f.device).split(batch_size):
                loss = F.cross_entropy(clf(train_f[idx]), train_y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    with torch.no_grad():
        logits = clf(test_f)
        train_pred = clf(train_f).argmax(1)
    top1, top5, predictions = topk_accuracy(logits, test_y)
    return {"top1": top1, "top5": top5, "train_top1": 100.0 * float((train_pred == train_y).float().mean()),
            "predictions": predictions}


def topk_accuracy(logits: Tensor, labels: Tensor) -> tuple[float, float, Tensor]:
    """Top-1 and top-5 accuracy (percent) of ``logits`` against ``labels``, and the top-1 predictions."""
    top = logits.topk(min(5, logits.shape[1]), dim=1).indices
    return (100.0 * float((top[:, 0] == labels).float().mean()),
            100.0 * float((top == labels[:, None]).any(1).float().mean()), top[:, 0])


def group_accuracy(pred: Tensor, labels: Tensor, bias: Tensor) -> dict[str, float]:
    """Accuracy (percent) on the bias-aligned (bias label = class) and bias-conflicting test samples."""
    out = {}
    for name, mask in (("aligned_top1", bias == labels), ("conflicting_top1", bias != labels)):
        if mask.any():
            out[name] = 100.0 * float((pred[mask] == labels[mask]).float().mean())
    return out
