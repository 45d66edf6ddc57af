"""Speed of the graph domain (``harness bench graph``): pretraining epochs per second, split into
batch cutting, forward, score construction (``membership_scores``: the pair masks and logits), loss
and backward, and the SVM protocol's time, on MUTAG and REDDIT-BINARY. The split shows that a
REDDIT-BINARY epoch (~60k nodes x 128 graphs per batch) is not dominated by building the masks.
Quick: one epoch (REDDIT-BINARY: its first 4 batches, scaled to the epoch) and a 3-fold SVM."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import losses
from domains.base import BenchPart, Domain
from domains.errors import DatasetMissingError
from domains.graph.config import GraphConfig
from domains.graph.evaluate import svm_protocol
from domains.graph.infograph import Pretrained, embed_all, epoch_batches, infograph_scores, scoring
from domains.graph.models import InfoGraph

DATASETS = ("MUTAG", "REDDIT-BINARY")
LOSSES = ("jsd", "pucl")
PARTS = ("batch", "forward", "scores", "loss", "backward")


def _timer(device: torch.device) -> Callable[[], float]:
    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    return now


def time_epoch(model: InfoGraph, data, loss_name: str, cfg: GraphConfig, device: torch.device,
               max_batches: int | None) -> dict[str, float]:
    """Seconds per part of one epoch (scaled up from ``max_batches`` batches when given)."""
    now = _timer(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    loss_fn = losses.get(loss_name)
    temperature, normalize = scoring(loss_name, cfg)
    batches = epoch_batches(data.num_graphs, cfg.batch_size, seed=0, epoch=0)
    timed = batches[:max_batches] if max_batches else batches
    spent = dict.fromkeys(PARTS, 0.0)
    model.train()
    for idx in timed:
        t0 = now()
        b = data.batch(idx)
        t1 = now()
        graph_out, node_out = model(b.x, b.edge_index, b.batch, b.num_graphs)
        t2 = now()
        scores = infograph_scores(graph_out, node_out, b.batch, cfg.anchor, temperature, normalize)
        t3 = now()
        loss = loss_fn(scores)
        t4 = now()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        t5 = now()
        for part, dt in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            spent[part] += dt
    scale = len(batches) / len(timed)
    return {part: dt * scale for part, dt in spent.items()}


def run_benchmark(domain: Domain, device: torch.device, data_root: Path, quick: bool) -> list[BenchPart]:
    """One part per dataset: a dataset not on disk gives a row with the reason it was ``skipped``."""
    return [BenchPart(name, lambda name=name: dataset_rows(domain, name, device, data_root, quick))
            for name in DATASETS]


def dataset_rows(domain: Domain, name: str, device: torch.device, data_root: Path, quick: bool) -> list[dict[str, Any]]:
    cfg = GraphConfig(svm_folds=3 if quick else 10)
    tic = time.perf_counter()
    try:
        data = domain.load(name, data_root, GraphConfig(download=False)).data.to(device)
    except DatasetMissingError as exc:
        return [{"dataset": name, "device": str(device), "skipped": str(exc)}]
    load_s = time.perf_counter() - tic
    max_batches = 4 if quick and name == "REDDIT-BINARY" else None
    rows: list[dict[str, Any]] = []
    for loss_name in LOSSES:
        torch.manual_seed(0)
        model = InfoGraph(data.num_features, cfg.hidden, cfg.layers).to(device)
        time_epoch(model, data, loss_name, cfg, device, max_batches=1)  # warm-up (allocator, kernels)
        parts = time_epoch(model, data, loss_name, cfg, device, max_batches)
        epoch_s = sum(parts.values())
        row = {"dataset": name, "device": str(device), "loss": loss_name, "graphs": data.num_graphs,
               "nodes": int(data.node_ptr[-1]), "load_s": round(load_s, 3), "epoch_s": round(epoch_s, 3),
               "epochs_per_s": round(1.0 / epoch_s, 3), "graphs_per_s": round(data.num_graphs / epoch_s, 1),
               **{f"{part}_s": round(dt, 3) for part, dt in parts.items()},
               "scores_fraction": round(parts["scores"] / epoch_s, 3),
               "timed_batches": max_batches or "all"}
        if loss_name == LOSSES[0]:
            tic = time.perf_counter()
            x, y = embed_all(Pretrained(model, data))
            svm_protocol(x, y, seed=0, folds=cfg.svm_folds, inner_folds=cfg.svm_inner_folds)
            row.update({"svm_s": round(time.perf_counter() - tic, 2), "svm_folds": cfg.svm_folds})
        rows.append(row)
    return rows
