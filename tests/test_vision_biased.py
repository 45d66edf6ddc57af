"""The biased track as Barbano et al. ran it: FairKL's authors' form against a naive loop over the
spec's formula, the objective's weights, the online classifier, Biased-MNIST's construction, the
paper-biased preset's documented differences, and a short run on the embedded biased digits."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import pytest
import torch

import domains
import losses
from domains.base import RunSpec
from domains.context import RunContext
from domains.vision.biased import BASE_TEMPERATURE, Biased
from domains.vision.colouring import MNIST_COLOURS, assign_colours, biased_mnist, colourize_binary
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.images import ImageSet
from domains.vision.method import Batch, DataInfo

VISION = domains.get("vision")


def naive_authors_fairkl(z: list[list[float]], y: list[int], b: list[int], kld: float) -> float:
    """The spec's authors' form, by loops over python floats: masks include i = j, means over the
    group (0 when empty), sd = unbiased std of the B×B masked matrix (zeros outside the group)."""
    n = len(z)
    norm = [[v / math.sqrt(sum(x * x for x in row)) for v in row] for row in z]
    sim = [[sum(p * q for p, q in zip(norm[i], norm[j])) for j in range(n)] for i in range(n)]
    groups = {"PA": (True, True), "PC": (True, False), "NA": (False, True), "NC": (False, False)}
    mu, sd = {}, {}
    for g, (lab, bias) in groups.items():
        cells = [sim[i][j] if ((y[i] == y[j]) == lab and (b[i] == b[j]) == bias) else 0.0
                 for i in range(n) for j in range(n)]
        count = sum(1 for i in range(n) for j in range(n) if (y[i] == y[j]) == lab and (b[i] == b[j]) == bias)
        mu[g] = sum(cells) / max(count, 1)
        sd[g] = statistics.stdev(cells)
    return ((mu["PC"] - mu["PA"]) ** 2 + (mu["NA"] - mu["NC"]) ** 2
            + kld * ((sd["PA"] - sd["PC"]) ** 2 + (sd["NA"] - sd["NC"]) ** 2) - mu["PC"] + mu["NA"])


@pytest.mark.parametrize("seed,kld", [(0, 1.0), (1, 0.0), (2, 2.5)])
def test_authors_fairkl_matches_naive_loop(seed, kld):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(14, 5, generator=g, dtype=torch.float64)
    y, b = torch.randint(0, 3, (14,), generator=g), torch.randint(0, 3, (14,), generator=g)
    got = losses.fairkl(z, y, b, form="authors", kld=kld)
    assert got.item() == pytest.approx(naive_authors_fairkl(z.tolist(), y.tolist(), b.tolist(), kld), abs=1e-5)


def test_authors_fairkl_is_bounded_where_the_gaussian_form_explodes():
    # rho >= 0.99: a batch whose only bias-conflicting positives are one pair (documented difference)
    torch.manual_seed(0)
    y = torch.cat([torch.zeros(2, dtype=torch.long), torch.arange(1, 4).repeat_interleave(10)])
    b = y.clone()
    b[1] = 1
    z = torch.randn(len(y), 8)
    authors = losses.fairkl(z, y, b, form="authors")
    gaussian = losses.fairkl(z, y, b, form="gaussian")
    assert abs(authors.item()) <= 12.0
    assert gaussian.item() > 1e3
    # the spec: the Gaussian form explodes there, but stays finite and under its documented bound,
    # which a larger variance floor lowers
    for floor in (1e-6, 1e-2):
        value = losses.fairkl(z, y, b, form="gaussian", var_floor=floor).item()
        assert math.isfinite(value) and value <= 2 * 0.5 * (5 / floor - math.log(floor) - 1)
    assert losses.fairkl(z, y, b, var_floor=1e-2).item() < gaussian.item()


def test_authors_fairkl_with_an_empty_group_needs_no_branch():
    z = torch.randn(6, 3)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    value = losses.fairkl(z, y, y.clone(), form="authors")  # no conflicting pair at all: their means are 0
    assert torch.isfinite(value)
    with pytest.raises(ValueError, match="form"):
        losses.fairkl(z, y, y, form="kl")


def test_paper_biased_preset_states_its_differences_from_the_authors_run():
    preset = PRESETS["paper-biased"]
    cfg = resolved(replace(VisionConfig(), **preset.overrides), "biased", "biased-mnist")
    # what the authors ran (yaml + script defaults)
    assert (cfg.arch, cfg.batch_size, cfg.epochs, cfg.optimizer, cfg.lr, cfg.momentum, cfg.weight_decay) == (
        "simpleconvnet", 256, 80, "sgd", 1e-3, 0.9, 1e-4)
    assert (cfg.lr_decay, cfg.epochs // 3, 2 * cfg.epochs // 3) == ("step", 26, 53)
    assert (cfg.temperature, cfg.augment, cfg.objective, cfg.fairkl_form, cfg.fairkl_kld) == (
        0.1, "none", "authors", "authors", 1.0)
    assert (cfg.alpha, cfg.fairkl_lambda, cfg.online_lr, cfg.knn_every) == (0.03, 0.75, 1e-3, 0)
    assert cfg.bf16 is False  # they trained in float32
    for difference in ("bf16", "colouring drawn once", "best-over-epochs", "yaml sets neither", "full batches only",
                       "not main_ce.py's defaults"):
        assert difference in preset.description


def _info(n: int = 40, size: int = 16) -> DataInfo:
    return DataInfo(n, torch.arange(n) % 4, 4, size, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _batch(n: int = 16, size: int = 16) -> Batch:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    labels = torch.arange(n) % 4
    return Batch(torch.arange(n), images, labels, (labels + (torch.arange(n) % 5 == 0)) % 4)


def _objective_total(objective: str, fairkl_lambda: float) -> float:
    torch.manual_seed(0)
    cfg = resolved(replace(VisionConfig(arch="small"), alpha=0.3, objective=objective, fairkl_lambda=fairkl_lambda,
                           fairkl_form="authors"), "biased", "biased-digits")
    method = Biased(cfg, _info(), losses.get("supcon"), True)
    torch.nn.init.zeros_(method.classifier.weight)
    torch.nn.init.zeros_(method.classifier.bias)  # the online cross-entropy is exactly log 4
    return method(_batch()).item() - math.log(4)


def test_authors_objective_applies_alpha_twice_only_with_fairkl_and_the_temperature_ratio():
    """main_infonce.py: ``target_loss = alpha · infonce``; with ``--lambd`` not 0 the criterion becomes
    ``alpha · target_loss + lambd · fairkl``, so alpha comes twice only with FairKL."""
    cfg = resolved(VisionConfig(arch="small"), "biased", "biased-digits")
    ratio = cfg.temperature / BASE_TEMPERATURE
    plain = _objective_total("paper", 0.0)  # 0.3 · L
    assert _objective_total("authors", 0.0) == pytest.approx(ratio * plain, rel=1e-4)  # 0.3 · (T/0.07) · L
    fairkl = _objective_total("paper", 0.5) - plain  # lambda · R, the same under both objectives
    assert fairkl != pytest.approx(0.0, abs=1e-6)
    with_fairkl = _objective_total("authors", 0.5) - fairkl
    assert with_fairkl == pytest.approx(0.3 * ratio * plain, rel=1e-4)  # 0.3 · 0.3 · (T/0.07) · L


def _online_method(zero_classifier: bool) -> Biased:
    cfg = resolved(replace(VisionConfig(arch="small"), optimizer="sgd", fairkl_lambda=0.5,
                           fairkl_form="authors"), "biased", "biased-digits")
    torch.manual_seed(0)
    method = Biased(cfg, _info(), losses.get("eps_supinfonce", epsilon=0.5), True)
    if zero_classifier:
        torch.nn.init.zeros_(method.classifier.weight)
    return method


def test_online_classifier_has_its_own_adam_stepped_after_the_encoder():
    method = _online_method(zero_classifier=False)
    opt = method.optimizer()
    main_params = {id(p) for group in opt.param_groups for p in group["params"]}
    assert not main_params & {id(p) for p in method.classifier.parameters()}
    assert isinstance(opt, torch.optim.SGD) and isinstance(method.online, torch.optim.Adam)
    method(_batch()).backward()
    before = method.classifier.weight.detach().clone()
    opt.step()  # the post-step hook steps the online classifier and clears its gradient
    assert not torch.equal(before, method.classifier.weight)
    assert method.classifier.weight.grad is None
    state = method.state_dict()  # its Adam state travels with the checkpoint
    fresh = _online_method(zero_classifier=False)
    fresh.load_state_dict(state)
    fresh.optimizer()
    assert fresh.online.state_dict()["state"].keys() == method.online.state_dict()["state"].keys() != set()


def test_online_classifier_never_moves_the_encoder():
    grads = []
    for zero in (True, False):  # two different classifiers on the same encoder
        method = _online_method(zero)
        method(_batch()).backward()
        grads.append([p.grad for p in method.encoder.parameters()])
    for g0, g1 in zip(*grads):
        torch.testing.assert_close(g0, g1)


def _dead_features(biased_head: bool, shift: float) -> tuple[Biased, ImageSet]:
    """A SimpleConvNet of the biased track whose last BatchNorm adds ``shift`` in eval mode (fresh running
    statistics: mean 0, variance 1), and 12 random test images."""
    cfg = resolved(replace(VisionConfig(arch="simpleconvnet"), biased_head=biased_head), "biased", "biased-mnist")
    torch.manual_seed(0)
    method = Biased(cfg, _info(size=28), losses.get("supcon"), True)
    last_bn = [m for m in method.encoder.modules() if isinstance(m, torch.nn.BatchNorm2d)][-1]
    torch.nn.init.constant_(last_bn.bias, shift)
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (12, 3, 28, 28), dtype=torch.uint8, generator=g)
    return method, ImageSet(images, torch.arange(12) % 4)


@pytest.mark.parametrize("shift", [0.0, -1e4])
def test_the_monitor_counts_the_test_images_whose_features_are_all_zero(shift):
    """The head variant's ReLU features: the count each epoch is the images whose every feature is 0, computed
    here image by image; a shift of -1e4 kills them all. The default variant's tanh features never read 0."""
    method, test = _dead_features(True, shift)
    method.eval()
    with torch.no_grad():
        dead = sum(bool((method.features(test.images[i:i + 1]) == 0).all()) for i in range(len(test)))
    assert dead == (12 if shift else 0)
    assert method.monitor(test, torch.device("cpu"))["zero_rows"] == dead
    tanh, test = _dead_features(False, shift)
    assert tanh.monitor(test, torch.device("cpu"))["zero_rows"] == 0


def test_biased_mnist_colouring_follows_the_authors_construction():
    n_per_class = 500
    labels = torch.arange(10).repeat_interleave(n_per_class)
    for rho in (0.997, 0.99, 0.1):
        colour = assign_colours(labels, rho, torch.Generator().manual_seed(0))
        for c in range(10):
            mine = colour[labels == c]
            assert int((mine == c).sum()) == int(n_per_class * rho)
            rest = n_per_class - int(n_per_class * rho)
            chunk = math.ceil(rest / 9)
            counts = sorted((int((mine == k).sum()) for k in range(10) if k != c), reverse=True)
            assert counts[0] <= chunk and sum(counts) == rest
    digits = torch.zeros(2, 28, 28, dtype=torch.uint8)
    digits[:, 10:18, 12:16] = 7  # a faint stroke is ink all the same
    images = colourize_binary(digits, torch.tensor([9, 2]))
    assert images[0, :, 14, 13].tolist() == [255, 255, 255]
    assert images[0, :, 0, 0].tolist() == [50, 255, 128] == MNIST_COLOURS[9].tolist()
    assert images[1, :, 0, 0].tolist() == [0, 0, 255]


def test_real_biased_mnist_is_read_from_the_data_root(data_root, data_set, tmp_path, monkeypatch):
    data_set("MNIST", "raw")
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    from domains.vision.data import load

    data = load("biased-mnist", data_root, rho=0.997)
    assert not (tmp_path / "mnist").exists()  # no copy in the cache, which could go stale
    assert data.train.images.shape == (60000, 3, 28, 28) and data.test.images.shape == (10000, 3, 28, 28)
    for c in range(10):
        members = data.train.labels == c
        assert int((data.train.bias[members] == c).sum()) == int(int(members.sum()) * 0.997)
    assert abs(float((data.test.bias == data.test.labels).float().mean()) - 0.1) < 0.01
    assert (data.mean, data.std) == ((0.5,) * 3, (0.5,) * 3)
    again = biased_mnist(torch.zeros(3, 28, 28, dtype=torch.uint8), torch.tensor([0, 1, 2]), 1.0, 0)
    assert again.bias.tolist() == [0, 1, 2]


def test_a_colour_seed_redraws_the_colouring_of_both_sets(tmp_path):
    """``colour_seed`` k > 0 is the k-th draw of the colouring (Barbano et al. redraw it with each trial): the same
    labels, every class keeps its colour on the same share of its images, others take it, and the fingerprint and
    the run's identity name the draw. 0 is the draw of every run before the option (the committed fingerprints: test
    ``test_default_digits_keep_the_committed_fingerprints``), and nowhere in the identity."""
    pytest.importorskip("sklearn")
    from domains.base import split_config
    from domains.errors import UserError
    from domains.vision.data import load

    first, same, other = (load("biased-digits", tmp_path, rho=0.9, colour_seed=k) for k in (0, 0, 1))
    assert same.fingerprint == first.fingerprint and "colour_seed" not in first.fingerprint
    assert other.fingerprint["colour_seed"] == 1 and other.fingerprint["splits"] != first.fingerprint["splits"]
    for part in ("train", "test"):
        a, b = getattr(first, part), getattr(other, part)
        assert torch.equal(a.labels, b.labels) and not torch.equal(a.bias, b.bias)
        assert [int((a.bias[a.labels == c] == c).sum()) for c in range(10)] == \
               [int((b.bias[b.labels == c] == c).sum()) for c in range(10)]
    assert "colour_seed" not in split_config(VisionConfig())[0]
    assert split_config(VisionConfig(colour_seed=1))[0]["colour_seed"] == 1
    with pytest.raises(UserError, match="only biased-digits and biased-mnist are coloured here, not digits"):
        load("digits", tmp_path, colour_seed=2)


def test_short_biased_run_records_the_online_classifier(tmp_path):
    cfg = replace(VisionConfig(), epochs=2, batch_size=128, linear_epochs=2, knn_every=0, optimizer="sgd",
                  lr=0.05, objective="authors", alpha=1.0, fairkl_lambda=0.5, fairkl_form="authors", rho=0.99)
    spec = RunSpec("vision", "biased", "biased-digits", "eps_supinfonce", {"epsilon": 0.5}, "quick", 0, cfg)
    ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=tmp_path, work_dir=tmp_path / "w",
                     resume=False, quiet=True)
    data = VISION.prepare(spec, ctx).data
    torch.manual_seed(0)
    pre = VISION.pretrain(spec, ctx, data)
    assert [p["epoch"] for p in pre.curve] == [1, 2]
    assert all(0.0 <= p["online_top1"] <= 100.0 for p in pre.curve)
    assert all(p["zero_rows"] == 0 for p in pre.curve)  # the small net's features end in tanh
    result = VISION.evaluate(spec, pre, ctx, data)
    m = result.metrics
    assert m["top1"] == pytest.approx(pre.curve[-1]["online_top1"])  # last epoch: the headline
    assert m["online_best_top1"] == max(p["online_top1"] for p in pre.curve)
    assert {"probe_top1", "probe_top5", "aligned_top1", "conflicting_top1", "knn_top1"} <= set(m)
