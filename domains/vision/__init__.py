"""The vision domain: SimCLR, CMC and MoCo v2 with every unsupervised loss of the core, and the
biased-data track of Barbano et al. 2023 (supervised contrastive losses, FairKL, a cross-entropy
baseline), evaluated by linear classification on frozen features.

    harness run --domain vision --loss dcl                       # SimCLR on the embedded digits
    harness run --domain vision --method biased --dataset biased-digits --loss eps_supinfonce \\
        --set loss.epsilon=0.5 --set alpha=0.03 --set fairkl_lambda=0.75
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

import losses
from domains import register
from domains.base import (
    BenchPart,
    DatasetSpec,
    Domain,
    EvalResult,
    KeptModel,
    OpenDatasets,
    Prepared,
    PretrainResult,
    Reference,
    RunSpec,
    Supplies,
    label_prior,
)
from domains.context import RunContext
from domains.errors import UserError
from domains.vision import config as vcfg
from domains.vision.biased import Biased
from domains.vision.cmc import CMC
from domains.vision.config import PRESETS, VisionConfig
from domains.vision.data import BIASED, DATASETS, load
from domains.vision.hub import PREFIX, is_hub_name
from domains.vision.images import VisionData
from domains.vision.method import DataInfo, Method
from domains.vision.moco import MoCo
from domains.vision.simclr import SimCLR
from losses.prior import class_structure

METHODS = {"simclr": SimCLR, "cmc": CMC, "moco": MoCo, "biased": Biased}
# The networks of each method that --save-model keeps: what it trains (MoCo's momentum encoder too; the biased
# track's classifier, whose accuracy it reports), not its queue or memory banks, which only training reads.
KEPT = {"simclr": ("encoder", "head"), "moco": ("encoder", "head", "key_encoder"),
        "cmc": ("enc_l", "enc_ab", "head_l", "head_ab"), "biased": ("encoder", "head", "classifier")}
UNLABELLED = ("stl10",)  # pretraining sets with unlabelled images: no oracle, no supervised loss


# How the published runs differ from ours, as far as the public code behind them shows it.
_PUCL_PROTOCOL = (
    "PUCL's vision code is not among the public code we could read, so its protocol is not checked against "
    "ours; our `paper` preset is DCL's public setting (ResNet-50, batch 256, 400 epochs, linear probe), "
    "`cifar-bench` lightly's (ResNet-18, batch 512, 200 epochs) and `paper-debiased-pos` the positive-debiased "
    "code's (ResNet-18, batch 512, 50 epochs): read the setting column.")
_LIGHTLY_PROTOCOL = (
    "lightly reports the best epoch of its kNN monitor (k 200, temperature 0.1, backbone features), one run: "
    "compare it with our knn_best_top1 (the `cifar-bench` preset), not with top1, our linear probe.")


def _refs() -> tuple[Reference, ...]:
    pucl = "PUCL paper (Wang et al.), Table 1"
    rows = [Reference("Chuang et al. 2020 (DCL), Table 1", "imagenet100", "CMC (biased)", 73.58, method="cmc",
                      loss="infonce"),
            Reference("Chuang et al. 2020 (DCL), Table 1", "imagenet100", "CMC debiased (tau+ 0.01)", 74.6,
                      method="cmc", loss="dcl")]
    table = {  # (method, loss, label): CIFAR-10, CIFAR-100, STL-10 top-1
        ("simclr", "infonce", "SimCLR"): (90.44, 64.94, 80.50),
        ("simclr", "dcl", "SimCLR+DEB"): (90.21, 66.55, 82.17),
        ("simclr", "hcl", "SimCLR+HCL"): (90.87, 67.10, 83.33),
        ("simclr", "pucl", "SimCLR+PUCL"): (92.14, 68.14, 85.62),
        ("cmc", "infonce", "CMC"): (87.20, 58.97, 77.99),
        ("cmc", "pucl", "CMC+PUCL"): (89.25, 63.16, 81.30),
        ("moco", "infonce", "MoCo"): (85.62, 66.38, 89.13),
        ("moco", "pucl", "MoCo+PUCL"): (90.98, 71.21, 93.68),
    }
    for (method, loss, label), values in table.items():
        rows += [Reference(pucl, ds, label, v, method=method, loss=loss, protocol=_PUCL_PROTOCOL)
                 for ds, v in zip(("cifar10", "cifar100", "stl10"), values)]
    # The table of 18.02.2022 (cifar10_benchmark.py at that date), whose code our `cifar-bench` preset follows: 0.828.
    # Its later table of 27.03.2023, from a later release's code and another run, says 0.848 for the same row.
    rows.append(Reference("lightly's CIFAR-10 benchmark (table of 18.02.2022), batch 512, 200 epochs", "cifar10",
                          "SimCLR (lightly), kNN top-1", 82.8, method="simclr", loss="infonce",
                          protocol=_LIGHTLY_PROTOCOL))
    # Rho 0.995 and 0.99 read as in the paper's OpenReview submission (Table 3: 97.00 ± 0.06, 97.86 ± 0.02); there,
    # 0.999 and 0.997 read 89.55 ± 1.43 and 94.08 ± 0.10. Ours (90.51, 96.19) were not found in a version read here:
    # the published one may differ from the submission; it was not at hand.
    barbano = "Barbano et al. 2023, Table 3"
    rows += [Reference(barbano, "biased-mnist", f"eps-SupInfoNCE + FairKL (rho {rho})", v, method="biased",
                       loss="eps_supinfonce")
             for rho, v in ((0.999, 90.51), (0.997, 96.19), (0.995, 97.00), (0.99, 97.86))]
    return tuple(rows)


def _hub_dataset(name: str) -> DatasetSpec:
    return DatasetSpec(name, f"the Hugging Face image dataset {name[len(PREFIX):]} (a hub id, or a folder of its "
                       "parquet shards as given or under the data root)")


def _on_device(data: VisionData, device: torch.device) -> VisionData:
    """The in-memory sets on a CUDA device when they fit in a quarter of its memory: batches are then
    indexed there, with no copy per step (folders stay on the host, streamed by a DataLoader)."""
    if device.type != "cuda":
        return data
    splits = {id(s): s for s in (data.pretrain, data.train, data.test)}.values()
    size = sum(s.images.numel() * s.images.element_size() for s in splits if isinstance(s.images, torch.Tensor))
    return data.to(device) if size <= torch.cuda.get_device_properties(device).total_memory // 4 else data


@register
class VisionDomain(Domain):
    name = "vision"
    description = "SimCLR, CMC and MoCo v2 with every unsupervised loss; the biased-data track with FairKL"
    config_class = VisionConfig
    methods = {
        "simclr": "SimCLR with in-batch negatives (pair_scores; multiview_scores for n_views > 2, pairwise_scores "
                   "for debiased_pos with aggregation=combination)",
        "cmc": "CMC on Lab L/ab views: per-view encoders, momentum memory banks, K sampled negatives",
        "moco": "MoCo v2: momentum key encoder and a queue of K keys as negatives",
        "biased": "biased-data track: supcon / eps_supcon / eps_supinfonce / ce, + FairKL (fairkl_lambda)",
    }
    default_method = "simclr"
    # The named sets, and any Hugging Face image dataset on demand: ``name in datasets`` holds for every
    # ``hf:<hub id or folder>`` (resolved when the data loads); iteration lists the named ones.
    datasets = OpenDatasets({
        **DATASETS,
        "hf:uoft-cs/cifar10": DatasetSpec("hf:uoft-cs/cifar10", "CIFAR-10 from the Hugging Face hub (needs a network "
                                          "once); any hf:<hub id or folder of parquet shards> works the same way")},
        accepts=is_hub_name, describe=_hub_dataset)
    default_dataset = "digits"
    # SimCLR, CMC and MoCo score views of an image (cosine / temperature), with its labels for the oracle; the
    # biased track scores classmates (label_scores) or its classifier's logits (class_scores).
    supplies = Supplies(labels=True)
    method_supplies = {"biased": Supplies(positives={losses.CLASSMATES, losses.CLASS}, labels=True)}
    presets = PRESETS
    primary_metric = "top1"
    higher_is_better = True
    baseline_loss = "infonce"
    # Barbano et al. measure the epsilon-margin losses and FairKL against SupCon in the same setting.
    method_baselines = {"biased": "supcon"}
    # Their Table 3's rows are objectives: SupCon and CE at alpha 1 without FairKL, eps-SupInfoNCE at their alpha
    # with FairKL. So these keys sit with the loss, and each rho is one setting comparing them.
    method_objective_keys = {"biased": frozenset({"alpha", "fairkl_lambda", "fairkl_moments", "fairkl_form",
                                                  "fairkl_kld", "objective"})}
    references = _refs()
    # The biased track reports accuracy on the bias-aligned and bias-conflicting test images separately.
    leaderboard_metrics = ("top5", "knn_top1", "aligned_top1", "conflicting_top1", "online_best_top1")
    notes = {"biased-mnist": (
        "Our runs follow the authors' code (`--preset paper-biased`; `harness list presets` states each "
        "difference). So far one seed each, on an H100 in float32: eps-SupInfoNCE + FairKL at rho 0.99 and 0.997 "
        "(each resumed once from its epoch-51/52 checkpoint) and 0.999, and the supcon and ce baselines (alpha 1, "
        "no FairKL) at 0.999, three runs sharing the GPU. eps-SupInfoNCE + FairKL reaches 95.53 at rho 0.99 "
        "(published 97.86, -2.3), 92.57 at 0.997 (published 96.19, -3.6) and 85.36 at 0.999 (published 90.51, "
        "-5.2): with one seed, not reproduced within 2 points, and the gap grows with the bias. Their "
        "best-over-epochs figure (`online_best_top1` in the records) is 95.66, 92.57 and 86.06. At rho 0.999 "
        "supcon and ce learn the colour and nothing else: 9.96, every bias-aligned test image right and every "
        "conflicting one wrong, at chance in every one of the 80 epochs (issue 13 saw supcon at chance for 30 "
        "epochs at two rho); eps-SupInfoNCE + FairKL is 75.4 points above them. The paper's own baseline rows "
        "are not shown: not checked against its table here. Not run yet: rho 0.995, seeds 1-2, and the "
        "baselines at rho 0.997 to 0.99 (the GPU time of two sessions ran out). The network "
        "is theirs: `SupConSimpleConvNet` (debiasing/models/simpleconvnet.py in their repository) at their "
        "script's default `--train_on_head true` (no projection head, tanh features); their other variant, a "
        "head with ReLU features, is the labelled ablation `paper-biased-head`, not run yet, since the paper "
        "does not say which one its table used. Other differences, untested: the colouring is drawn once, "
        "theirs per trial, and we have one seed.")}

    def setting_note(self, config: dict[str, Any], method: str, dataset: str) -> str:
        arch = vcfg.arch_for(config["arch"], method, dataset)
        return f"{config['epochs']} epochs, batch {config['batch_size']}, {arch}"

    def resolve_config(self, config: VisionConfig, method: str, dataset: str) -> VisionConfig:
        return vcfg.resolved(config, method, dataset)

    def validate(self, spec: RunSpec) -> None:
        cfg: VisionConfig = spec.config
        if spec.method not in METHODS:
            raise UserError(f"unknown vision method '{spec.method}'; available: {', '.join(METHODS)}")
        allowed = self.accepted_losses(spec.method)
        if spec.loss not in allowed:
            others = [m for m in METHODS if spec.loss in self.accepted_losses(m)]
            raise UserError(f"method '{spec.method}' takes the losses {', '.join(allowed)}, not '{spec.loss}'"
                            + (f" (use --method {' or '.join(others)})" if others else ""))
        loss = losses.spec(spec.loss)
        try:
            loss.resolve(**spec.loss_params)
        except ValueError as exc:
            raise UserError(f"bad hyper-parameters for loss '{spec.loss}': {exc}") from None
        if loss.needs_labels and spec.dataset in UNLABELLED:
            raise UserError(f"'{spec.loss}' needs class labels for every pretraining image; {spec.dataset} "
                            "pretrains on unlabelled images")
        if cfg.fairkl_lambda > 0 and (spec.method != "biased" or spec.dataset not in BIASED):
            raise UserError(f"FairKL (fairkl_lambda > 0) needs --method biased and a dataset with bias labels: "
                            f"{', '.join(BIASED)}")
        if cfg.n_views != 2 and spec.method != "simclr":
            raise UserError("n_views > 2 is for SimCLR only")
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if cfg.batch_size % size:
            raise UserError(f"batch_size {cfg.batch_size} must be divisible by the {size} processes")
        if spec.method == "moco" and cfg.num_negatives < cfg.batch_size:
            raise UserError(f"the MoCo queue (num_negatives {cfg.num_negatives}) must hold at least one "
                            f"batch ({cfg.batch_size})")

    def _method(self, spec: RunSpec, data: VisionData, device: torch.device):
        from domains.vision.train import data_info

        cfg = vcfg.resolved(spec.config, spec.method, spec.dataset)
        loss = spec.make_loss()
        return cfg, METHODS[spec.method](cfg, data_info(data), loss, loss.spec.needs_labels).to(device)

    def prepare(self, spec: RunSpec, ctx: RunContext) -> Prepared:
        """The images, on the host, and their fingerprint: a hash of the pixels and labels the run sees (so the
        fingerprint has no cheaper path than loading them; a set read in the hub's format also names its files)."""
        c: VisionConfig = spec.config
        data = load(spec.dataset, Path(ctx.data_root), image_size=c.image_size, rho=c.rho, bias_percent=c.bias_percent,
                    download=c.download, first_classes=c.classes, image_column=c.image_column,
                    label_column=c.label_column)
        return Prepared(data, data.fingerprint)

    def pretrain(self, spec: RunSpec, ctx: RunContext, data: VisionData) -> PretrainResult:
        from domains.vision.train import pretrain, setup_device

        self.validate(spec)
        device = setup_device(ctx.device)
        data = _on_device(data, device)
        cfg, method = self._method(spec, data, device)
        return pretrain(method, data, cfg, ctx, device, desc=f"{spec.method}/{spec.loss}")

    def evaluate(self, spec: RunSpec, pretrained: PretrainResult, ctx: RunContext, data: VisionData) -> EvalResult:
        from domains.vision.evaluate import extract, group_accuracy, knn_top1, linear_eval

        cfg: VisionConfig = spec.config
        method = pretrained.model
        device = next(method.parameters()).device
        train_f, test_f = (extract(method, s, device, num_workers=cfg.num_workers) for s in (data.train, data.test))
        train_y, test_y = data.train.labels.to(device), data.test.labels.to(device)
        result = linear_eval(train_f, train_y, test_f, test_y, data.num_classes, epochs=cfg.linear_epochs,
                             lr=cfg.linear_lr, weight_decay=cfg.linear_weight_decay, seed=ctx.seed,
                             batch_size=cfg.linear_batch_size)
        metrics = {"top1": result["top1"], "top5": result["top5"], "linear_train_top1": result["train_top1"],
                   "knn_top1": knn_top1(train_f, train_y, test_f, test_y, data.num_classes, cfg.knn_k,
                                        cfg.knn_temperature)}
        monitored = [point["knn_top1"] for point in pretrained.curve if "knn_top1" in point]
        if monitored:  # lightly's CIFAR-10 benchmark reports its kNN monitor's best epoch; knn_top1 is the last
            metrics["knn_best_top1"] = max(*monitored, metrics["knn_top1"])
        if data.test.bias is not None:
            metrics.update(group_accuracy(result["predictions"], test_y, data.test.bias.to(device)))
        test_bias = None if data.test.bias is None else data.test.bias.to(device)
        online = method.reported_metrics(test_f, test_y, test_bias, pretrained.curve)
        # the biased track reports its online classifier (Barbano et al.); the probe's values stay beside
        metrics = {**metrics, **{f"probe_{k}": metrics[k] for k in online if k in metrics}, **online}
        details = {"n_train": len(data.train), "n_test": len(data.test), "n_pretrain": len(data.pretrain),
                   "feature_dim": int(train_f.shape[1]), "image_size": data.image_size,
                   "epochs_run": pretrained.info.get("epochs_run"), "linear_epochs": cfg.linear_epochs}
        labelled = data.pretrain.labels[data.pretrain.labels >= 0]  # STL-10: its labelled pretraining images only
        if len(labelled):
            unlabelled = len(data.pretrain) - len(labelled)
            details.update(label_prior(labelled), label_prior_of="the classes of the pretraining images" + (
                f" (the {len(labelled)} labelled of {len(data.pretrain)})" if unlabelled else ""))
        details["class_structure"] = class_structure(train_f, train_y, seed=ctx.seed)  # the probe's training set
        if data.test.bias is not None:
            details["test_bias_aligned_fraction"] = float((data.test.bias == data.test.labels).float().mean())
            details["train_bias_aligned_fraction"] = float((data.train.bias == data.train.labels).float().mean())
        return EvalResult(metrics=metrics, details=details)

    def trained_modules(self, spec: RunSpec, pretrained: PretrainResult) -> KeptModel:
        """The method's networks (:data:`KEPT`), and what the data decides of them and of their input: the image
        size, the class count (the biased track's classifier), the normalisation (``Method.eval_input``)."""
        method: Method = pretrained.model
        info = method.info
        return KeptModel(_kept(method, spec.method), {"image_size": info.image_size, "num_classes": info.num_classes,
                                         "mean": list(info.mean), "std": list(info.std)})

    def build_modules(self, spec: RunSpec, build: dict[str, Any]) -> dict[str, torch.nn.Module]:
        """Built by the method itself (its choices of head and final activation depend on the config and the
        loss); its queue or memory banks, which are not kept, get one row."""
        info = DataInfo(1, torch.zeros(1, dtype=torch.long), build["num_classes"], build["image_size"],
                        tuple(build["mean"]), tuple(build["std"]))
        cfg = vcfg.resolved(spec.config, spec.method, spec.dataset)
        loss = spec.make_loss()
        return _kept(METHODS[spec.method](cfg, info, loss, loss.spec.needs_labels), spec.method)

    def benchmark(self, device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
        from domains.vision.bench import run

        return run(device, quick)


def _kept(method: Method, method_name: str) -> dict[str, torch.nn.Module]:
    """The networks of ``method`` (named ``method_name``) that :data:`KEPT` names, less those without a state (the
    biased track's identity head)."""
    named = {kept: getattr(method, kept) for kept in KEPT[method_name]}
    return {kept: module for kept, module in named.items() if module.state_dict()}
