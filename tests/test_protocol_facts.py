"""Protocol facts the domains' docstrings now state as read in the authors' code
(each test pins one statement, so that a change of library default or of our code is caught where it would
change what a number means).

- graph (domains/graph/evaluate.py): the SVM's RBF width is scikit-learn's "scale", 1 / (n_features · Var(X)),
  not the 1 / n_features that ``SVC()`` meant before scikit-learn 0.22, when InfoGraph's code was run.
- text (domains/text/torch_probe.py): SentEval's ``loss_fn.size_average = False`` is a no-op on today's PyTorch
  (the loss averages), and with Adam an averaged loss with weight decay l trains as a summed one with 64·l.
- text (domains/text/senteval.py): scikit-learn's path fits one multinomial model on dense multi-class features
  (``eval_solver=auto``), one-vs-rest models with ``eval_solver=liblinear``.
- vision (domains/vision/config.py, paper-biased-head): paper-biased builds what Barbano et al.'s
  SupConSimpleConvNet builds at its default ``train_on_head=True`` (no head, tanh ending, classifier on the
  normalised features); paper-biased-head builds it at ``train_on_head=False`` (a head without BatchNorm, ReLU
  ending, classifier on the raw features).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

import losses
from domains.graph.config import GraphConfig
from domains.graph.evaluate import _fit_score, svm_protocol
from domains.text.senteval import Classifier
from domains.vision.biased import Biased
from domains.vision.config import PRESETS, VisionConfig, resolved
from domains.vision.method import DataInfo


def _blobs(seed: int = 0, scale: float = 40.0) -> tuple[np.ndarray, np.ndarray]:
    """Two overlapping Gaussian classes in 12 dimensions at a large scale, as unstandardised sum-pooled graph
    embeddings are."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1], 60)
    x = (rng.normal(size=(120, 12)) + 0.8 * y[:, None]) * scale
    return x, y


def test_graph_svm_uses_the_scale_width_not_the_pre_0_22_default():
    from sklearn.svm import SVC

    x, y = _blobs()
    train, test = np.arange(120) % 4 != 0, np.arange(120) % 4 == 0
    ours = _fit_score(x[train], y[train], x[test], y[test], 10.0, standardize=False)
    scale = 1.0 / (x.shape[1] * x[train].var())
    explicit = SVC(C=10.0, gamma=scale).fit(x[train], y[train]).score(x[test], y[test])
    assert ours == explicit
    # InfoGraph's SVC() before scikit-learn 0.22: gamma 1 / n_features, here about Var(X) = 1600 times wider
    old = SVC(C=10.0, gamma=1.0 / x.shape[1]).fit(x[train], y[train])
    new = SVC(C=10.0, gamma=scale).fit(x[train], y[train])
    assert not np.allclose(old.decision_function(x[test]), new.decision_function(x[test]), atol=1e-2)


def test_graph_svm_gamma_auto_is_the_pre_0_22_width_through_the_protocol():
    from sklearn.svm import SVC

    x, y = _blobs()
    train, test = np.arange(120) % 4 != 0, np.arange(120) % 4 == 0
    auto = _fit_score(x[train], y[train], x[test], y[test], 10.0, standardize=False, gamma="auto")
    assert auto == SVC(C=10.0, gamma=1.0 / x.shape[1]).fit(x[train], y[train]).score(x[test], y[test])
    runs = {g: svm_protocol(x, y, 0, folds=3, inner_folds=2, cs=(0.1, 10.0), gamma=g) for g in ("scale", "auto")}
    assert runs["scale"]["fold_accuracy"] != runs["auto"]["fold_accuracy"]  # the option reaches every fit
    assert GraphConfig().svm_gamma == "scale"
    with pytest.raises(ValueError, match="svm_gamma"):
        GraphConfig(svm_gamma="1/n")


def test_sentevals_size_average_assignment_leaves_a_mean_loss():
    loss_fn = nn.CrossEntropyLoss()
    loss_fn.size_average = False  # SentEval's classifier.py, after construction
    logits, target = torch.randn(64, 3, generator=torch.Generator().manual_seed(0)), torch.arange(64) % 3
    assert loss_fn.reduction == "mean"
    assert loss_fn(logits, target).item() == pytest.approx(nn.functional.cross_entropy(logits, target).item())


def _adam_fit(reduction: str, weight_decay: float) -> torch.Tensor:
    """A linear layer trained by Adam on batches of 64 rows, as SentEval trains its classifier (eps near 0: Adam
    is then exactly blind to a constant scale of the loss; at its default 1e-8 the two agree to about 1e-4)."""
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(256, 10, generator=gen, dtype=torch.float64), torch.randint(0, 3, (256,), generator=gen)
    torch.manual_seed(2)
    model = nn.Linear(10, 3).double()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=weight_decay, eps=1e-16)
    for _ in range(5):
        for rows in torch.randperm(256, generator=gen).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[rows]), y[rows], reduction=reduction).backward()
            opt.step()
    return torch.cat([model.weight.detach().flatten(), model.bias.detach()])


@pytest.mark.parametrize("l2", [1e-5, 1e-3, 1e-2])
def test_an_averaged_loss_with_l2_trains_as_a_summed_one_with_64_l2(l2):
    averaged, summed = _adam_fit("mean", l2), _adam_fit("sum", 64 * l2)
    assert torch.allclose(averaged, summed, rtol=1e-9, atol=1e-12)
    # the same L2 value under the other reduction is another model: the grid's meaning moves
    same_value = (averaged - _adam_fit("sum", l2)).abs().max()
    assert same_value > 1e3 * (averaged - summed).abs().max() and same_value > 1e-7


def test_senteval_sklearn_path_is_multinomial_on_dense_multiclass_features():
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    rng = np.random.default_rng(0)
    y = np.arange(90) % 3
    x = rng.normal(size=(90, 5)) + y[:, None]
    auto = Classifier(solver="auto").fit(1.0, x, y)
    assert isinstance(auto, LogisticRegression) and auto.solver == "lbfgs"
    scores = auto.decision_function(x)
    softmax = np.exp(scores - scores.max(1, keepdims=True))
    np.testing.assert_allclose(auto.predict_proba(x), softmax / softmax.sum(1, keepdims=True), rtol=1e-6)
    assert isinstance(Classifier(solver="liblinear").fit(1.0, x, y), OneVsRestClassifier)


def _biased_simpleconvnet(**fields) -> Biased:
    overrides = {**PRESETS["paper-biased"].overrides, **fields}
    cfg = resolved(replace(VisionConfig(), **overrides), "biased", "biased-mnist")
    info = DataInfo(40, torch.arange(40) % 4, 4, 28, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    return Biased(cfg, info, losses.get("eps_supinfonce", epsilon=0.5), True)


def test_paper_biased_is_the_authors_default_supconsimpleconvnet():
    method = _biased_simpleconvnet()
    assert isinstance(method.head, nn.Identity)  # train_on_head=True: head = nn.Identity()
    activations = [m for m in method.encoder.modules() if isinstance(m, (nn.ReLU, nn.Tanh))]
    assert isinstance(activations[-1], nn.Tanh)  # ... and encoder.relu = nn.Tanh()
    assert method.normalized  # the online classifier reads F.normalize(head(feat))
    conv = [m for m in method.encoder.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size) for c in conv] == [
        (3, 16, (7, 7)),
        (16, 32, (7, 7)),
        (32, 64, (7, 7)),
        (64, 128, (7, 7)),
    ]


def test_the_head_ablation_is_the_authors_train_on_head_false_network():
    method = _biased_simpleconvnet(biased_head=True)
    layers = list(method.head)  # theirs: Linear(128, 128), ReLU, Linear(128, feat_dim), no BatchNorm
    assert [type(m) for m in layers] == [nn.Linear, nn.ReLU, nn.Linear]
    assert (layers[0].in_features, layers[0].out_features, layers[2].out_features) == (128, 128, 128)
    assert layers[0].bias is not None
    activations = [m for m in method.encoder.modules() if isinstance(m, (nn.ReLU, nn.Tanh))]
    assert isinstance(activations[-1], nn.ReLU)  # no Tanh swap at train_on_head=False
    assert not method.normalized  # logits = fc(feat): the raw encoder features
    feats = torch.randn(4, 128)
    torch.testing.assert_close(method._classify(feats), method.classifier(feats))
    assert "train_on_head false" in PRESETS["paper-biased-head"].description
