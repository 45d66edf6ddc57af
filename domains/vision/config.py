"""The vision domain's configuration: one pydantic dataclass whose defaults are the quick CPU setting, and the
presets. Every range and choice is a constraint on its field, checked when the config is built. ``"auto"`` / ``0``
values resolve to the method's or dataset's published value (:func:`resolved`), so one config serves SimCLR, CMC,
MoCo and the biased-data track.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from pydantic.dataclasses import dataclass

from domains.base import ADDED, RUNTIME, Preset

# Temperatures of the source papers: SimCLR as in Chuang et al. 2020 (DCL), CMC's NCE softmax
# (Tian et al. 2020), MoCo v2 (Chen et al. 2020), the biased track as Barbano et al. 2023.
METHOD_TEMPERATURE = {"simclr": 0.5, "cmc": 0.07, "moco": 0.2, "biased": 0.1}
Momentum = Annotated[float, Field(ge=0.0, lt=1.0)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


@dataclass(config=ConfigDict(extra="forbid"))
class VisionConfig:
    """Every knob of a vision run. Defaults: the quick CPU setting on the embedded digits."""

    # auto: small (digits, biased digits), simpleconvnet (biased track), resnet18 (others)
    arch: Literal["auto", "small", "simpleconvnet", "resnet18", "resnet50"] = "auto"
    # 0: the dataset's own size (digits and biased digits: upsampled to 16)
    image_size: Annotated[int, Field(ge=0, le=1024)] = 0
    epochs: PositiveInt = 30
    batch_size: Annotated[int, Field(ge=2)] = 128  # contrastive batches need negatives
    optimizer: Literal["adam", "sgd"] = "adam"  # adam (DCL) | sgd (with momentum; Barbano et al.'s script default)
    lr: PositiveFloat = 1e-3
    momentum: Momentum = 0.9  # sgd only
    weight_decay: NonNegativeFloat = 1e-6
    lr_decay: Literal["none", "step", "cosine"] = "none"  # none | step (x0.1 at 1/3 and 2/3 of the epochs) | cosine
    temperature: NonNegativeFloat = 0.0  # 0: the method's paper value (METHOD_TEMPERATURE)
    proj_dim: PositiveInt = 128
    # the biased track (--method biased) on its small nets: the authors' SupConSimpleConvNet at their default
    # train_on_head=true (false here: no head, tanh features) or at train_on_head=false (true here: a head
    # without BatchNorm, ReLU features, the classifier on the raw features). ResNets always have a head.
    biased_head: bool = field(default=False, metadata={ADDED: True})
    # SimCLR: V > 2 views give M = V - 1 positives (Chuang et al. Fig. 4c)
    n_views: Annotated[int, Field(ge=2, le=64)] = 2
    # auto: simclr (CMC: crop, biased track: none, as Barbano et al.)
    augment: Literal["auto", "simclr", "crop", "none"] = "auto"
    crop_min_scale: Annotated[float, Field(gt=0.0, le=1.0)] = 0.2  # random resized crop scale range [crop_min_scale, 1]
    num_negatives: PositiveInt = 4096  # CMC negatives drawn from the bank / MoCo queue length
    cmc_momentum: Momentum = 0.5  # memory-bank momentum (Tian et al.)
    moco_momentum: Momentum = 0.99  # key-encoder momentum (0.999 in MoCo on ImageNet)
    rho: Probability = 0.99  # biased datasets: probability that the colour matches the class
    # biased-digits and biased-mnist: which draw of the colouring (train and test; 0: the draw of every run before
    # the option). Barbano et al. redraw it with each trial's seed; here a seed varies training only.
    colour_seed: NonNegativeInt = field(default=0, metadata={ADDED: True})
    # digits and biased digits: keep the digits 0..classes-1 (2..10), a known class prior about 1/classes; 0: all 10
    classes: NonNegativeInt = 0
    bias_percent: str = "0.5pct"  # Corrupted CIFAR-10 / bFFHQ: the conflicting-sample split
    image_column: str = ""  # sets in the hub's format (hf:...): "" finds img or image, else any Image feature
    label_column: str = ""  # "" finds label, fine_label or labels, else any ClassLabel feature
    alpha: NonNegativeFloat = 1.0  # weight of the contrastive loss (Barbano et al.: alpha·L + lambda·R)
    fairkl_lambda: NonNegativeFloat = 0.0  # weight lambda of the FairKL regulariser; 0 turns it off
    fairkl_moments: Literal["full", "mean"] = "full"  # the gaussian form: full (Eq. 10) | mean (EnD-like ablation)
    # gaussian (the paper's Eq. 10) | authors (their bounded moment matching)
    fairkl_form: Literal["gaussian", "authors"] = "gaussian"
    fairkl_kld: NonNegativeFloat = 1.0  # weight of the authors' form's std term (their --kld)
    # paper: alpha·L + lambda·R | authors: alpha·(alpha·(T/0.07)·L) + lambda·R, with alpha once when lambda = 0
    objective: Literal["paper", "authors"] = "paper"
    online_lr: PositiveFloat = 1e-3  # the biased track's online linear classifier (Adam, no weight decay)
    linear_epochs: PositiveInt = 100  # linear evaluation, Adam 1e-3 on frozen features (DCL protocol)
    linear_lr: PositiveFloat = 1e-3
    linear_batch_size: PositiveInt = 64  # DCL: 512 on 50,000 images; 64 gives the 1,257 digits enough steps
    linear_weight_decay: NonNegativeFloat = 1e-6
    knn_k: PositiveInt = 200
    knn_temperature: PositiveFloat = 0.5  # the kNN monitor's weights exp(similarity / T)
    # kNN monitor every N epochs (and at the last); 0: off. The final evaluation reports knn_top1 either way
    knn_every: NonNegativeInt = 5
    bf16: bool = True  # bf16 autocast on CUDA; the losses run in float32 anyway
    # torch.compile the networks, the loss and the augmentation (eager, with a warning, if it fails): the same model and
    # maths in fused kernels, so a runtime field (float differences of the order another thread count gives)
    compile: bool = field(default=False, metadata={RUNTIME: True})
    # on CUDA, one process: each training step replayed from a CUDA graph (one launch for its hundreds of kernels;
    # eager, with a warning, if capture fails): the same kernels on the same numbers, so a runtime field
    cuda_graph: bool = field(default=True, metadata={RUNTIME: True})
    # image-folder loader processes (0: the main process): speed only
    num_workers: NonNegativeInt = field(default=4, metadata={RUNTIME: True})
    download: bool = field(default=False, metadata={RUNTIME: True})  # try torchvision's download when missing


# lightly's CIFAR-10 benchmark (lightly-ai/lightly, docs/source/getting_started/benchmarks/cifar10_benchmark.py,
# the table of 18.02.2022): what it fixes for its SimCLR-style models, in our fields. The learning rate is
# 0.06 scaled linearly with the batch (0.06 · 512 / 128); the scheduler is stepped once per epoch, as Lightning does.
LIGHTLY_CIFAR = {
    "arch": "resnet18", "batch_size": 512, "optimizer": "sgd", "lr": 0.24, "momentum": 0.9, "weight_decay": 5e-4,
    "lr_decay": "cosine", "augment": "simclr", "crop_min_scale": 0.08, "knn_k": 200, "knn_temperature": 0.1,
    "knn_every": 1, "linear_batch_size": 512,
}
LIGHTLY_NOTE = (
    "ResNet-18 with a 3x3 stride-1 stem and no max-pool, projection head 512-512-128, batch 512, SGD lr "
    "0.06*batch/128 = 0.24, momentum 0.9, weight decay 5e-4, cosine schedule over the epochs, the method's "
    "temperature (SimCLR: 0.5, lightly's NT-Xent default), SimCLR's augmentation "
    "without blur (crop scale (0.08, 1), flip, colour jitter 0.4/0.4/0.4/0.1 with p 0.8, grayscale p 0.2), kNN "
    "monitor on the backbone's features after every epoch (k 200, temperature 0.1, every training image in the "
    "bank): knn_top1 is the last epoch's, knn_best_top1 the maximum over epochs (lightly's reported figure). "
    "Its batch-128 rows: --set batch_size=128 --set lr=0.06. Supervised losses: --method biased. Where ours "
    "differs: the head has BatchNorm after its hidden layer (DCL's head; lightly's had none in that release, "
    "its later ones have BatchNorm after both layers); images normalised with CIFAR-10's statistics (lightly: "
    "ImageNet's; a per-channel affine change the first convolution and BatchNorm absorb); bf16 autocast on "
    "CUDA (lightly: float32; our losses run in float32); a linear probe after pretraining gives top1, our "
    "primary metric (lightly reports the kNN figure only); MoCo and CMC keep their papers' temperatures and "
    "queues (lightly's MoCo: temperature 0.1, a symmetric loss, 8192 keys at batch 512); 3 seeds (lightly: 1). "
    "Cost on a GPU: not measured yet (lightly's SimCLR at batch 512: 158 min for 200 epochs, 633 min for 800, on "
    "one RTX A6000)"
)

# Barbano et al. 2023 on Biased-MNIST as their code ran it (the paper-biased preset says where each value is from).
BARBANO_MNIST = {
    "arch": "simpleconvnet", "batch_size": 256, "epochs": 80, "optimizer": "sgd", "lr": 1e-3, "momentum": 0.9,
    "weight_decay": 1e-4, "lr_decay": "step", "temperature": 0.1, "augment": "none", "alpha": 0.03,
    "objective": "authors", "fairkl_lambda": 0.75, "fairkl_form": "authors", "fairkl_kld": 1.0, "online_lr": 1e-3,
    "knn_every": 0, "linear_batch_size": 512, "bf16": False,
}
# Troeshestova & Isachenko's positive-debiased SimCLR (intsystems/2023-Project-123, code/main.py, which builds on
# chingyaoc/DCL): what their script fixes, with the batch 512 and 50 epochs.
DEBIASED_POS = {
    "arch": "resnet18", "batch_size": 512, "epochs": 50, "optimizer": "adam", "lr": 1e-3, "weight_decay": 1e-6,
    "augment": "simclr", "crop_min_scale": 0.08, "knn_every": 1, "knn_k": 200, "knn_temperature": 0.5,
    "linear_batch_size": 512,
}

QUICK = Preset("the embedded digits with a small encoder, 30 epochs and a 100-epoch linear probe: about 30 s a "
               "seed on one CPU core, under 3 minutes for the 5 seeds", {}, seeds=(0, 1, 2, 3, 4))
PRESETS = {
    "quick": QUICK,
    "paper": Preset(
        "Chuang et al. 2020 (DCL): ResNet-50 with a CIFAR stem, batch 256, 400 epochs, Adam 1e-3, "
        "weight decay 1e-6, SimCLR temperature 0.5, crop scale (0.08, 1). Differences from their code "
        "(chingyaoc/DCL): no Gaussian blur in the augmentation, and the linear probe learns from the frozen "
        "features of un-augmented images in eval mode, where their linear.py feeds augmented images through the "
        "frozen network in train mode (its BatchNorm statistics keep moving)",
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
        "fairkl_lambda=0 (ce on this schedule, not main_ce.py's defaults: lr 0.01, cosine, 100 epochs). "
        "Float32 as theirs (bf16 off). Differences from their run: the colouring drawn once (theirs redrawn "
        "per trial; --set colour_seed=k takes the k-th draw), kNN monitor off, full batches only (an epoch "
        "leaves out 96 of the 60,000 images, others each epoch; theirs trains on a last batch of 96), the "
        "paper's alpha/lambda (their yaml sets neither)",
        BARBANO_MNIST,
    ),
    "paper-biased-head": Preset(
        "paper-biased with the authors' other network, a labelled ablation: their SupConSimpleConvNet "
        "(debiasing/models/simpleconvnet.py) at --train_on_head false, where paper-biased is its default "
        "true. The encoder ends in ReLU, the contrastive loss scores a projection head Linear 128-128, ReLU, "
        "Linear 128-128 (no BatchNorm, trained with the encoder), and the online classifier reads the raw "
        "encoder features; FairKL still reads the normalised encoder features. Barbano et al.'s Table 3 does "
        "not say which variant it used",
        {**BARBANO_MNIST, "biased_head": True},
    ),
    "paper-debiased-pos": Preset(
        "Troeshestova & Isachenko's positive-debiased SimCLR on CIFAR-10 as their code ran it "
        "(intsystems/2023-Project-123, code/main.py, from chingyaoc/DCL) at the issue's batch 512 and 50 epochs: "
        "ResNet-18 with a CIFAR stem, head 512-512-128, Adam lr 1e-3, weight decay 1e-6, temperature 0.5, DCL's "
        "augmentation (crop scale (0.08, 1), flip, colour jitter, grayscale). Each epoch's figure is the weighted "
        "kNN monitor on the backbone's features (k 200, temperature 0.5, every training image in the bank), "
        "theirs too: knn_top1 in the curve; the linear probe (Adam 1e-3, 100 epochs, batch 512) after the last "
        "epoch gives top1 and top5. Their M positives: --set n_views=M+1 (M = 2: 3 views, M = 4: 5 views) with "
        "--set loss.aggregation=grouping or combination. Differences: bf16 autocast on CUDA (theirs float32; our "
        "losses run in float32), the kNN top-5 per epoch not recorded (the probe's top5 at the end), 3 seeds",
        DEBIASED_POS,
    ),
    "cifar-bench": Preset(f"lightly's CIFAR-10 benchmark, 200 epochs: {LIGHTLY_NOTE}",
                          {**LIGHTLY_CIFAR, "epochs": 200}),
    "cifar-bench-800": Preset(f"lightly's CIFAR-10 benchmark, 800 epochs (its long run): {LIGHTLY_NOTE}",
                              {**LIGHTLY_CIFAR, "epochs": 800}),
    "regression": Preset("the regression suite's setting (harness/suites/regression.txt): the embedded digits "
                         "with the small encoder, 10 epochs, the 100-epoch linear probe, 5 seeds; about 12 s of "
                         "CPU a seed on one core. simclr infonce measured 95.2 +- 0.5 (5 seeds), so the suite's "
                         "2-point tolerance (another CPU's kernels moved the seeds by up to +1.3), not the spread, "
                         "sets the smallest drop it flags",
                         {"epochs": 10}, seeds=(0, 1, 2, 3, 4)),
}


def arch_for(arch: str, method: str, dataset: str) -> str:
    """The network ``arch`` names: ``auto`` is the small CNN on the digits, the authors' network for the biased
    track, else ResNet-18."""
    if arch != "auto":
        return arch
    return "small" if dataset in ("digits", "biased-digits") else "simpleconvnet" if method == "biased" else "resnet18"


def resolved(cfg: VisionConfig, method: str, dataset: str) -> VisionConfig:
    """``cfg`` with every ``auto`` / ``0`` replaced by the method's or dataset's value."""
    arch = arch_for(cfg.arch, method, dataset)
    augment = cfg.augment
    if augment == "auto":
        augment = {"cmc": "crop", "biased": "none"}.get(method, "simclr")
    temperature = cfg.temperature or METHOD_TEMPERATURE[method]
    classes = cfg.classes or (10 if dataset in ("digits", "biased-digits") else 0)  # 0 elsewhere: all of them
    return replace(cfg, arch=arch, augment=augment, temperature=temperature, classes=classes)
