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
    RunSpec,
    Supplies,
    counted,
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
from losses.prior import MIN_ROWS, class_structure, scorable

METHODS = {"simclr": SimCLR, "cmc": CMC, "moco": MoCo, "biased": Biased}
# The networks of each method that --save-model keeps: what it trains (MoCo's momentum encoder too; the biased
# track's classifier, whose accuracy it reports), not its queue or memory banks, which only training reads.
KEPT = {"simclr": ("encoder", "head"), "moco": ("encoder", "head", "key_encoder"),
        "cmc": ("enc_l", "enc_ab", "head_l", "head_ab"), "biased": ("encoder", "head", "classifier")}
UNLABELLED = ("stl10",)  # pretraining sets with unlabelled images: no oracle, no supervised loss


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
    # Its published rows and notes: page text, kept out of the run's code (Domain.published_module).
    published_module = "domains.vision.published"
    # The biased track reports accuracy on the bias-aligned and bias-conflicting test images separately.
    leaderboard_metrics = ("top5", "knn_top1", "aligned_top1", "conflicting_top1", "online_best_top1")

    def setting_note(self, config: dict[str, Any], method: str, dataset: str) -> str:
        arch = vcfg.arch_for(config["arch"], method, dataset)
        return f"{counted(config['epochs'], 'epoch')}, batch {config['batch_size']}, {arch}"

    def resolve_config(self, config: VisionConfig, method: str, dataset: str) -> VisionConfig:
        return vcfg.resolved(config, method, dataset)

    def unused_fields(self, config: VisionConfig, method: str, dataset: str, loss: str) -> dict[str, str]:
        unused = {}
        if config.optimizer == "adam":
            unused["momentum"] = "optimizer=adam has no momentum (sgd only)"
        for key, users, what in (("num_negatives", ("cmc", "moco"), "draws no negatives from a bank or a queue"),
                                 ("cmc_momentum", ("cmc",), "has no memory bank"),
                                 ("moco_momentum", ("moco",), "has no key encoder")):
            if method not in users:
                unused[key] = f"method {method} {what} ({' and '.join(users)} only)"
        if dataset not in BIASED[:2]:
            unused["rho"] = f"{dataset} is not coloured here (biased-digits and biased-mnist only)"
        if dataset not in BIASED[2:]:
            unused["bias_percent"] = f"{dataset} has no conflicting-sample split (corrupted-cifar10 and bffhq only)"
        if dataset in (*BIASED, "digits", "imagenet100"):  # read from their own files, never in the hub's format
            unused.update(dict.fromkeys(("image_column", "label_column"), f"{dataset} is not read in the hub's format"))
        if config.augment == "none":
            unused["crop_min_scale"] = "augment=none crops nothing"
        if method != "biased":
            unused.update(dict.fromkeys(("alpha", "objective", "online_lr", "biased_head"),
                                        f"method {method} is not the biased track (--method biased only)"))
        elif loss == "ce":
            unused.update(dict.fromkeys(("objective", "online_lr"),
                                        "ce trains the classifier itself (no contrastive objective, no online one)"))
        if config.fairkl_lambda == 0:
            unused.update(dict.fromkeys(("fairkl_moments", "fairkl_form", "fairkl_kld"),
                                        "fairkl_lambda=0 turns FairKL off"))
        elif config.fairkl_form == "authors":
            unused["fairkl_moments"] = "fairkl_form=authors matches its own moments (fairkl_form=gaussian only)"
        else:
            unused["fairkl_kld"] = "fairkl_form=gaussian has no std term of its own (fairkl_form=authors only)"
        return unused

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
                    label_column=c.label_column, colour_seed=c.colour_seed)
        if problem := _probe_set_problem(data.train.labels):
            raise UserError(f"{spec.dataset}: {problem}")
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


def _probe_set_problem(labels: torch.Tensor) -> str | None:
    """Why the evaluation's class structure (:func:`losses.prior.class_structure`) cannot score the linear probe's
    training set of ``labels``, or None: it needs MIN_ROWS images, of 2 classes or more, more images than classes.
    What the data decides is refused before training; only what training decides (all-zero features) is left to
    the evaluation, which records what it can."""
    where = "training images (the linear probe's set, after any held-out test images)"
    count = len(labels)
    if count < MIN_ROWS:
        return f"{count} {where}; the evaluation needs at least {MIN_ROWS}"
    if not scorable(labels.cpu().numpy()):
        classes = len(torch.unique(labels))
        return (f"its {count} {where} are of {counted(classes, 'class', 'classes')}; the evaluation needs 2 classes "
                "or more, and more images than classes")
    return None


def _kept(method: Method, method_name: str) -> dict[str, torch.nn.Module]:
    """The networks of ``method`` (named ``method_name``) that :data:`KEPT` names, less those without a state (the
    biased track's identity head)."""
    named = {kept: getattr(method, kept) for kept in KEPT[method_name]}
    return {kept: module for kept, module in named.items() if module.state_dict()}
