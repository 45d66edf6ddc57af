"""The vision domain's configuration: one dataclass whose defaults are the quick CPU setting, and the
presets. ``"auto"`` / ``0`` values resolve to the method's or dataset's published value
(:func:`resolved`), so one config serves SimCLR, CMC, MoCo and the biased-data track.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from domains.base import Preset, UserError

# Temperatures of the source papers: SimCLR as in Chuang et al. 2020 (DCL), CMC's NCE softmax
# (Tian et al. 2020), MoCo v2 (Chen et al. 2020), the biased track as Barbano et al. 2023.
METHOD_TEMPERATURE = {"simclr": 0.5, "cmc": 0.07, "moco": 0.2, "biased": 0.1}
ARCHS = ("auto", "small", "simpleconvnet", "resnet18", "resnet50")
AUGMENTS = ("auto", "simclr", "crop", "none")
LR_DECAYS = ("none", "step", "cosine")
OPTIMIZERS = ("adam", "sgd")


@dataclass
class VisionConfig:
    """Every knob of a vision run. Defaults: the quick CPU setting on the embedded digits."""

    arch: str = "auto"  # auto: small (digits, biased digits), simpleconvnet (biased track), resnet18 (others)
    image_size: int = 0  # 0: the dataset's own size (digits and biased digits: upsampled to 16)
    epochs: int = 30
    batch_size: int = 128
    optimizer: str = "adam"  # adam (DCL) | sgd (with momentum; Barbano et al.'s script default)
    lr: float = 1e-3
    momentum: float = 0.9  # sgd only
    weight_decay: float = 1e-6
    lr_decay: str = "none"  # none | step (x0.1 at 1/3 and 2/3 of the epochs) | cosine
    temperature: float = 0.0  # 0: the method's paper value (METHOD_TEMPERATURE)
    proj_dim: int = 128
    n_views: int = 2  # SimCLR: V > 2 views give M = V - 1 positives (Chuang et al. Fig. 4c)
    augment: str = "auto"  # auto: simclr (CMC: crop, biased track: none, as Barbano et al.)
    crop_min_scale: float = 0.2  # random resized crop scale range [crop_min_scale, 1]
    num_negatives: int = 4096  # CMC negatives drawn from the bank / MoCo queue length
    cmc_momentum: float = 0.5  # memory-bank momentum (Tian et al.)
    moco_momentum: float = 0.99  # key-encoder momentum (0.999 in MoCo on ImageNet)
    rho: float = 0.99  # biased datasets: probability that the colour matches the class
    bias_percent: str = "0.5pct"  # Corrupted CIFAR-10 / bFFHQ: the conflicting-sample split
    alpha: float = 1.0  # weight of the contrastive loss (Barbano et al.: alpha·L + lambda·R)
    fairkl_lambda: float = 0.0  # weight lambda of the FairKL regulariser; 0 turns it off
    fairkl_moments: str = "full"  # the gaussian form: full (Eq. 10) | mean (EnD-like ablation)
    fairkl_form: str = "gaussian"  # gaussian (the paper's Eq. 10) | authors (their bounded moment matching)
    fairkl_kld: float = 1.0  # weight of the authors' form's std term (their --kld)
    objective: str = "paper"  # paper: alpha·L + lambda·R | authors: alpha·(alpha·(T/0.07)·L) + lambda·R
    online_lr: float = 1e-3  # the biased track's online linear classifier (Adam, no weight decay)
    linear_epochs: int = 100  # linear evaluation, Adam 1e-3 on frozen features (DCL protocol)
    linear_lr: float = 1e-3
    linear_batch_size: int = 64  # DCL: 512 on 50,000 images; 64 gives the 1,257 digits enough steps
    linear_weight_decay: float = 1e-6
    knn_k: int = 200
    knn_temperature: float = 0.5
    knn_every: int = 5  # kNN monitor every N epochs (and at the last); 0: off
    bf16: bool = True  # bf16 autocast on CUDA; the losses run in float32 anyway
    compile: bool = False  # torch.compile the networks and the augmentation (eager, with a warning, if it fails)
    num_workers: int = 4  # image-folder datasets only
    download: bool = False  # try torchvision's download when the files are missing


QUICK = Preset("the embedded digits with a small encoder, 30 epochs and a 100-epoch linear probe: about 30 s a "
               "seed on one CPU core, under 3 minutes for the 5 seeds", {}, seeds=(0, 1, 2, 3, 4))
PRESETS = {
    "quick": QUICK,
    "paper": Preset(
        "Chuang et al. 2020 (DCL): ResNet-50 with a CIFAR stem, batch 256, 400 epochs, Adam 1e-3, "
        "weight decay 1e-6, SimCLR temperature 0.5, crop scale (0.08, 1)",
        {"arch": "resnet50", "batch_size": 256, "epochs": 400, "lr": 1e-3, "weight_decay": 1e-6,
         "crop_min_scale": 0.08, "knn_every": 10, "linear_batch_size": 512},
    ),
    "paper-biased": Preset(
        "Barbano et al. 2023 on Biased-MNIST as their code ran it (src/exp/mnist-infonce.yaml and the "
        "defaults of src/main_infonce.py): SimpleConvNet (tanh, no head), one view per image, batch 256, "
        "80 epochs, SGD lr 1e-3 momentum 0.9 weight decay 1e-4 (the yaml sets no optimizer), x0.1 at "
        "epochs 26 and 53, temperature 0.1, alpha 0.03 applied twice and the loss scaled by 0.1/0.07 "
        "(objective=authors), FairKL lambda 0.75 in the authors' bounded form (fairkl_form=authors, kld 1) "
        "on the normalised encoder features, the online linear classifier (Adam 1e-3) reported at the last "
        "epoch (their best-over-epochs beside it), images normalised with mean 0.5 and std 0.5. Add "
        "--set loss.epsilon=0.5 for eps_supinfonce; supcon and ce baselines: --set alpha=1 --set "
        "fairkl_lambda=0. Float32 as theirs (bf16 off). Differences from their run: the colouring drawn "
        "once (theirs redrawn per trial), kNN monitor off, the paper's alpha/lambda (their yaml sets neither)",
        {"arch": "simpleconvnet", "batch_size": 256, "epochs": 80, "optimizer": "sgd", "lr": 1e-3,
         "momentum": 0.9, "weight_decay": 1e-4, "lr_decay": "step", "temperature": 0.1, "augment": "none",
         "alpha": 0.03, "objective": "authors", "fairkl_lambda": 0.75, "fairkl_form": "authors",
         "fairkl_kld": 1.0, "online_lr": 1e-3, "knn_every": 0, "linear_batch_size": 512, "bf16": False},
    ),
}


def check(cfg: VisionConfig) -> None:
    """UserError for a value no run can use."""
    choices = {"arch": ARCHS, "augment": AUGMENTS, "lr_decay": LR_DECAYS, "optimizer": OPTIMIZERS,
               "fairkl_moments": ("full", "mean"), "fairkl_form": ("gaussian", "authors"),
               "objective": ("paper", "authors")}
    for name, allowed in choices.items():
        if getattr(cfg, name) not in allowed:
            raise UserError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
    positive = ("epochs", "batch_size", "proj_dim", "num_negatives", "knn_k", "linear_epochs", "linear_batch_size")
    for name in positive:
        if getattr(cfg, name) < 1:
            raise UserError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.batch_size < 2:
        raise UserError("batch_size must be >= 2: contrastive batches need negatives")
    if cfg.n_views < 2:
        raise UserError(f"n_views must be >= 2, got {cfg.n_views}")
    if not 0.0 < cfg.crop_min_scale <= 1.0:
        raise UserError(f"crop_min_scale must lie in (0, 1], got {cfg.crop_min_scale}")
    for name in ("cmc_momentum", "moco_momentum"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise UserError(f"{name} must lie in [0, 1), got {getattr(cfg, name)}")
    if not 0.0 <= cfg.rho <= 1.0:
        raise UserError(f"rho must lie in [0, 1], got {cfg.rho}")
    if cfg.temperature < 0 or cfg.lr <= 0 or cfg.alpha < 0 or cfg.fairkl_lambda < 0:
        raise UserError("temperature, alpha and fairkl_lambda must be >= 0 and lr > 0")
    if cfg.online_lr <= 0 or cfg.fairkl_kld < 0 or not 0.0 <= cfg.momentum < 1.0:
        raise UserError("online_lr must be > 0, fairkl_kld >= 0 and momentum in [0, 1)")


def resolved(cfg: VisionConfig, method: str, dataset: str) -> VisionConfig:
    """``cfg`` with every ``auto`` / ``0`` replaced by the method's or dataset's value."""
    arch = cfg.arch
    if arch == "auto":
        arch = ("small" if dataset in ("digits", "biased-digits")
                else "simpleconvnet" if method == "biased" else "resnet18")
    augment = cfg.augment
    if augment == "auto":
        augment = {"cmc": "crop", "biased": "none"}.get(method, "simclr")
    temperature = cfg.temperature or METHOD_TEMPERATURE[method]
    return replace(cfg, arch=arch, augment=augment, temperature=temperature)
