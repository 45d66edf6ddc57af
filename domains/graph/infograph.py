"""InfoGraph pretraining (Sun et al., ICLR 2020) with any unsupervised loss of the core.

Pairs: a node and its own graph are a positive pair; a node and every other graph of the batch a
negative (``losses.membership_scores``, one comparison of index vectors, no loop). Direction:
``anchor="node"`` scores each node against the B graphs (M=1, N=B-1); ``anchor="graph"`` scores
each graph against the batch's nodes (M = its node count). ``jsd`` is InfoGraph itself: raw dot
products of the two heads' outputs, pooled over all pairs of the batch (so the direction does not
change it); every other loss scores cosine similarities divided by ``temperature``.

Batches: the graphs are reshuffled every epoch by a generator seeded with (seed, epoch), so a resumed
run sees the same batches; a last batch of a single graph (no negative) joins the previous one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from typing_extensions import NotRequired

import losses
from domains.base import PretrainResult, RunSpec
from domains.checkpoint_extras import CheckpointExtras, SameClassCounts
from domains.context import RunContext
from domains.graph.config import GraphConfig
from domains.graph.data import GraphSet
from domains.graph.models import InfoGraph
from losses.prior import SameClassShare


@dataclass
class Pretrained:
    """What ``pretrain`` hands to ``evaluate``: the trained networks and the data on the device."""

    model: InfoGraph
    data: GraphSet


def scoring(loss: str, cfg: GraphConfig) -> tuple[float, bool]:
    """(temperature, normalize) of the scores: raw dot products for a loss that scores raw logits pair by pair
    (jsd), cosine / temperature for one that reads them as probabilities."""
    return (1.0, False) if losses.spec(loss).scoring == losses.LOGITS else (cfg.temperature, True)


def infograph_scores(graph_emb: Tensor, node_emb: Tensor, node_graph: Tensor, anchor: str,
                     temperature: float, normalize: bool) -> losses.Scores:
    """Scores of nodes against graphs; ``node_graph[i]`` is the batch index of node i's graph."""
    if anchor == "node":
        return losses.membership_scores(node_emb, graph_emb, node_graph, temperature, members="anchors",
                                        normalize=normalize)
    return losses.membership_scores(graph_emb, node_emb, node_graph, temperature, members="candidates",
                                    normalize=normalize)


def epoch_batches(n_graphs: int, batch_size: int, seed: int, epoch: int) -> list[Tensor]:
    """The graph indices of each batch of ``epoch``: a seeded permutation cut into ``batch_size`` chunks."""
    gen = torch.Generator().manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
    chunks = list(torch.randperm(n_graphs, generator=gen).split(batch_size))
    if len(chunks) > 1 and chunks[-1].shape[0] == 1:
        chunks[-2:] = [torch.cat(chunks[-2:])]
    return chunks


class GraphExtras(CheckpointExtras):
    """What :func:`train` reads back from its checkpoint."""

    epoch: int
    curve: list[dict[str, Any]]
    same_class: NotRequired[SameClassCounts]  # absent from a checkpoint written before it was counted


def train(spec: RunSpec, ctx: RunContext, data: GraphSet) -> PretrainResult:
    """Pretrain on every graph of ``data`` (already on ``ctx.device``), checkpointing each epoch."""
    cfg: GraphConfig = spec.config
    model = InfoGraph(data.num_features, cfg.hidden, cfg.layers).to(ctx.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    loss_fn = spec.make_loss()
    temperature, normalize = scoring(spec.loss, cfg)
    curve: list[dict[str, Any]] = []
    start = 0
    training = {"model": model, "optimizer": optimizer, "loss": loss_fn}
    same_class = SameClassShare()  # the share of same-class negatives the loss saw, for the prior page
    state = ctx.restore_checkpoint(training, counters={"epoch": cfg.epochs}, extras=GraphExtras)
    if state is not None:
        start, curve = state["epoch"], state["curve"]
        if "same_class" in state:  # absent from a checkpoint written before it was counted
            same_class.load_state_dict(state["same_class"])
        ctx.log(f"resuming graph pretraining at epoch {start + 1}")
    seen, train_seconds = 0, 0.0
    for epoch in ctx.progress(range(start, cfg.epochs), desc="epochs", total=cfg.epochs, initial=start,
                              unit="epoch"):
        model.train()
        tic, total, count = time.perf_counter(), 0.0, 0
        batches = epoch_batches(data.num_graphs, cfg.batch_size, ctx.seed, epoch)
        hint = f"epoch {epoch + 1}; try a lower learning rate (now --set lr={cfg.lr:g})"
        for step, idx in enumerate(batches, epoch * len(batches) + 1):
            b = data.batch(idx)
            graph_out, node_out = model(b.x, b.edge_index, b.batch, b.num_graphs)
            loss_fn.observe(graph_out)  # the graph embeddings, for an estimated class prior (else a no-op)
            try:
                scores = infograph_scores(graph_out, node_out, b.batch, cfg.anchor, temperature, normalize)
                loss = loss_fn(scores)
            except losses.NonFiniteError:  # the loss core refuses non-finite scores: the weights diverged
                ctx.check_loss(math.nan, step, f"the encoder's outputs or their scores are no longer finite; {hint}")
                raise
            node_y = b.y[b.batch]
            same_class.add(scores.neg_mask, *((node_y, b.y) if cfg.anchor == "node" else (b.y, node_y)))
            value = loss.item()
            ctx.check_loss(value, step, hint)
            ctx.log_scalars(step, {"step_loss": value})
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += value * b.num_graphs
            count += b.num_graphs
        seconds = time.perf_counter() - tic
        seen, train_seconds = seen + count, train_seconds + seconds
        curve.append({"epoch": epoch + 1, "loss": total / count, "seconds": seconds, "graphs_per_s": count / seconds,
                      **loss_fn.refresh_prior(epoch + 1)})
        ctx.log_scalars((epoch + 1) * len(batches), {**curve[-1], "lr": optimizer.param_groups[0]["lr"]})
        ctx.save_checkpoint(training, epoch=epoch + 1, curve=curve, same_class=same_class.state_dict())
    throughput = {"graphs_per_s": seen / train_seconds} if train_seconds > 0 else {}
    info = {"anchor": cfg.anchor, "normalize": normalize, "temperature": temperature if normalize else None,
            "node_features": data.node_features, "num_graphs": data.num_graphs,
            "num_features": data.num_features, "num_classes": data.num_classes,
            "embedding_dim": model.encoder.out_dim, "resumed_at_epoch": start if state is not None else None,
            "prior": loss_fn.prior_summary(), "negative_same_class_fraction": same_class.value()}
    return PretrainResult(Pretrained(model, data), curve=curve, throughput=throughput, info=info)


@torch.no_grad()
def embed_all(pre: Pretrained, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Frozen graph embeddings and labels of every graph, in dataset order."""
    pre.model.eval()
    data = pre.data
    out = []
    for idx in torch.arange(data.num_graphs, device=data.y.device).split(chunk):
        b = data.batch(idx)
        out.append(pre.model.embed(b.x, b.edge_index, b.batch, b.num_graphs).cpu())
    return torch.cat(out).double().numpy(), data.y.cpu().numpy()
