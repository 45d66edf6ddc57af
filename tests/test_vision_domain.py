"""The vision domain's protocol: validation errors, presets and references, and checkpoint resume."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from support import mistyped_extra, tamper_extra

import domains
from domains.base import RunSpec
from domains.context import RunContext
from domains.errors import UserError

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


def _data(spec: RunSpec, ctx: RunContext):
    return VISION.prepare(spec, ctx).data


def test_resume_continues_from_the_last_checkpoint(tmp_path):
    small = dict(epochs=1, batch_size=256, knn_every=1, proj_dim=32)
    data = _data(_spec(**small), _ctx(tmp_path, resume=False))
    torch.manual_seed(0)
    first = VISION.pretrain(_spec(**small), _ctx(tmp_path, resume=False), data)
    state = torch.load(tmp_path / "work" / "checkpoint.pt", weights_only=False)
    assert state["extra"]["epoch"] == 1 and state["extra"]["curve"] == first.curve
    assert {"method", "optimizer", "scheduler", "loss"} == set(state["objects"])
    resumed = VISION.pretrain(_spec(**{**small, "epochs": 2}), _ctx(tmp_path, resume=True), data)
    assert [p["epoch"] for p in resumed.curve] == [1, 2]
    assert resumed.curve[0] == first.curve[0]  # epoch 1 was not run again
    assert resumed.info["epochs_run"] == 2
    result = VISION.evaluate(_spec(**{**small, "epochs": 2, "linear_epochs": 3}), resumed, _ctx(tmp_path, True), data)
    assert {"top1", "top5", "knn_top1"} <= set(result.metrics)


@pytest.mark.parametrize("name, value", [("train_time", "1.5"), ("curve", [1.0])])
def test_a_checkpoint_extra_of_the_wrong_type_is_the_clean_error(tmp_path, name, value):
    small = dict(epochs=1, batch_size=256, knn_every=0, proj_dim=32)
    data = _data(_spec(**small), _ctx(tmp_path, resume=False))
    VISION.pretrain(_spec(**small), _ctx(tmp_path, resume=False), data)
    tamper_extra(tmp_path / "work" / "checkpoint.pt", name, value)
    with pytest.raises(UserError, match=mistyped_extra(name)):
        VISION.pretrain(_spec(**{**small, "epochs": 2}), _ctx(tmp_path, resume=True), data)


def test_a_checkpoint_of_a_graphed_gpu_run_resumes_on_the_cpu(tmp_path):
    """A graphed run on a GPU saves its Adam groups with ``capturable=True``; PyTorch refuses such a step on the
    CPU, so the resumed run must put the flag back (the campaign packs GPU checkpoints that may resume here)."""
    small = dict(epochs=1, batch_size=256, knn_every=0, proj_dim=32)
    data = _data(_spec(**small), _ctx(tmp_path, resume=False))
    VISION.pretrain(_spec(**small), _ctx(tmp_path, resume=False), data)
    path = tmp_path / "work" / "checkpoint.pt"
    state = torch.load(path, weights_only=False)
    groups = state["objects"]["optimizer"]["param_groups"]
    assert all("capturable" in g for g in groups)  # the default optimizer is Adam-like: the flag is there to undo
    for g in groups:
        g["capturable"] = True
    torch.save(state, path)
    resumed = VISION.pretrain(_spec(**{**small, "epochs": 2}), _ctx(tmp_path, resume=True), data)
    assert [p["epoch"] for p in resumed.curve] == [1, 2]


def test_failed_compilation_warns_and_trains_exactly_as_eager(tmp_path, monkeypatch):
    import domains.vision.augment as aug

    small = dict(epochs=2, batch_size=256, knn_every=0, proj_dim=32)
    data = _data(_spec(**small), _ctx(tmp_path, resume=False))
    torch.manual_seed(0)
    eager = VISION.pretrain(_spec(**small), _ctx(tmp_path / "eager", resume=False), data)

    def broken(fn, **kwargs):
        def fail(*args, **kw):
            raise RuntimeError("no compiler here")
        return fail

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setattr(aug, "_compiled_fns", {})
    torch.manual_seed(0)
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*no compiler here.*training eagerly"):
        fallback = VISION.pretrain(_spec(compile=True, **small), _ctx(tmp_path / "compiled", resume=False), data)
    # The failed first step was undone (buffers, random state) and taken again eagerly.
    assert [p["loss"] for p in fallback.curve] == [p["loss"] for p in eager.curve]
    assert fallback.info["compiled"] is False and eager.info["compiled"] is False
    assert all(m._compiled_call_impl is None for m in fallback.model.children())
    assert not fallback.model.loss.compiled and fallback.info["loss_compiled"] is False
    assert not aug._compiled


def test_optimizer_runs_the_multi_tensor_implementation_with_the_same_steps():
    from domains.vision.train import multi_tensor

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)) for _ in range(3)]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    plain = torch.optim.Adam(params, lr=0.1, weight_decay=1e-2, foreach=False)
    fast = torch.optim.Adam(twins, lr=0.1, weight_decay=1e-2, foreach=False)
    multi_tensor(fast, torch.device("cpu"))
    assert all(g["foreach"] for g in fast.param_groups)
    for _ in range(3):
        grads = [torch.randn(5, 3) for _ in params]
        for group, opt in ((params, plain), (twins, fast)):
            for p, g in zip(group, grads):
                p.grad = g.clone()
            opt.step()
    for p, q in zip(params, twins):
        assert torch.allclose(p, q, atol=1e-6)


def test_a_long_epoch_shows_a_bar_over_its_steps(tmp_path, monkeypatch, capsys):
    """An epoch of CIFAR-10 or Biased-MNIST takes minutes on a CPU, where the epoch bar alone stood at 0% as if
    the run hung: past STEP_BAR_AFTER_S (here at once) a bar counts the epoch's steps."""
    import domains.vision.train as train

    monkeypatch.setattr(train, "STEP_BAR_AFTER_S", 0.0)
    small = dict(epochs=1, batch_size=256, knn_every=0, proj_dim=32)
    data = _data(_spec(**small), _ctx(tmp_path, resume=False))
    VISION.pretrain(_spec(**small), replace(_ctx(tmp_path, resume=False), quiet=False), data)
    err = capsys.readouterr().err
    assert "epoch 1: " in err and f"/{1257 // 256} [" in err and "step/s" in err
