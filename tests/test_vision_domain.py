"""The vision domain's protocol: validation errors, presets and references, and checkpoint resume."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

import domains
from domains.base import RunContext, RunSpec, UserError

VISION = domains.get("vision")


def _spec(method="simclr", loss="infonce", dataset="digits", loss_params=None, **cfg) -> RunSpec:
    return RunSpec("vision", method, dataset, loss, loss_params or {}, "quick", 0,
                   replace(VISION.config_class(), **cfg))


def test_protocol_attributes():
    assert VISION.default_dataset == "digits" and not VISION.datasets["digits"].needs_download
    assert not VISION.datasets["biased-digits"].needs_download
    assert {"quick", "paper"} <= set(VISION.presets)
    assert VISION.primary_metric == "top1" and VISION.higher_is_better
    assert set(VISION.methods) == {"simclr", "cmc", "moco", "biased"}
    paper = VISION.presets["paper"].overrides
    assert (paper["arch"], paper["batch_size"], paper["epochs"]) == ("resnet50", 256, 400)
    refs = {(r.dataset, r.method, r.loss): r.value for r in VISION.references if "rho" not in r.label}
    assert refs[("cifar10", "simclr", "pucl")] == 92.14 and refs[("imagenet100", "cmc", "dcl")] == 74.6
    for field in (f for f in VISION.config_class.__dataclass_fields__):
        assert getattr(VISION.config_class(), field) is not None  # every field has a default


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(method="simclr", loss="supcon"), "use --method biased"),
    (dict(method="biased", loss="dcl"), "takes the losses"),
    (dict(method="biased", loss="supcon", fairkl_lambda=0.5), "bias labels"),
    (dict(method="cmc", loss="infonce", n_views=3), "SimCLR only"),
    (dict(loss="unbiased", dataset="stl10"), "needs class labels"),
    (dict(method="moco", loss="infonce", num_negatives=16, batch_size=64), "queue"),
    (dict(arch="vgg"), "arch must be one of"),
    (dict(method="biased", loss="ce", loss_params={"epsilon": 0.5}), "no hyper-parameters"),
])
def test_validate_rejects_impossible_runs(kwargs, match):
    with pytest.raises(UserError, match=match):
        VISION.validate(_spec(**kwargs))


def test_validate_accepts_the_results_grid():
    for loss in ("infonce", "dcl", "hcl", "pucl", "debiased_pos", "unbiased"):
        for method in ("simclr", "cmc", "moco"):
            VISION.validate(_spec(method, loss))
    for loss in ("supcon", "eps_supcon", "eps_supinfonce", "ce"):
        VISION.validate(_spec("biased", loss, "biased-digits", fairkl_lambda=0.75, alpha=0.03))


def _ctx(tmp_path: Path, resume: bool) -> RunContext:
    return RunContext(seed=3, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path / "work",
                      resume=resume, quiet=True)


def test_resume_continues_from_the_last_checkpoint(tmp_path):
    small = dict(epochs=1, batch_size=256, knn_every=1, proj_dim=32)
    torch.manual_seed(0)
    first = VISION.pretrain(_spec(**small), _ctx(tmp_path, resume=False))
    state = torch.load(tmp_path / "work" / "checkpoint.pt", weights_only=False)
    assert state["epoch"] == 1 and state["curve"] == first.curve
    resumed = VISION.pretrain(_spec(**{**small, "epochs": 2}), _ctx(tmp_path, resume=True))
    assert [p["epoch"] for p in resumed.curve] == [1, 2]
    assert resumed.curve[0] == first.curve[0]  # epoch 1 was not run again
    assert resumed.info["epochs_run"] == 2
    result = VISION.evaluate(_spec(**{**small, "epochs": 2, "linear_epochs": 3}), resumed, _ctx(tmp_path, True))
    assert {"top1", "top5", "knn_top1"} <= set(result.metrics)
