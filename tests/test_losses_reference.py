"""Every loss against the naive float64 loops of ``reference_losses`` on every layout.

Layouts: ``pair_scores`` on several batch sizes and temperatures, ``multiview_scores`` with V = 2, 3, 4,
``pairwise_scores`` with V = 3, ``label_scores`` (singletons have no positive), ``membership_scores`` both
ways, ``bank_scores``, hand-built Scores with rows without positives, rows without negatives, entries in
neither mask and varying M_a, and ``normalize=False`` (no known bounds: the floor is the row min, ``s_a`` the row max).
"""

from __future__ import annotations

import pytest
import reference_losses as ref
import torch

import losses
from losses._masks import true_entries


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _views(n_views: int, batch: int, dim: int, noise: float, seed: int) -> list[torch.Tensor]:
    """Views of a batch that are closer to each other than to other samples (positives are easy)."""
    base = torch.randn(batch, dim, generator=_g(seed), dtype=torch.float64)
    return [base + noise * torch.randn(batch, dim, generator=_g(seed + 1 + v), dtype=torch.float64)
            for v in range(n_views)]


def _labels(n: int, classes: int, seed: int) -> torch.Tensor:
    return torch.randint(classes, (n,), generator=_g(seed))


def _hand_built(min_logit: float | None, max_logit: float | None) -> losses.Scores:
    """A = 7 anchors, K = 9 candidates: row 0 has no positive, row 1 no negative, M_a from 1 to 4,
    some entries in neither mask."""
    logits = torch.rand(7, 9, generator=_g(3), dtype=torch.float64) * 5 - 2.5
    pos = torch.zeros(7, 9, dtype=torch.bool)
    neg = torch.zeros(7, 9, dtype=torch.bool)
    layout = {  # row: (positives, ignored); the rest are negatives
        0: ([], [0]), 1: ([2, 3], list(range(9))), 2: ([1], [2]), 3: ([0, 4, 8], []),
        4: ([1, 2, 3, 5], [4]), 5: ([6, 7], [5, 0]), 6: ([3], []),
    }
    for row, (p, ignored) in layout.items():
        pos[row, p] = True
        neg[row] = True
        neg[row, p + ignored] = False
    return losses.Scores(logits, pos, neg, min_logit, max_logit,
                         _labels(7, 2, seed=4), _labels(9, 2, seed=5))


def _hard_negatives(bounded: bool) -> losses.Scores:
    """Negatives near the top of the range and positives near the bottom, with one or two negatives:
    debiased_pos's numerator floor and its ratio guard are both reached."""
    logits = torch.tensor([[-2.3, 2.4, 2.45, 0.0, 2.5, -2.5],
                           [-2.0, 2.4, 1.0, 0.0, 2.5, -2.5],
                           [1.5, 0.2, -0.7, 0.9, 2.5, -2.5]], dtype=torch.float64)
    pos = torch.zeros(3, 6, dtype=torch.bool)
    pos[:, 0] = True
    neg = torch.tensor([[False, True, True, False, False, False],
                        [False, True, False, False, False, False],
                        [False, True, True, True, False, False]])
    bound = 2.5 if bounded else None
    return losses.Scores(logits, pos, neg, -bound if bounded else None, bound,
                         torch.tensor([0, 1, 0]), torch.tensor([1, 1, 0, 1, 0, 0]))


def _cases() -> dict[str, losses.Scores]:
    cases: dict[str, losses.Scores] = {}
    for batch, t in ((2, 0.5), (3, 0.1), (8, 1.0), (8, 0.05), (16, 0.2)):
        z1, z2 = _views(2, batch, 5, 0.5, seed=batch)
        cases[f"pair-B{batch}-t{t}"] = losses.pair_scores(z1, z2, t, labels=_labels(batch, 3, seed=batch))
    for n_views in (2, 3, 4):
        views = _views(n_views, 4, 3, 0.7, seed=10 + n_views)
        cases[f"multiview-V{n_views}"] = losses.multiview_scores(views, 0.4, labels=_labels(4, 2, seed=n_views))
    cases["pairwise-V3"] = losses.pairwise_scores(_views(3, 4, 3, 0.7, seed=13), 0.4, labels=_labels(4, 2, seed=3))
    z = torch.randn(10, 4, generator=_g(20), dtype=torch.float64)
    cases["label"] = losses.label_scores(z, torch.tensor([0, 1, 0, 2, 1, 0, 3, 1, 2, 4]), 0.3)
    graphs, nodes = torch.randn(3, 4, generator=_g(21)), torch.randn(9, 4, generator=_g(22))
    member_of = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 2])
    cases["membership-graphs"] = losses.membership_scores(graphs, nodes, member_of, 0.5)
    cases["membership-nodes"] = losses.membership_scores(nodes, graphs, member_of, 0.5, members="anchors")
    q, k = _views(2, 4, 6, 0.3, seed=30)
    bank = torch.randn(10, 6, generator=_g(31), dtype=torch.float64)
    cases["bank"] = losses.bank_scores(q, k, bank, 0.2, labels=_labels(4, 3, seed=32),
                                       bank_labels=_labels(10, 3, seed=33))
    cases["hand-bounds"] = _hand_built(-2.5, 2.5)
    cases["hand-nobounds"] = _hand_built(None, None)
    cases["hard-bounds"] = _hard_negatives(True)
    cases["hard-nobounds"] = _hard_negatives(False)
    z1, z2 = _views(2, 6, 4, 0.4, seed=40)
    cases["pair-raw"] = losses.pair_scores(z1, z2, 0.5, labels=_labels(6, 2, seed=41), normalize=False)
    cases["multiview-raw"] = losses.multiview_scores(_views(3, 4, 3, 0.5, seed=42), 1.0, normalize=False,
                                                     labels=_labels(4, 2, seed=43))
    cases["label-raw"] = losses.label_scores(z, torch.tensor([0, 1, 0, 2, 1, 0, 3, 1, 2, 4]), 2.0,
                                             normalize=False)
    cases["bank-raw"] = losses.bank_scores(q, k, bank, 1.0, labels=_labels(4, 3, seed=32),
                                           bank_labels=_labels(10, 3, seed=33), normalize=False)
    cases["membership-raw"] = losses.membership_scores(graphs, nodes, member_of, 1.0, normalize=False)
    return cases


CASES = _cases()
LOSSES = [
    ("infonce", {}),
    ("dcl", {"tau_plus": 0.0}), ("dcl", {"tau_plus": 0.1}), ("dcl", {"tau_plus": 0.5}), ("dcl", {"tau_plus": 0.95}),
    ("hcl", {"tau_plus": 0.1, "beta": 1.0}), ("hcl", {"tau_plus": 0.3, "beta": 2.0}),
    ("hcl", {"tau_plus": 0.9, "beta": 0.5}),
    ("pucl", {"alpha": 0.1, "c": 0.01}), ("pucl", {"alpha": 0.5, "c": 0.5}), ("pucl", {"alpha": 0.9, "c": 0.0}),
    ("pucl", {"alpha": 0.3, "c": 1.0}),
    ("debiased_pos", {"tau_plus": 0.1, "aggregation": "grouping"}),
    ("debiased_pos", {"tau_plus": 0.1, "aggregation": "combination"}),
    ("debiased_pos", {"tau_plus": 0.5, "aggregation": "grouping"}),
    ("debiased_pos", {"tau_plus": 0.5, "aggregation": "combination"}),
    ("debiased_pos", {"tau_plus": 0.9, "aggregation": "combination"}),
    ("supcon", {}), ("eps_supcon", {"epsilon": 0.0}), ("eps_supcon", {"epsilon": 0.5}),
    ("eps_supinfonce", {"epsilon": 0.0}), ("eps_supinfonce", {"epsilon": 0.5}),
    ("unbiased", {}), ("jsd", {}), ("ce", {}),
    ("jsd_hard", {"tau_plus": 0.5, "beta": 0.0}), ("jsd_hard", {"tau_plus": 0.5, "beta": 1.0}),
    ("jsd_hard", {"tau_plus": 0.1, "beta": 10.0}), ("jsd_hard", {"tau_plus": 0.0, "beta": 2.0}),
]


def test_every_registered_loss_has_a_naive_reference_and_cases():
    """A new loss file registers itself; this fails until it has its paper-formula loop and its cases here."""
    assert set(losses.available()) <= set(ref.REFERENCES)
    assert set(losses.available()) <= {name for name, _ in LOSSES}


def _loss_id(entry: tuple[str, dict]) -> str:
    name, hparams = entry
    return "-".join([name] + [f"{k}={v}" for k, v in hparams.items()])


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("entry", LOSSES, ids=_loss_id)
def test_loss_matches_naive_reference(entry, case):
    name, hparams = entry
    scores = CASES[case]
    if losses.spec(name).needs_labels and not scores.has_labels:
        pytest.skip("layout without labels")
    try:
        expected = ref.REFERENCES[name](ref.to_ref(scores), **hparams)
    except ValueError:  # no anchor qualifies: the package must refuse too
        with pytest.raises(ValueError):
            losses.get(name, **hparams)(scores)
        return
    got = losses.get(name, **hparams)(scores)
    assert got.dtype == torch.float32 and got.dim() == 0
    assert got.item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_the_cases_cover_the_interesting_regimes():
    """DCL's floor is active on some rows and not on others, with the known bound and with the row
    min; debiased_pos reaches its numerator floor and its ratio guard; rows that do not qualify and
    M_a > 1 are present."""
    for case in ("multiview-V3", "hand-nobounds", "pair-raw", "label-raw", "membership-nodes"):
        floored = ref.dcl_floor_rows(ref.to_ref(CASES[case]), 0.5)
        assert any(floored) and not all(floored), case
    assert not any(ref.dcl_floor_rows(ref.to_ref(CASES["pair-B8-t1.0"]), 0.1))
    for case in ("hard-bounds", "hard-nobounds"):
        assert ref.debiased_pos_regimes(ref.to_ref(CASES[case]), 0.1) == ["floor", "guard", "plain"]
    hand = CASES["hand-bounds"]
    assert hand.pos_mask.sum(1).tolist() == [0, 2, 1, 3, 4, 2, 1]
    assert hand.neg_mask.sum(1).tolist()[1] == 0


def test_unbiased_skips_anchors_whose_negatives_all_share_its_label():
    # Anchor 0's only negative has its label: it is skipped, anchor 1 alone counts.
    logits = torch.tensor([[2.0, 0.5, 0.1], [0.3, 1.5, -0.2]])
    pos = torch.tensor([[True, False, False], [False, True, False]])
    neg = ~pos & torch.tensor([[False, True, False], [True, False, True]])
    scores = losses.Scores(logits, pos, neg, anchor_labels=torch.tensor([0, 1]),
                           candidate_labels=torch.tensor([0, 0, 1]))
    expected = ref.unbiased(ref.to_ref(scores))
    assert losses.unbiased(scores).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("moments", ["full", "mean"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fairkl_matches_naive_loop(moments, seed):
    z = torch.randn(12, 5, generator=_g(seed), dtype=torch.float64)
    y, bias = _labels(12, 2, seed + 100), _labels(12, 3, seed + 200)
    expected = ref.fairkl(z.tolist(), y.tolist(), bias.tolist(), moments)
    got = losses.fairkl(z, y, bias, moments=moments)
    assert got.item() == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_fairkl_term_with_an_empty_group_contributes_zero():
    z = torch.randn(6, 3, generator=_g(7), dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    bias = torch.tensor([0, 0, 1, 2, 2, 2])  # class 1 has a single bias value: PC still exists via class 0
    expected = ref.fairkl(z.tolist(), y.tolist(), bias.tolist())
    assert losses.fairkl(z, y, bias).item() == pytest.approx(expected, rel=1e-4, abs=1e-6)
    # One bias value everywhere: no conflicting pair at all, so R = 0.
    assert losses.fairkl(z, y, torch.zeros(6, dtype=torch.long)).item() == 0.0


@pytest.mark.parametrize("shape, density", [((1024, 1024), 0.001), ((7, 9), 0.3), ((16, 16), 1.0), ((3, 5), 0.5),
                                            ((0, 8), 0.5), ((8, 0), 0.5)])
def test_true_entries_is_nonzero_in_row_major_order(shape, density):
    """The positives' finder used by every loss (words of 8 mask entries at a time) equals nonzero."""
    mask = torch.rand(shape, generator=_g(1)) < density
    sliced = (torch.rand(5, 16, generator=_g(2)) < density)[1:]  # a view at a storage offset of 16
    odd = (torch.rand(6, 9, generator=_g(3)) < density)[:, 1:]  # not contiguous
    for m in (mask, sliced, odd):
        for got, expected in zip(true_entries(m), m.nonzero(as_tuple=True)):
            assert torch.equal(got, expected)
