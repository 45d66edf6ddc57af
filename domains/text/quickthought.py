"""The quick-thought objective (Logeswaran & Lee 2018) with any loss of the core, and its training loop.

A batch is ``batch_size`` contiguous sentences of the corpus (the batches' order is shuffled every epoch,
their content is not). Every sentence ``s_i`` is an anchor; its candidates are all sentences of the batch,
scored ``logits[i, j] = sim(f(s_i), g(s_j)) / temperature`` with ``sim`` the raw dot product (quick-thought;
no logit bounds are known, so ``min_logit = max_logit = None``) or the cosine (bounds ``±1/temperature``).
Positives: the sentences at distance 1..``context`` in the same document (M = 2 inside a document, fewer at
its boundaries, never across documents). Negatives: every other sentence of the batch. The anchor itself
is neither. The DCL paper (Chuang et al. 2020, Sec. 5) runs this with ``dcl``, tau+ 0.005 and 0.01, M = 2.

With ``infonce`` this is the spec's InfoNCE with M positives, not quick-thought's own loss (lajanugen/S2V,
src/s2v_model.py ``build_loss``), which differs in three ways: one softmax cross-entropy per anchor with targets
1/M on its context sentences (each positive's denominator holds the other positives; ours holds the negatives
only), the anchor kept as a candidate with its logit set to 0 (ours drops it), and context taken from batch
neighbours whatever their document (ours never crosses one). The text page states it beside the published rows.

``objective="authors"`` scores a batch as S2V does (:func:`s2v_scores`): one row per (anchor, context sentence)
pair, whose positive is that context sentence and whose negatives are every other candidate of the batch, the
other context sentences and the anchor itself (at logit 0) among them. Each row is then one of S2V's softmax
classifications, and ``infonce`` on the rows is S2V's cross-entropy. It averages over the rows, where S2V
averages each anchor's targets first: the two differ only in the weight of the ``context`` anchors at each end of
a batch, which have fewer targets (2 of 400 anchors at S2V's batch and context 1; a test states the relation). The
debiased losses then correct each of those classifications' negatives, the anchor's other context sentences,
which are positives in truth, among them.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

import losses
from domains.checkpoint_extras import CheckpointExtras
from domains.context import RunContext
from domains.errors import UserError
from domains.text.config import OBJECTIVES, TextConfig
from domains.text.corpus import Corpus, sentence_labels
from domains.text.models import QuickThought
from domains.text.tokenize import SentenceTokenizer, pad


def qt_scores(u: Tensor, v: Tensor, doc_ids: Tensor, positions: Tensor, context: int = 1,
              similarity: str = "dot", temperature: float = 1.0, objective: str = "spec") -> losses.Scores:
    """Scores of a batch: ``u = f(s)`` and ``v = g(s)`` [B, d]; ``doc_ids`` and ``positions`` (the sentence's
    index in the corpus) [B] decide which pairs are neighbours. ``objective="authors"``: S2V's rows
    (:func:`s2v_scores`), whose neighbours are the batch's (its sentences are consecutive ones of the corpus)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if objective == "authors":
        return s2v_scores(u, v, context, similarity, temperature)
    logits, bound = _logits(u, v, similarity, temperature)
    distance = (positions[:, None] - positions[None, :]).abs()
    same_doc = doc_ids[:, None] == doc_ids[None, :]
    is_self = distance == 0
    pos = same_doc & ~is_self & (distance <= context)
    neg = ~pos & ~is_self
    return losses.Scores(logits, pos, neg, -bound if bound is not None else None, bound)


def s2v_scores(u: Tensor, v: Tensor, context: int = 1, similarity: str = "dot",
               temperature: float = 1.0) -> losses.Scores:
    """S2V's ``build_loss`` as Scores: its logits with the diagonal set to 0 ("ignore source sentence": the
    anchor stays a candidate), and for each anchor ``a`` of the batch and offset ``k`` in ``±1..±context`` a row
    whose positive is the sentence ``a + k`` of the batch (S2V's targets ``eye(B, k)``: batch neighbours, whatever
    their document) and whose negatives are all other columns, so that its softmax is S2V's for that target.
    Rows are made for every offset and anchor, so that no shape depends on the data (no host-device
    synchronisation on CUDA); a row whose ``a + k`` falls outside the batch has neither positive nor negative,
    and every loss leaves it out."""
    logits, bound = _logits(u, v, similarity, temperature)
    n = logits.shape[0]
    index = torch.arange(n, device=logits.device)
    offsets = torch.cat([torch.arange(-context, 0, device=logits.device),
                         torch.arange(1, context + 1, device=logits.device)])  # made there: no copy from the host
    target = (index[:, None] + offsets[None, :]).reshape(-1)  # anchor-major: a's rows, in offset order
    inside = ((target >= 0) & (target < n))[:, None]
    pos = (index[None, :] == target[:, None]) & inside
    rows = logits.masked_fill(index[:, None] == index[None, :], 0.0).repeat_interleave(len(offsets), dim=0)
    return losses.Scores(rows, pos, ~pos & inside, -bound if bound is not None else None, bound)


def _logits(u: Tensor, v: Tensor, similarity: str, temperature: float) -> tuple[Tensor, float | None]:
    """``sim(u_i, v_j) / temperature`` in float32, and the logits' bound (None for the raw dot product)."""
    if similarity not in ("dot", "cosine"):
        raise ValueError(f"similarity must be 'dot' or 'cosine', got {similarity!r}")
    u, v = u.float(), v.float()
    if similarity == "cosine":
        u, v = F.normalize(u, dim=1), F.normalize(v, dim=1)
        return u @ v.T / temperature, 1.0 / temperature
    return u @ v.T / temperature, None


def contiguous_batches(n_sentences: int, batch_size: int) -> list[slice]:
    """Consecutive chunks of the corpus; a last chunk of fewer than 2 sentences has no pair and is dropped."""
    return [slice(s, min(s + batch_size, n_sentences)) for s in range(0, n_sentences, batch_size)
            if min(s + batch_size, n_sentences) - s >= 2]


def negative_same_class_fraction(corpus: Corpus, batches: list[slice], context: int,
                                 objective: str = "spec") -> float | None:
    """Of the negatives the batches hold, the fraction sharing the anchor's class (:func:`sentence_labels`: the
    latent topic on the synthetic corpus, else the anchor's document, e.g. its book): the tau+ that the debiased
    losses really face. Batches are consecutive sentences, so it is far above the label prior Σ p_c² (on books,
    whose batches lie inside one book, near 1). ``objective="authors"`` counts S2V's rows (:func:`s2v_scores`):
    each (anchor, target) row's negatives are every other sentence of the batch, the anchor itself included. None
    when the batches hold no negative."""
    labels = sentence_labels(corpus)
    same = total = 0
    for sl in batches:
        pos_in = np.arange(sl.start, sl.stop)
        dist = np.abs(pos_in[:, None] - pos_in[None, :])
        same_class = labels[sl][:, None] == labels[sl][None, :]
        if objective == "authors":
            targets = (dist <= context) & (dist > 0)
            per_anchor = targets.sum(axis=1)  # the anchor's rows, one per target
            # a row leaves out its own target: each anchor's same-class candidates, less its same-class targets
            same += int((per_anchor * same_class.sum(axis=1)).sum() - (targets & same_class).sum())
            total += int(per_anchor.sum()) * (sl.stop - sl.start - 1)
            continue
        docs = corpus.doc_ids[sl]
        neg = ~((docs[:, None] == docs[None, :]) & (dist <= context))
        same += int((neg & same_class).sum())
        total += int(neg.sum())
    return same / total if total else None


class QuickThoughtExtras(CheckpointExtras):
    """What :func:`train` reads back from its checkpoint, and the tokenizer the domain builds the model from
    (``ctx.saved_extras``)."""

    step: int
    curve: list[dict[str, Any]]
    elapsed_s: float
    sentences_seen: int
    skipped_batches: int
    tokenizer: str  # the tokenizer's JSON (SentenceTokenizer.to_str)


def train(model: QuickThought, tokenizer: SentenceTokenizer, corpus: Corpus, cfg: TextConfig, loss_fn,
          ctx: RunContext) -> tuple[list[dict], dict[str, float], dict[str, Any]]:
    """Adam with gradient-norm clipping over shuffled contiguous batches; a checkpoint every
    ``checkpoint_every`` steps and at every epoch's end (with the tokenizer's vocabulary, which a resumed run
    builds its model from: ``ctx.saved_extras``); a resumed run goes on at its step. Returns the learning
    curve, the throughput and what to record.

    On a GPU nothing waits for the device between two log points: the padded corpus and its document ids are
    on the device from the start, which batches have a positive pair is known beforehand, and the loss is
    summed on the device and read (and checked for non-finite values) every ``log_every`` steps. ``amp``: the
    encoders run under bf16 autocast on CUDA."""
    device = ctx.device
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    all_ids, all_lengths = pad(tokenizer.ids(corpus.sentences), tokenizer.pad_id)  # tokenised once, truncated
    all_ids = all_ids.to(device, non_blocking=True)
    doc_ids = torch.from_numpy(corpus.doc_ids).to(device)
    batches = contiguous_batches(len(corpus), cfg.batch_size)
    if not batches:
        raise UserError(f"the corpus has {len(corpus)} sentence(s): quick-thought needs at least 2")
    # a batch of one-sentence documents has no positive pair (context >= 1: neighbours in the same document); S2V's
    # context crosses documents, so every batch (of 2 sentences or more) has one
    has_pair = [cfg.objective == "authors" or bool(np.any(corpus.doc_ids[sl][1:] == corpus.doc_ids[sl][:-1]))
                for sl in batches]
    amp = cfg.amp and device.type == "cuda"
    per_epoch = len(batches)
    total = per_epoch * cfg.epochs
    if cfg.max_steps:
        total = min(total, cfg.max_steps)
    step, curve, elapsed, seen, skipped = 0, [], 0.0, 0, 0
    training = {"model": model, "optimizer": optimizer, "loss": loss_fn}
    state = ctx.restore_checkpoint(training, counters={"step": total}, extras=QuickThoughtExtras)
    if state is not None:
        step, curve, elapsed = state["step"], state["curve"], state["elapsed_s"]
        seen, skipped = state["sentences_seen"], state["skipped_batches"]
        ctx.log(f"resuming quick-thought at step {step}/{total}")

    def save() -> None:
        ctx.save_checkpoint(training, step=step, curve=curve, elapsed_s=elapsed, sentences_seen=seen,
                            skipped_batches=skipped, tokenizer=tokenizer.to_str())

    loss_sum = torch.zeros((), device=device)
    window_steps = window_sentences = 0  # the steps trained and sentences seen since the last log point
    tic = time.perf_counter()
    first_step = step
    order: np.ndarray | None = None
    for step_index in ctx.progress(range(step, total), desc="quick-thought", total=total, initial=step):
        epoch, within = divmod(step_index, per_epoch)
        if order is None or within == 0:
            order = np.random.default_rng([ctx.seed, epoch]).permutation(per_epoch)
        batch = int(order[within])
        sl = batches[batch]
        step = step_index + 1
        if has_pair[batch]:
            lengths = all_lengths[sl]
            try:
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                    u, v = model(all_ids[sl, : int(lengths.max())], lengths)
                loss_fn.observe(u)  # the anchors' sentence embeddings, for an estimated class prior (else a no-op)
            except RuntimeError as exc:
                if not amp:
                    raise
                raise UserError(f"bf16 autocast failed in the encoders ({exc}): add --set amp=false") from exc
            positions = torch.arange(sl.start, sl.stop, device=device)
            loss = loss_fn(qt_scores(u, v, doc_ids[sl], positions, cfg.context, cfg.similarity, cfg.temperature,
                                     cfg.objective))
            if step == 1:  # the initial weights' loss, read once: not finite here is no divergence (check_loss)
                ctx.check_loss(loss.item(), step)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            loss_sum += loss.detach()
            window_steps += 1
            window_sentences += sl.stop - sl.start
        else:
            skipped += 1
        if window_steps and (step % cfg.log_every == 0 or step == total):
            loss_total = loss_sum.item()  # waits for the device: the window's time is all in
            ctx.check_loss(loss_total, step, f"the {loss_fn} loss is not finite between steps "
                                             f"{step - cfg.log_every} and {step}; lower lr or use similarity=cosine")
            seconds = time.perf_counter() - tic
            elapsed += seconds
            seen += window_sentences
            curve.append({"step": step, "epoch": round(step / per_epoch, 4), "loss": loss_total / window_steps,
                          "sentences_per_s": window_sentences / max(seconds, 1e-9)})
            ctx.log_scalars(step, {**curve[-1], "lr": optimizer.param_groups[0]["lr"]})
            if cfg.log_every < step - first_step <= 2 * cfg.log_every:  # the second window: past the warm-up
                ctx.log(f"quick-thought: {seconds / window_steps:.3f} s per step, about "
                        f"{(total - step) * seconds / window_steps / 60:.1f} min for the {total - step} steps left")
            loss_sum.zero_()
            window_steps = window_sentences = 0
            tic = time.perf_counter()
        if step % per_epoch == 0:
            estimate = loss_fn.refresh_prior(step // per_epoch)
            ctx.log_scalars(step, estimate)
            if estimate:
                if curve and curve[-1]["step"] == step:
                    curve[-1].update(estimate)
                else:
                    curve.append({"step": step, "epoch": step // per_epoch, **estimate})
        if step % cfg.checkpoint_every == 0 or step % per_epoch == 0 or ctx.stop_requested:  # stops here
            pause = time.perf_counter()
            save()
            tic += time.perf_counter() - pause  # saving is no training time
    throughput = {"sentences_per_s": seen / elapsed if elapsed > 0 else 0.0, "train_s": elapsed}
    info = {"steps": step, "epochs": round(step / per_epoch, 4), "batches_per_epoch": per_epoch,
            "train_sentences": len(corpus), "documents": len(corpus.doc_names), "skipped_batches": skipped,
            "vocab_size": tokenizer.vocab_size, "similarity": cfg.similarity, "temperature": cfg.temperature,
            "positives_per_anchor": 2 * cfg.context, "amp": "bf16" if amp else None,
            "negative_same_topic_fraction": negative_same_class_fraction(corpus, batches, cfg.context,
                                                                         cfg.objective),
            "prior": loss_fn.prior_summary()}
    return curve, throughput, info
