"""``gather=True`` across two CPU processes (gloo) equals one process on the concatenated batch.

Each rank scores its local anchors against every rank's candidates and averages over its anchors;
with equally many anchors per rank the mean of the two local losses is the single-process loss.
The gather keeps the gradient and sums it over ranks, so each rank's input receives the gradient of
the sum of all local losses: ``world_size`` times the single-process gradient of its rows (what
DDP's averaging then turns back into the gradient of the global mean).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import losses

WORLD = 2
GRAPHS_PER_RANK = 2
NODES = (5, 8)  # nodes per rank: unequal, so the gather pads and trims


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _rows(x: torch.Tensor, rank: int) -> torch.Tensor:
    n = x.shape[0] // WORLD
    return x[rank * n:(rank + 1) * n]


def _pair_case(loss: losses.Loss, labelled: bool = False):
    def full() -> dict[str, torch.Tensor]:
        base = _randn(8, 5, seed=0)
        return {"z1": base + 0.5 * _randn(8, 5, seed=1), "z2": base + 0.5 * _randn(8, 5, seed=2),
                "y": torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        return {k: _rows(v, rank) for k, v in d.items()}

    def compute(d: dict, gather: bool) -> torch.Tensor:
        return loss(losses.pair_scores(d["z1"], d["z2"], 0.5, labels=d["y"] if labelled else None, gather=gather))

    return full, local, compute, ("z1", "z2")


def _multiview_case():
    def full() -> dict[str, torch.Tensor]:
        return {f"v{i}": _randn(6, 4, seed=10 + i) for i in range(3)}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        return {k: _rows(v, rank) for k, v in d.items()}

    def compute(d: dict, gather: bool) -> torch.Tensor:
        return losses.dcl(losses.multiview_scores([d["v0"], d["v1"], d["v2"]], 0.3, gather=gather), tau_plus=0.2)

    return full, local, compute, ("v0", "v1", "v2")


def _pairwise_case():
    def full() -> dict[str, torch.Tensor]:
        return {f"v{i}": _randn(6, 4, seed=50 + i) for i in range(3)}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        return {k: _rows(v, rank) for k, v in d.items()}

    def compute(d: dict, gather: bool) -> torch.Tensor:
        scores = losses.pairwise_scores([d["v0"], d["v1"], d["v2"]], 0.5, gather=gather)
        return losses.debiased_pos(scores, aggregation="combination")

    return full, local, compute, ("v0", "v1", "v2")


def _label_case():
    def full() -> dict[str, torch.Tensor]:
        return {"z": _randn(10, 4, seed=20), "y": torch.tensor([0, 1, 2, 0, 1, 2, 3, 3, 0, 1])}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        return {k: _rows(v, rank) for k, v in d.items()}

    def compute(d: dict, gather: bool) -> torch.Tensor:
        return losses.supcon(losses.label_scores(d["z"], d["y"], 0.2, gather=gather))

    return full, local, compute, ("z",)


def _bank_case():
    def full() -> dict[str, torch.Tensor]:
        return {"q": _randn(6, 4, seed=30), "k": _randn(6, 4, seed=31), "bank": _randn(10, 4, seed=32)}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        return {k: _rows(v, rank) for k, v in d.items()}  # each rank holds a shard of the bank

    def compute(d: dict, gather: bool) -> torch.Tensor:
        return losses.get("dcl", tau_plus=0.1)(losses.bank_scores(d["q"], d["k"], d["bank"], 0.2, gather=gather))

    return full, local, compute, ("q", "k", "bank")


def _membership_case():
    def full() -> dict[str, torch.Tensor]:
        member_of = torch.cat([torch.arange(n) % GRAPHS_PER_RANK + r * GRAPHS_PER_RANK for r, n in enumerate(NODES)])
        return {"graphs": _randn(WORLD * GRAPHS_PER_RANK, 4, seed=40), "nodes": _randn(sum(NODES), 4, seed=41),
                "member_of": member_of}

    def local(d: dict, rank: int) -> dict[str, torch.Tensor]:
        start = sum(NODES[:rank])
        nodes = slice(start, start + NODES[rank])
        return {"graphs": _rows(d["graphs"], rank), "nodes": d["nodes"][nodes],
                "member_of": d["member_of"][nodes] - rank * GRAPHS_PER_RANK}

    def compute(d: dict, gather: bool) -> torch.Tensor:
        return losses.infonce(losses.membership_scores(d["graphs"], d["nodes"], d["member_of"], 0.5, gather=gather))

    return full, local, compute, ("graphs", "nodes")


CASES = {
    "pair-infonce": _pair_case(losses.get("infonce")),
    "pair-dcl": _pair_case(losses.get("dcl", tau_plus=0.1)),
    "pair-dcl-floored": _pair_case(losses.get("dcl", tau_plus=0.9)),
    "pair-hcl": _pair_case(losses.get("hcl")),
    "pair-debiased_pos": _pair_case(losses.get("debiased_pos")),
    "pair-unbiased": _pair_case(losses.get("unbiased"), labelled=True),
    "multiview-dcl": _multiview_case(),
    "pairwise-debiased_pos": _pairwise_case(),
    "label-supcon": _label_case(),
    "bank-dcl": _bank_case(),
    "membership-infonce": _membership_case(),
}


def _value_and_grads(case: str, d: dict[str, torch.Tensor], gather: bool) -> tuple[float, dict[str, torch.Tensor]]:
    _, _, compute, leaves = CASES[case]
    d = {k: (v.clone().requires_grad_() if k in leaves else v) for k, v in d.items()}
    value = compute(d, gather)
    value.backward()
    return value.item(), {k: d[k].grad for k in leaves}


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        results = {}
        for case, (full, local, _, _) in CASES.items():
            results[case] = _value_and_grads(case, local(full(), rank), gather=True)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    out = tmp_path_factory.mktemp("dist")
    mp.spawn(_worker, args=(_free_port(), str(out)), nprocs=WORLD, join=True)
    return [torch.load(out / f"rank{r}.pt") for r in range(WORLD)]


@pytest.mark.distributed
@pytest.mark.parametrize("case", list(CASES))
def test_gather_equals_one_process_on_the_whole_batch(ranks, case):
    full, local, _, leaves = CASES[case]
    value, grads = _value_and_grads(case, full(), gather=False)
    assert sum(r[case][0] for r in ranks) / WORLD == pytest.approx(value, rel=1e-5)
    for rank, result in enumerate(ranks):
        expected = local({**full(), **grads}, rank)
        for name in leaves:
            torch.testing.assert_close(result[case][1][name], WORLD * expected[name], rtol=1e-4, atol=1e-6)


def test_without_a_process_group_gather_is_a_no_op():
    z1, z2 = _randn(4, 3, seed=50), _randn(4, 3, seed=51)
    a, b = losses.pair_scores(z1, z2, 0.5, gather=True), losses.pair_scores(z1, z2, 0.5)
    assert torch.equal(a.logits, b.logits) and torch.equal(a.pos_mask, b.pos_mask)


def _prior_worker(rank: int, port: int, out_dir: str) -> None:
    """Rank 0 observes four well-separated clusters; rank 1 observes nothing, so it fails if it estimates."""
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=timedelta(seconds=60))
    try:
        loss = losses.get("dcl", tau_plus="auto")
        if rank == 0:
            centres = torch.eye(8)[:4] * 10
            loss.observe(centres.repeat(50, 1) + _randn(200, 8, seed=60).float())
        point = loss.refresh_prior(1)
        torch.save({"point": point, "state": loss.state_dict()}, Path(out_dir) / f"prior{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_only_rank_zero_estimates_the_prior_and_every_rank_binds_its_value(tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    mp.spawn(_prior_worker, args=(_free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    zero, one = (torch.load(tmp_path / f"prior{r}.pt") for r in range(WORLD))
    assert zero["point"]["prior"] == pytest.approx(0.25, rel=0.05)  # four equal clusters
    assert one["state"] == zero["state"] and one["point"]["prior"] == zero["point"]["prior"]
