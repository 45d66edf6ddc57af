"""The registry: names, hyper-parameters with their defaults, label needs, papers; validation at get, once."""

from __future__ import annotations

import pytest
import torch

import losses

EXPECTED = {  # name: (hyper-parameter defaults, needs labels, a word of the paper's citation)
    "infonce": ({}, False, "Oord"),
    "dcl": ({"tau_plus": 0.1}, False, "Chuang"),
    "hcl": ({"tau_plus": 0.1, "beta": 1.0}, False, "Robinson"),
    "jsd_hard": ({"tau_plus": 0.5, "beta": 1.0}, False, "Robinson"),
    "pucl": ({"alpha": 0.1, "c": 0.01}, False, "Wang"),
    "debiased_pos": ({"tau_plus": 0.1, "aggregation": "grouping"}, False, "Troeshestova"),
    "supcon": ({}, True, "Khosla"),
    "eps_supcon": ({"epsilon": 0.0}, True, "Barbano"),
    "eps_supinfonce": ({"epsilon": 0.0}, True, "Barbano"),
    "unbiased": ({}, True, "Chuang"),
    "jsd": ({}, False, "InfoGraph"),
    "ce": ({}, True, "Barbano"),
}


def test_available_lists_every_loss_of_the_spec():
    assert losses.available() == sorted(EXPECTED)
    assert losses.available(needs_labels=True) == ["ce", "eps_supcon", "eps_supinfonce", "supcon", "unbiased"]
    assert losses.available(needs_labels=False) == ["dcl", "debiased_pos", "hcl", "infonce", "jsd", "jsd_hard",
                                                       "pucl"]
    # FairKL is registered (its hyper-parameters are checked once too) but is a regulariser, not an objective
    assert losses.available(objective=False) == ["fairkl"] and "fairkl" in losses.available(objective=None)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_spec_entry(name):
    defaults, needs_labels, author = EXPECTED[name]
    entry = losses.spec(name)
    assert entry.name == name
    assert {h.name: h.default for h in entry.hparams if not h.prior_setting} == defaults == entry.defaults
    assert entry.needs_labels is needs_labels
    assert author in entry.paper
    for h in entry.hparams:
        assert h.check(h.default) == h.default  # every default lies in its own range
        assert h.describe()


def test_get_binds_and_validates_hyperparameters():
    loss = losses.get("pucl", alpha=0.3)
    assert loss.name == "pucl" and loss.hparams == {"alpha": 0.3, "c": 0.01}
    assert repr(loss) == "pucl(alpha=0.3, c=0.01)"
    scores = losses.pair_scores(torch.randn(5, 4), torch.randn(5, 4), 0.5)
    assert loss(scores).item() == losses.pucl(scores, alpha=0.3, c=0.01).item()
    assert losses.get("hcl", beta=2).hparams["beta"] == 2.0  # ints are accepted as numbers
    assert losses.get("debiased_pos", aggregation="combination").hparams["aggregation"] == "combination"


def test_get_fails_before_any_scores_exist():
    """A bad value is reported when the loss is built, not at the first training step."""
    with pytest.raises(ValueError, match="tau_plus"):
        losses.get("dcl", tau_plus=1.2)


def test_every_loss_is_exported_under_its_name_as_its_kernel_checked():
    for name in losses.available(objective=None):
        assert getattr(losses, name).__wrapped__ is losses.spec(name).fn


def test_the_bound_loss_calls_the_kernel_with_no_check(monkeypatch):
    """Validated once, in get: a training step runs the raw kernel; a direct call checks its arguments."""
    scores = losses.pair_scores(torch.randn(5, 4), torch.randn(5, 4), 0.5)
    bound = losses.get("dcl", tau_plus=0.2)
    calls = []
    monkeypatch.setattr(losses.registry.HParam, "check", lambda self, value, **kw: calls.append(self.name) or value)
    assert bound(scores).item() == losses.spec("dcl").fn(scores, tau_plus=0.2).item()
    assert calls == []
    losses.dcl(scores, tau_plus=0.2)
    assert calls == ["tau_plus"]


def test_a_kernel_whose_defaults_differ_from_its_hyperparameters_fails_to_register():
    with pytest.raises(TypeError, match="defaults"):
        losses.register_loss("probe", paper="-", summary="-", hparams=(losses.HParam("beta", 1.0),))(
            lambda scores, beta=2.0: scores.logits.sum())
    assert "probe" not in losses.available()


@pytest.mark.parametrize(("name", "text", "value"), [
    ("tau_plus", "0.2", 0.2), ("tau_plus", "auto", "auto"), ("prior_every", "3", 3), ("prior_estimator", "pu", "pu"),
])
def test_parse_gives_the_checked_value_of_a_command_line_text(name, text, value):
    parsed = losses.spec("dcl").parse({name: text})[name]
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("tau_plus", "often", "tau_plus must be a number in [0, 1) or auto, got 'often'"),
    ("tau_plus", "1.5", "tau_plus must be a number in [0, 1) or auto, got 1.5"),
    ("tau_plus", "-inf", "tau_plus must be a finite number in [0, 1) or auto, got -inf"),
    ("prior_every", "2.5", "prior_every must be an integer >= 1, got 2.5"),
    ("prior_every", "x", "prior_every must be an integer >= 1, got 'x'"),
    ("prior_every", "0", "prior_every must be an integer >= 1, got 0"),  # was "must lie in an integer in [1, inf]"
    ("prior_momentum", "1", "prior_momentum must be a number in [0, 1), got 1"),
    ("prior_estimator", "knn", "prior_estimator must be one of kmeans, pu, got 'knn'"),
])
def test_parse_refuses_a_bad_text_as_check_words_it(name, text, message):
    with pytest.raises(ValueError) as err:
        losses.spec("dcl").parse({name: text})
    assert str(err.value) == message


@pytest.mark.parametrize("settings", [{"prior_every": 2}, {"prior_every": 2, "prior_momentum": 0.1}])
def test_prior_settings_without_auto_are_refused_in_words_that_agree(settings):
    """Was "prior_every of loss 'dcl' only apply to ...", for one setting as for two."""
    with pytest.raises(ValueError) as err:
        losses.spec("dcl").resolve(tau_plus=0.1, **settings)
    assert str(err.value) == f"{', '.join(settings)} of loss 'dcl' can only apply to an estimated prior: add " \
                             "tau_plus=auto"


_BAD_OUTPUTS = {  # what a plugin's kernel may return by mistake -> what the error says it returned
    "vector": (lambda scores: scores.logits.mean(1), "a tensor of shape (12,)"),
    "float": (lambda scores: scores.logits.mean().item(), "a float ("),
    "detached": (lambda scores: scores.logits.mean().detach(), "a tensor that does not require grad"),
    "integer": (lambda scores: (scores.logits > 0).sum(), "a torch.int64 tensor"),
}


def _probe(kernel) -> losses.Loss:
    """A bound loss of ``kernel``, not registered (the registry stays as it is)."""
    return losses.Loss(losses.LossSpec("probe_output", kernel, paper="-", summary="-"), {})


def _scores(requires_grad: bool = True) -> losses.Scores:
    z = torch.randn(6, 4, requires_grad=requires_grad)
    return losses.pair_scores(z, z + 0.1, 0.5)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("kind", sorted(_BAD_OUTPUTS))
def test_a_kernel_that_returns_no_loss_is_refused_naming_the_loss_and_what_a_kernel_returns(kind, compiled):
    kernel, returned = _BAD_OUTPUTS[kind]
    if compiled and kind == "float":
        pytest.skip("a compiled .item() is torch.compile's own error (and the run then trains eagerly)")
    loss = _probe(kernel)
    if compiled:
        assert loss.compile(backend="eager")
    with pytest.raises(losses.KernelOutputError) as refused:
        loss(_scores())
    message = str(refused.value)
    assert message.startswith(f"loss 'probe_output' ({__name__}) returned {returned}"), message
    assert "must return a 0-dim floating-point torch Tensor" in message


@pytest.mark.parametrize("compiled", [False, True])
def test_a_kernel_that_returns_a_scalar_loss_passes_and_so_does_one_without_grad_where_none_is_taken(compiled):
    loss = _probe(lambda scores: scores.logits.logsumexp(1).mean())
    if compiled:
        assert loss.compile(backend="eager")
    assert loss(_scores()).requires_grad
    assert loss(_scores(requires_grad=False)).dim() == 0
    detached = _probe(_BAD_OUTPUTS["detached"][0])
    with torch.no_grad():  # an evaluation: nothing requires grad
        assert detached(_scores()).dim() == 0
    for name in ("infonce", "dcl", "supcon", "jsd"):  # the built-in losses return what a loss returns
        labels = torch.arange(6) % 3
        z = torch.randn(6, 4, requires_grad=True)
        scores = losses.label_scores(z, labels, 0.5) if losses.spec(name).needs_labels else \
            losses.pair_scores(z, z + 0.1, 0.5)
        assert losses.get(name)(scores).requires_grad, name


@pytest.mark.parametrize(("hparam", "refused"), [
    (losses.HParam("margin", 5.0, low=0, high=2), "margin must be a number in [0, 2], got 5"),
    (losses.HParam("k", 0, low=1, integer=True), "k must be an integer >= 1, got 0"),
    (losses.HParam("form", "x", choices=("a", "b")), "form must be one of a, b, got 'x'"),
])
def test_a_hyperparameter_whose_default_its_own_range_refuses_is_refused_at_registration(hparam, refused):
    """Listed as ``margin=5.0 [0, 2]``, it failed the first run that set nothing ("bad hyper-parameter")."""
    with pytest.raises(ValueError) as caught:
        losses.register_loss("probe_default", paper="-", summary="-", hparams=(hparam,))(
            eval(f"lambda scores, {hparam.name}={hparam.default!r}: scores.logits.sum()"))
    assert str(caught.value) == (f"loss 'probe_default': the default of its hyper-parameter {hparam.name} is not an "
                                 f"allowed value ({refused}); give it a default within its range")
    assert "probe_default" not in losses.available(objective=None)


def test_a_default_of_auto_stays_allowed_at_registration():
    """``auto`` is no value of the range: a bound loss resolves it (the first version of the check refused it)."""
    hparam = losses.HParam("tau_plus", "auto", low=0, high=1, auto=True)
    try:
        losses.register_loss("probe_auto", paper="-", summary="-", hparams=(hparam,))(
            lambda scores, tau_plus="auto": scores.logits.sum())
        assert losses.spec("probe_auto").hparams[0].default == "auto"
    finally:
        losses.registry._REGISTRY.pop("probe_auto", None)
