"""The vision methods' own machinery: CMC's memory banks and negative sampling, MoCo's queue and key
encoder, SimCLR's multi-view layout and the oracle's labels, checked against naive computations."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import losses
from domains.vision.cmc import CMC
from domains.vision.config import VisionConfig, resolved
from domains.vision.method import Batch, DataInfo
from domains.vision.moco import MoCo
from domains.vision.simclr import SimCLR

N, SIZE = 40, 16


def _info(n: int = N) -> DataInfo:
    return DataInfo(n, torch.arange(n) % 4, 4, SIZE, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def _cfg(method: str, **kw) -> VisionConfig:
    return resolved(replace(VisionConfig(arch="small", proj_dim=16), **kw), method, "digits")


def _batch(index: list[int], labels: torch.Tensor | None = None) -> Batch:
    idx = torch.tensor(index)
    images = torch.randint(0, 256, (len(index), 3, SIZE, SIZE), dtype=torch.uint8)
    return Batch(idx, images, labels[idx] if labels is not None else idx % 4)


def _capture(monkeypatch, name: str) -> list:
    """Record the arguments of every call to ``losses.<name>`` (still calling it)."""
    calls, original = [], getattr(losses, name)

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(losses, name, spy)
    return calls


def test_cmc_bank_update_matches_the_momentum_formula():
    torch.manual_seed(0)
    cmc = CMC(_cfg("cmc", cmc_momentum=0.5), _info(), losses.get("infonce"), False)
    before_l, before_ab = cmc.bank_l.clone(), cmc.bank_ab.clone()
    index = torch.tensor([3, 7, 11])
    z_l, z_ab = torch.randn(3, 16), torch.randn(3, 16)
    cmc.update_banks(index, z_l, z_ab)
    for bank, old, z in ((cmc.bank_l, before_l, z_l), (cmc.bank_ab, before_ab, z_ab)):
        for row, i in enumerate(index.tolist()):
            expected = 0.5 * old[i] + 0.5 * z[row] / z[row].norm()
            assert torch.allclose(bank[i], expected / expected.norm(), atol=1e-6)
        untouched = torch.ones(N, dtype=torch.bool)
        untouched[index] = False
        assert torch.equal(bank[untouched], old[untouched])


def test_cmc_negatives_are_distinct_and_never_from_the_batch():
    torch.manual_seed(0)
    cmc = CMC(_cfg("cmc", num_negatives=10), _info(), losses.get("infonce"), False)
    index = torch.tensor([0, 5, 9, 30])
    seen = torch.zeros(N, dtype=torch.bool)
    for _ in range(50):
        neg = cmc.sample_negatives(index)
        assert len(neg) == 10 and len(neg.unique()) == 10
        assert not torch.isin(neg, index).any()
        seen[neg] = True
    assert seen.sum() == N - len(index)  # every other row gets drawn eventually
    everything = CMC(_cfg("cmc", num_negatives=4096), _info(), losses.get("infonce"), False).sample_negatives(index)
    assert sorted(everything.tolist()) == [i for i in range(N) if i not in index.tolist()]


def test_cmc_step_scores_against_the_other_views_bank(monkeypatch):
    torch.manual_seed(0)
    labels = torch.arange(N) % 4
    cmc = CMC(_cfg("cmc", num_negatives=12), _info(), losses.get("unbiased"), True)
    calls = _capture(monkeypatch, "bank_scores")
    bank_l, bank_ab = cmc.bank_l.clone(), cmc.bank_ab.clone()
    batch = _batch([1, 2, 3, 4, 5, 6], labels)
    loss = cmc(batch)
    loss.backward()
    assert torch.isfinite(loss) and len(calls) == 2
    (q_l, key_l, neg_l, _), kw = calls[0]
    assert torch.equal(key_l, bank_ab[batch.index])  # L anchors: positive = the ab bank's own row
    assert neg_l.shape == (12, 16) and kw["bank_labels"].shape == (12,)
    (q_ab, key_ab, _, _), _ = calls[1]
    assert torch.equal(key_ab, bank_l[batch.index])
    changed = (cmc.bank_l != bank_l).any(1).nonzero().flatten().tolist()
    assert changed == batch.index.tolist()
    assert all(p.grad is not None for p in cmc.enc_l.parameters())


def test_moco_queue_is_a_ring_buffer_in_order():
    moco = MoCo(_cfg("moco", num_negatives=8), _info(), losses.get("infonce"), False)
    keys = [F.normalize(torch.randn(3, 16), dim=1) for _ in range(3)]
    for i, k in enumerate(keys):
        moco.enqueue(k, torch.full((3,), i))
    # 9 keys into 8 slots: the ninth overwrote slot 0, the pointer sits at 1.
    assert int(moco.queue_ptr) == 1
    expected = torch.cat(keys)
    assert torch.allclose(moco.queue[0], expected[8], atol=1e-6)
    assert torch.allclose(moco.queue[1:8], expected[1:8], atol=1e-6)
    assert moco.queue_labels.tolist() == [2, 0, 0, 1, 1, 1, 2, 2]


def test_moco_step_never_sees_its_own_keys_as_negatives(monkeypatch):
    torch.manual_seed(0)
    moco = MoCo(_cfg("moco", num_negatives=8, moco_momentum=0.9), _info(), losses.get("infonce"), False)
    calls = _capture(monkeypatch, "bank_scores")
    q_before = [p.detach().clone() for p in list(moco.encoder.parameters()) + list(moco.head.parameters())]
    k_before = [p.detach().clone() for p in moco.key_encoder.parameters()]
    for step in range(3):
        batch = _batch([4 * step + i for i in range(4)])
        moco(batch).backward()
        (_, key, bank, _), _ = calls[-1]
        key = F.normalize(key, dim=1)
        # No queued entry equals a key of this step (they are enqueued only after the loss).
        assert (bank @ key.T).max() < 1 - 1e-4
        slots = [(4 * step + i) % 8 for i in range(4)]
        assert torch.allclose(moco.queue[slots], key.detach(), atol=1e-5)
        if step == 0:  # the key encoder moved by momentum before computing the keys
            for pk, pk0, pq0 in zip(moco.key_encoder.parameters(), k_before, q_before):
                assert torch.allclose(pk, 0.9 * pk0 + 0.1 * pq0, atol=1e-6)
    assert all(not p.requires_grad for p in moco.key_encoder.parameters())


def test_simclr_multiview_layout_and_oracle_labels(monkeypatch):
    torch.manual_seed(0)
    calls = _capture(monkeypatch, "multiview_scores")
    simclr = SimCLR(_cfg("simclr", n_views=3), _info(), losses.get("unbiased"), True)
    batch = _batch(list(range(8)))
    assert torch.isfinite(simclr(batch))
    (views, t), kw = calls[0]
    assert len(views) == 3 and t == 0.5
    assert torch.equal(kw["labels"], batch.labels)
    scores = losses.multiview_scores(views, t, labels=kw["labels"])
    assert scores.pos_mask.sum(1).eq(2).all()  # M = V - 1 positives per anchor


@pytest.mark.parametrize(("aggregation", "layout"), [("combination", "pairwise_scores"),
                                                    ("grouping", "multiview_scores")])
def test_simclr_debiased_pos_combination_scores_each_pair_of_views(monkeypatch, aggregation, layout):
    """The authors' loss combination averages the two-view loss over the pairs of views (losses/debiased_pos.py)."""
    torch.manual_seed(0)
    calls = {name: _capture(monkeypatch, name) for name in ("pairwise_scores", "multiview_scores")}
    simclr = SimCLR(_cfg("simclr", n_views=3), _info(), losses.get("debiased_pos", aggregation=aggregation), False)
    assert torch.isfinite(simclr(_batch(list(range(8)))))
    assert {name: len(c) for name, c in calls.items()} == {name: int(name == layout) for name in calls}


def test_simclr_pair_scores_get_no_labels_unless_the_loss_needs_them(monkeypatch):
    calls = _capture(monkeypatch, "pair_scores")
    simclr = SimCLR(_cfg("simclr"), _info(), losses.get("dcl"), False)
    simclr(_batch(list(range(6))))
    assert calls[0][1]["labels"] is None


@pytest.mark.parametrize("loss", ["supcon", "eps_supinfonce", "ce"])
def test_biased_objectives_with_fairkl_have_gradients(loss):
    from domains.vision.biased import Biased

    torch.manual_seed(0)
    cfg = _cfg("biased", fairkl_lambda=0.75, alpha=0.03)
    method = Biased(cfg, _info(), losses.get(loss), True)
    batch = _batch(list(range(12)))
    batch.bias = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3, 0, 1, 2, 3])
    value = method(batch)
    value.backward()
    assert torch.isfinite(value)
    assert all(p.grad is not None for p in method.encoder.parameters())


def test_moco_momentum_update_matches_a_loop_over_parameters():
    torch.manual_seed(0)
    moco = MoCo(_cfg("moco", num_negatives=8, moco_momentum=0.7), _info(), losses.get("infonce"), False)
    with torch.no_grad():
        for p in (*moco.encoder.parameters(), *moco.head.parameters()):
            p.add_(torch.randn_like(p))
    keys = [p.clone() for p in moco.key_encoder.parameters()]
    queries = [p.clone() for p in (*moco.encoder.parameters(), *moco.head.parameters())]
    moco.momentum_update()
    for after, k, q in zip(moco.key_encoder.parameters(), keys, queries):
        assert torch.allclose(after, 0.7 * k + 0.3 * q, atol=1e-6)
    assert all(not p.requires_grad for p in moco.key_encoder.parameters())


def test_cmc_negatives_are_uniform_over_the_other_rows():
    torch.manual_seed(0)
    cmc = CMC(_cfg("cmc", num_negatives=6), _info(), losses.get("infonce"), False)
    index = torch.tensor([1, 2, 3, 4])
    counts = torch.zeros(N)
    draws = 3000
    for _ in range(draws):
        counts[cmc.sample_negatives(index)] += 1
    others = counts[[i for i in range(N) if i not in index.tolist()]]
    expected = draws * 6 / (N - 4)
    # Binomial counts: std sqrt(500 · (1 - 1/6)) ≈ 20; 5 std each way.
    assert (others - expected).abs().max() < 5 * (expected * (1 - 6 / (N - 4))) ** 0.5
    assert counts[index].sum() == 0
