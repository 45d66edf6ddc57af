"""Each loss as its authors ran it: where our losses follow the authors' code rather than the spec, and the
conventions in which they differ from it on purpose, each checked against a naive float64 loop of the authors'
code (``reference_losses.authors_*``), with the relation the loss file states.

- debiased_pos grouping with M > 1 builds ``P_a`` from the mean of the positives (Troeshestova & Isachenko's
  ``DebiasedPosLossV3``), not from their sum as the spec writes; their "loss combination" is the loss on
  ``pairwise_scores``, averaged over the pairs of views.
- eps_supcon keeps the spec's constant ``+ epsilon`` (their code leaves it out: the same gradient); the
  epsilon-losses leave out their 1e-6 inside the log (the value moves by what it predicts); the supervised
  losses average over the anchors that have a classmate (theirs count the others as 0).
- jsd_hard (HCL's graph objective) exists only in the authors' code: its reference is that code
  (``reference_losses.authors_jsd_hard``, checked on every layout by test_losses_reference.py); the tests here
  check the two places where it departs from the HCL paper, and that it is InfoGraph's jsd without them.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import reference_losses as ref
import torch

import losses

# The smallest case where the two grouping forms part: B = 2, a third view as an extra positive.
V1, V2, V3 = [[1.0, 0.0], [0.0, 1.0]], [[0.6, 0.8], [0.8, 0.6]], [[0.8, -0.6], [-0.6, 0.8]]


def _scores(r: ref.Ref) -> losses.Scores:
    """The Scores of a reference layout, in float64 (the losses compute in float32)."""
    return losses.Scores(torch.tensor(r.logits, dtype=torch.float64), torch.tensor(r.pos), torch.tensor(r.neg),
                         r.min_logit, r.max_logit)


def _spec_grouping(r: ref.Ref, tau_plus: float) -> float:
    """The spec's grouping: ``P_a = (Σ_n e_an + Σ_p e_ap + s_a) / (N_a + M_a + 1)``, the numerator floored at
    ``tau_plus·floor``, a ratio of 1 where the denominator is not positive."""
    out = []
    for a in range(r.n_anchors):
        pos, neg = [math.exp(x) for x in r.positives(a)], [math.exp(x) for x in r.negatives(a)]
        density = (sum(neg) + sum(pos) + r.self_term(a)) / (len(neg) + len(pos) + 1)
        g = sum(neg) / len(neg)
        num = max(density - (1 - tau_plus) * g, tau_plus * r.floor(a))
        den = density + (len(neg) * tau_plus - (1 - tau_plus)) * g
        out.append(-math.log(num / den) if den > 0 else 0.0)
    return sum(out) / len(out)


def _views(n_views: int, batch: int, seed: int) -> list[list[list[float]]]:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(batch, 6, generator=g, dtype=torch.float64)
    return [(base + 0.6 * torch.randn(batch, 6, generator=g, dtype=torch.float64)).tolist() for _ in range(n_views)]


# ---------------------------------------------------------------- debiased_pos

def test_grouping_known_answer_is_the_authors_mean_of_positives():
    r = ref.ref_extra_positives(V1, V2, [V3], 0.5)
    assert ref.debiased_pos_regimes(r, 0.1) == ["plain"] * 4  # no floor, no guard: their V3 is comparable
    assert ref.authors_debiased_pos(V1, V2, [V3], 0.5, 0.1) == pytest.approx(1.959642, abs=1e-6)
    assert _spec_grouping(r, 0.1) == pytest.approx(2.029741, abs=1e-6)  # the spec's sum over N + M + 1
    # Ours, in float32: the numerator P - tau_minus·g of two rows is 0.032 out of 1.2 (a few 1e-6 lost).
    assert losses.debiased_pos(_scores(r), tau_plus=0.1).item() == pytest.approx(1.959642, abs=3e-5)


@pytest.mark.parametrize(("n_views", "batch", "tau_plus"), [(3, 4, 0.1), (4, 3, 0.1), (3, 6, 0.3), (5, 4, 0.2)])
def test_grouping_matches_the_authors_code_on_their_layout(n_views, batch, tau_plus):
    views = _views(n_views, batch, seed=n_views * 10 + batch)
    r = ref.ref_extra_positives(views[0], views[1], views[2:], 0.5)
    assert set(ref.debiased_pos_regimes(r, tau_plus)) == {"plain"}
    expected = ref.authors_debiased_pos(views[0], views[1], views[2:], 0.5, tau_plus)
    assert abs(expected - _spec_grouping(r, tau_plus)) > 1e-3  # the case tells the two forms apart
    assert losses.debiased_pos(_scores(r), tau_plus=tau_plus).item() == pytest.approx(expected, rel=2e-5)


@pytest.mark.parametrize(("n_views", "batch"), [(3, 4), (4, 3)])
@pytest.mark.parametrize("aggregation", ["combination", "grouping"])
def test_pairwise_layout_is_the_authors_loss_combination(n_views, batch, aggregation):
    """Their default ``m_agg_mode``: the two-view loss of every pair of views, on that pair's rows alone."""
    views = _views(n_views, batch, seed=n_views + batch)
    expected = ref.authors_loss_combination(views, 0.5, 0.1)
    tensors = [torch.tensor(v, dtype=torch.float64) for v in views]
    loss = losses.get("debiased_pos", tau_plus=0.1, aggregation=aggregation)
    assert loss(losses.pairwise_scores(tensors, 0.5)).item() == pytest.approx(expected, rel=2e-5)
    # The pooled layout is another loss: every view of another sample is a negative of every anchor.
    assert abs(loss(losses.multiview_scores(tensors, 0.5)).item() - expected) > 1e-3


# ---------------------------------------------------------------- the supervised losses of Barbano et al.

def _label_scores(labels: list[int], t: float, seed: int = 0) -> losses.Scores:
    z = torch.randn(len(labels), 5, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return losses.label_scores(z, torch.tensor(labels), t)


def _with_grad(scores: losses.Scores) -> tuple[losses.Scores, torch.Tensor]:
    logits = scores.logits.detach().clone().requires_grad_()
    return dataclasses.replace(scores, logits=logits), logits


EVERY_ANCHOR_HAS_A_CLASSMATE = [0, 1, 2, 0, 1, 2, 0, 1]
SINGLETONS = [0, 1, 0, 2, 1, 0, 3, 1]  # anchors 3 and 6 have no classmate


@pytest.mark.parametrize("epsilon", [0.5, 1.3])
def test_eps_supcon_is_the_authors_value_plus_epsilon_with_the_same_gradient(epsilon):
    scores = _label_scores(EVERY_ANCHOR_HAS_A_CLASSMATE, 0.5)
    r = ref.to_ref(scores)
    theirs = ref.authors_eps_supcon(r, epsilon, stab=0.0)
    got_scores, logits = _with_grad(scores)
    ours = losses.eps_supcon(got_scores, epsilon=epsilon)
    assert ours.item() - epsilon == pytest.approx(theirs, rel=1e-5)
    (grad,) = torch.autograd.grad(ours, logits)
    expected = ref.numerical_grad(lambda x: ref.authors_eps_supcon(x, epsilon, stab=0.0), r)
    torch.testing.assert_close(grad, torch.tensor(expected, dtype=grad.dtype), rtol=1e-4, atol=1e-6)


def _log1p_terms(r: ref.Ref, epsilon: float, loss: str, stab: float) -> float:
    """What ``stab`` inside their log adds, predicted from our denominators ``D``: per positive
    ``log(1 + stab·exp(m_a) / D)`` (``m_a`` the row's maximum, here the anchor's own logit ``1/t``),
    averaged like the loss."""
    per_anchor = []
    for a in range(r.n_anchors):
        pos, neg = r.positives(a), r.negatives(a)
        neg_sum, m = sum(math.exp(x) for x in neg), max(r.logits[a])
        dens = ([math.exp(-epsilon) * sum(math.exp(p) for p in pos) + neg_sum] * len(pos) if loss == "eps_supcon"
                else [math.exp(-epsilon) * math.exp(p) + neg_sum for p in pos])
        per_anchor.append(sum(math.log1p(stab * math.exp(m) / d) for d in dens) / len(pos))
    return sum(per_anchor) / len(per_anchor)


# eps_supcon at epsilon 0 is their SupCon.
@pytest.mark.parametrize(("loss", "epsilon"), [("eps_supcon", 0.5), ("eps_supinfonce", 0.5), ("eps_supcon", 0.0)])
def test_their_1e6_inside_the_log_moves_the_value_by_what_it_predicts(loss, epsilon):
    """At temperature 0.04 the anchor's own logit (25) stands far above the others, and their 1e-6, added to
    the sum shifted by it, weighs 1e-6·e^25 ≈ 7e4 against our denominators: a visible difference."""
    scores = _label_scores(EVERY_ANCHOR_HAS_A_CLASSMATE, 0.04, seed=3)
    r = ref.to_ref(scores)
    theirs = {"eps_supcon": ref.authors_eps_supcon, "eps_supinfonce": ref.authors_eps_supinfonce}[loss]
    offset = epsilon if loss == "eps_supcon" else 0.0  # eps_supcon's constant (the test above)
    ours = losses.get(loss, epsilon=epsilon)(scores).item() - offset
    predicted = _log1p_terms(r, epsilon, loss, 1e-6)
    assert predicted > 1e-2
    assert theirs(r, epsilon) - ours == pytest.approx(predicted, rel=1e-4)
    assert theirs(r, epsilon, stab=0.0) == pytest.approx(ours, rel=1e-5)


@pytest.mark.parametrize(("loss", "params"), [("supcon", {}), ("eps_supcon", {"epsilon": 0.5}),
                                              ("eps_supinfonce", {"epsilon": 0.5})])
def test_their_mean_counts_an_anchor_without_a_classmate_as_zero(loss, params):
    scores = _label_scores(SINGLETONS, 0.5, seed=5)
    r = ref.to_ref(scores)
    with_classmate = sum(1 for a in range(r.n_anchors) if r.positives(a))
    assert with_classmate == 6
    authors = ref.authors_eps_supinfonce if loss == "eps_supinfonce" else ref.authors_eps_supcon
    theirs = authors(r, params.get("epsilon", 0.0), stab=0.0)
    ours = losses.get(loss, **params)(scores).item()
    assert ours == pytest.approx(ref.REFERENCES[loss](r, **params), rel=1e-5)  # over the anchors with a classmate
    offset = params["epsilon"] if loss == "eps_supcon" else 0.0
    assert theirs == pytest.approx((ours - offset) * with_classmate / r.n_anchors, rel=1e-5)


def _node_graph_scores(seed: int, n_graphs: int = 4) -> losses.Scores:
    """The authors' graph layout: each node against the batch's graphs on raw dot products (one positive a row)."""
    g = torch.Generator().manual_seed(seed)
    nodes, graphs = torch.randn(11, 5, generator=g), torch.randn(n_graphs, 5, generator=g)
    member_of = torch.arange(11) % n_graphs
    return losses.membership_scores(nodes, graphs, member_of, 1.0, members="anchors", normalize=False)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jsd_hard_without_debiasing_or_hardness_is_infographs_jsd(seed):
    scores = _node_graph_scores(seed)
    assert losses.jsd_hard(scores, tau_plus=0.0, beta=0.0).item() == pytest.approx(losses.jsd(scores).item(),
                                                                                    rel=1e-6)


def test_jsd_hard_debiasing_stops_pulling_a_positive_above_zero():
    """Their positive term is softplus(-p) + r·softplus(p), the opposite sign of the paper's debiasing: at their
    tau_plus 0.5 a positive's gradient is zero at p = 0 and pushes it down above, where jsd always pulls it up."""
    logits = torch.tensor([[0.0, -1.0, 0.5, 2.0], [1.5, 0.3, -0.4, 1.0]], requires_grad=True)
    pos = torch.tensor([[True, False, False, False], [True, False, False, False]])
    scores = losses.Scores(logits, pos, ~pos)
    (hard,) = torch.autograd.grad(losses.jsd_hard(scores, tau_plus=0.5, beta=1.0), logits)
    (plain,) = torch.autograd.grad(losses.jsd(scores), logits)
    assert hard[0, 0].item() == pytest.approx(0.0, abs=1e-7)  # (sigmoid(p) - sigmoid(-p)) / A at p = 0
    assert hard[1, 0].item() == pytest.approx((math.tanh(0.75)) / 2, rel=1e-5)  # > 0: descent lowers p = 1.5
    assert plain[0, 0] < 0 and plain[1, 0] < 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jsd_hard_weights_favour_the_easy_negatives_where_hcl_favours_the_hard(seed):
    """exp(-2·beta·q / s): raising beta moves the weight to the negatives of lowest logit, so the negatives' term
    (a weighted mean of the increasing softplus(q)) falls with beta; hcl's exp(beta·q) makes its loss rise."""
    scores = _node_graph_scores(seed, n_graphs=6)
    betas = (0.5, 1.0, 2.0, 4.0)
    ours = [losses.jsd_hard(scores, beta=b).item() for b in betas]
    paper = [losses.hcl(scores, tau_plus=0.1, beta=b).item() for b in betas]
    assert all(a > b for a, b in zip(ours, ours[1:])), ours
    assert all(a < b for a, b in zip(paper, paper[1:])), paper
