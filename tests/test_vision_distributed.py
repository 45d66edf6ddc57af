"""The vision methods under torch.distributed (2 CPU processes, gloo), as torchrun would run them:
every rank trains, CMC's banks and MoCo's queue stay identical on every rank, gradients are averaged."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

pytestmark = pytest.mark.distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    import domains
    from domains.base import RunSpec
    from domains.context import RunContext

    vision = domains.get("vision")
    result = {}
    for method, loss in (("simclr", "dcl"), ("cmc", "unbiased"), ("moco", "infonce")):
        cfg = replace(vision.config_class(), epochs=1, batch_size=256, knn_every=0, proj_dim=32, num_negatives=768)
        spec = RunSpec("vision", method, "digits", loss, {}, "quick", 0, cfg)
        ctx = RunContext(seed=0, device=torch.device("cpu"), data_root=Path(out),
                         work_dir=Path(out) / f"{rank}-{method}", quiet=True)
        data = vision.prepare(spec, ctx).data
        torch.manual_seed(0)  # the same initial weights on every rank, as the harness seeds each one
        model = vision.pretrain(spec, ctx, data).model
        result[method] = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save(result, Path(out) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_two_ranks_stay_in_step(tmp_path):
    mp.spawn(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    for method in ("simclr", "cmc", "moco"):
        a, b = ranks[0][method], ranks[1][method]
        # DDP averages gradients, so the weights agree on both ranks; so do the banks and the queue
        # (every rank applies every rank's updates). BatchNorm statistics are per rank.
        for key in [k for k in a if "running" not in k and "num_batches" not in k]:
            assert torch.allclose(a[key].float(), b[key].float(), atol=1e-5), (method, key)
    assert (ranks[0]["cmc"]["bank_l"].norm(dim=1) - 1).abs().max() < 1e-5
    # 4 steps of 2 x 128 keys into 768 slots: each rank enqueued the keys of both ranks.
    assert int(ranks[0]["moco"]["queue_ptr"]) == (4 * 256) % 768


def test_harness_run_under_torchrun_with_two_ranks_writes_one_record(tmp_path):
    """``torchrun --nproc_per_node 2 -m harness run``: both ranks train (gloo on the CPU), rank 0 alone writes."""
    import json
    import subprocess
    import sys

    from tiny_domain import REPO, harness_env

    # (one epoch of linear evaluation, not 100: the check is of the ranks and the record, not of the accuracy)
    args = ["--domain", "vision", "--loss", "dcl", "--seeds", "0", "--quiet", "--device", "cpu", "--set", "epochs=1",
            "--set", "batch_size=256", "--set", "knn_every=0", "--set", "linear_epochs=1", "--set", "proj_dim=32",
            "--results", str(tmp_path)]
    env = dict(harness_env(), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(_free_port()), "-m", "harness", "run", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert record["status"] == "completed" and record["info"]["world_size"] == 2
    assert proc.stdout.count("[completed]") == 2  # each rank reports the run; only rank 0 wrote it
