"""The text domain on CUDA (``pytest -m gpu``): the torch SentEval classifier against its CPU result, bf16 autocast
in the GRU encoders, the batch scores without a host-device synchronisation, and the quick preset end to end
through the harness CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from support import no_sync

import losses
from domains.text import torch_probe as tp
from domains.text.quickthought import qt_scores

pytestmark = pytest.mark.gpu


def test_probe_on_cuda_matches_cpu(cuda):
    rng = np.random.default_rng(0)
    y = rng.permutation(np.arange(4000) % 2)
    X = (np.outer(2.0 * y - 1.0, rng.standard_normal(64)) * 0.3 + rng.standard_normal((4000, 64))).astype(np.float32)
    on = {device: tp.cross_validate(X, y, 10, tp.TorchProbe(device=device)) for device in ("cpu", str(cuda))}
    # the same batches and initial weights; only float sums differ, which can flip a rare prediction or stop
    assert abs(on["cpu"]["accuracy"] - on[str(cuda)]["accuracy"]) <= 0.5
    assert np.allclose(on["cpu"]["fold_accuracies"], on[str(cuda)]["fold_accuracies"], atol=1.5)


def test_probe_on_cuda_matches_cpu_on_a_senteval_task(cuda, data_root, data_set):
    data_set("senteval", "TREC")
    from domains.text.config import TextConfig
    from domains.text.senteval import BowEncoder, evaluate_task, load_tasks

    (task,) = load_tasks(data_root, TextConfig(senteval_tasks=("TREC",)))
    words = sorted({w for s in task.train.sentences + task.test.sentences for w in s.lower().split()})
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"text-gpu-vectors-{os.getpid()}.txt")
    rng = np.random.default_rng(0)
    with open(path, "w") as fh:
        fh.writelines(f"{w} {' '.join(f'{v:.4f}' for v in rng.standard_normal(32))}\n" for w in words)
    encoder = BowEncoder(path)
    cfg = TextConfig(senteval_tasks=("TREC",))
    cpu, gpu = (evaluate_task(encoder, task, cfg, device) for device in ("cpu", cuda))
    os.remove(path)
    assert gpu["classifier"] == "torch" and gpu["device"].startswith("cuda")
    assert abs(cpu["accuracy"] - gpu["accuracy"]) <= 1.0


def test_gru_trains_under_bf16_autocast(cuda):
    from domains.text.models import GRUEncoder

    enc = GRUEncoder(100, 620, 1200, bidirectional=False, pad_id=0).to(cuda)
    ids = torch.randint(1, 100, (400, 30), device=cuda)
    lengths = torch.randint(1, 31, (400,))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = enc(ids, lengths)
    out.float().pow(2).mean().backward()
    assert out.shape == (400, 1200) and torch.isfinite(enc.gru.weight_hh_l0.grad).all()


def test_quick_preset_end_to_end_on_cuda(cuda, data_root, data_set, tmp_path):
    """The quick preset on the books through the CLI, kept small: the SentEval tasks subsampled to 2000."""
    data_set("books")
    data_set("senteval")
    cmd = [sys.executable, "-m", "harness", "run", "--domain", "text", "--dataset", "books", "--loss", "dcl",
           "--device", "cuda", "--seeds", "0", "--quiet", "--data-root", str(data_root), "--results", str(tmp_path),
           "--set", "max_sentences=5000", "--set", "senteval_max_samples=2000"]
    env = {**os.environ, "HARNESS_CACHE_DIR": os.environ.get("HARNESS_CACHE_DIR", str(tmp_path / "cache"))}
    tic = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    (path,) = tmp_path.glob("text-*.json")
    record = json.loads(path.read_text())
    tasks = record["details"]["tasks"]
    print(f"quick preset on cuda: {time.perf_counter() - tic:.0f} s; timings {record['timings']}; "
          f"SentEval seconds {({k: round(v['seconds'], 1) for k, v in tasks.items()})}")
    assert record["status"] == "completed" and record["hardware"]["device"].startswith("cuda")
    assert {t["classifier"] for t in tasks.values()} == {"torch"}
    assert all(t["device"].startswith("cuda") for t in tasks.values())
    assert 50 <= record["metrics"]["accuracy"] <= 100


@pytest.mark.parametrize("objective", ["spec", "authors"])
def test_the_batch_scores_and_their_loss_need_no_synchronisation(cuda, objective):
    """Quick-thought's step waits for the device only at its log points: neither layout may add a wait."""
    u = torch.randn(12, 8, device=cuda, requires_grad=True)
    v = torch.randn(12, 8, device=cuda)
    doc_ids = torch.tensor([0] * 5 + [1] * 7, device=cuda)
    positions = torch.arange(40, 52, device=cuda)
    with no_sync():
        loss = losses.get("dcl", tau_plus=0.01)(qt_scores(u, v, doc_ids, positions, 2, objective=objective))
        loss.backward()
    assert torch.isfinite(loss) and u.grad is not None
