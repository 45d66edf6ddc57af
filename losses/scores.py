"""The `Scores` object every loss consumes, and the constructors that build it from embeddings.

Conventions (``shared/specs/losses.md``): ``logits[a, k]`` is the similarity of anchor ``a`` to
candidate ``k`` divided by the temperature; ``pos_mask`` and ``neg_mask`` are disjoint; entries in
neither are ignored. The cosine constructors know the logit range ``[-1/t, 1/t]``.

The constructors also say where the positives and the ignored entries are as index lists
(``positives``, ``ignored``) whenever their number is known without reading the data, so that the
losses find them without ``nonzero`` (a host-device synchronisation on CUDA) and treat the negatives
as "every entry but these few" instead of passing over a bool matrix.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from losses.checks import NonFiniteError, reads_values_now, require
from losses.distributed import gather_with_grad

T = TypeVar("T")

Entries = tuple[Tensor, Tensor]  # (row, column) of a set of entries, long [E] each


@dataclass(frozen=True)
class Scores:
    """Logits of A anchors against K candidates, with the positive and negative masks."""

    logits: Tensor  # float [A, K], already divided by the temperature
    pos_mask: Tensor  # bool [A, K]
    neg_mask: Tensor  # bool [A, K]
    min_logit: float | None = None
    max_logit: float | None = None
    anchor_labels: Tensor | None = None  # long [A]
    candidate_labels: Tensor | None = None  # long [K]
    # Optional, for constructors that know them without reading data: exactly the entries of pos_mask,
    # and exactly the entries in neither mask (each entry once, in any order). Then neg_mask is every
    # entry but these, which the constructor guarantees, and the losses need no pass over the masks.
    positives: Entries | None = None
    ignored: Entries | None = None
    # Optional, read only with positives: every anchor has exactly this many positives, listed anchor by
    # anchor (positives[0] is 0, 0, ..., 1, 1, ...), which the constructors of regular layouts know. The
    # losses then reach the pairs of an anchor by reshaping instead of gathering and scattering.
    positives_per_anchor: int | None = None

    def __post_init__(self) -> None:
        logits, pos, neg = self.logits, self.pos_mask, self.neg_mask
        if not isinstance(logits, Tensor) or logits.dim() != 2:
            raise ValueError(f"logits must be a 2-D tensor [A, K], got {_shape(logits)}")
        if not logits.is_floating_point():
            raise ValueError(f"logits must be floating point, got {logits.dtype}")
        for name, mask in (("pos_mask", pos), ("neg_mask", neg)):
            if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
                raise ValueError(f"{name} must be a bool tensor, got {getattr(mask, 'dtype', type(mask))}")
            if mask.shape != logits.shape:
                raise ValueError(f"{name} has shape {tuple(mask.shape)} but logits have {tuple(logits.shape)}")
        if self.ignored is None:  # built by hand (the constructors' masks are disjoint by construction)
            # any() over uint8 is several times faster than over bool on the CPU.
            require(torch.logical_and(pos, neg).view(torch.uint8).any().logical_not(),
                    "pos_mask and neg_mask overlap: a candidate cannot be both positive and negative")
        # A non-finite entry makes the sum non-finite; only then (or on overflow) look at every entry,
        # which costs several passes over the matrix. On an accelerator this pass is left to the losses,
        # which check that their result is finite (a non-finite logit in either mask makes it so).
        if reads_values_now(logits) and not torch.isfinite(logits.detach().float().sum()) \
                and not torch.isfinite(logits.detach()).all():
            raise NonFiniteError("logits contain NaN or infinite values")
        for name, labels, size in (("anchor_labels", self.anchor_labels, logits.shape[0]),
                                   ("candidate_labels", self.candidate_labels, logits.shape[1])):
            if labels is not None and (labels.dim() != 1 or labels.shape[0] != size):
                raise ValueError(f"{name} must have shape [{size}], got {tuple(labels.shape)}")
        if (self.anchor_labels is None) != (self.candidate_labels is None):
            raise ValueError("anchor_labels and candidate_labels must be given together")
        if self.positives is not None and self.positives_per_anchor is not None \
                and self.positives[0].shape[0] != self.positives_per_anchor * logits.shape[0]:
            raise ValueError(f"positives_per_anchor={self.positives_per_anchor} needs positives listing that many for "
                             f"each of the {logits.shape[0]} anchors, got {self.positives[0].shape[0]} positives")

    @property
    def has_labels(self) -> bool:
        return self.anchor_labels is not None


def _shape(x: object) -> str:
    return str(tuple(x.shape)) if isinstance(x, Tensor) else type(x).__name__


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _check_embeddings(name: str, z: Tensor, dim: int | None = None) -> None:
    if not isinstance(z, Tensor) or z.dim() != 2:
        raise ValueError(f"{name} must be a 2-D tensor [N, d], got {_shape(z)}")
    if dim is not None and z.shape[1] != dim:
        raise ValueError(f"{name} has embedding size {z.shape[1]}, expected {dim}")


def _prepare(z: Tensor, normalize: bool) -> Tensor:
    # Losses are computed in float32 whatever the autocast state or the input precision.
    z = z.float()
    return F.normalize(z, dim=1) if normalize else z


def _finish(anchors: Tensor, candidates: Tensor, pos: Tensor, neg: Tensor, temperature: float,
            normalize: bool, anchor_labels: Tensor | None = None, candidate_labels: Tensor | None = None,
            positives: Entries | None = None, ignored: Entries | None = None,
            positives_per_anchor: int | None = None) -> Scores:
    with torch.autocast(device_type=anchors.device.type, enabled=False):
        # The temperature divides the [A, d] anchors, not the [A, K] product: one pass over the
        # largest matrix fewer, forward and backward.
        logits = (anchors / temperature) @ candidates.T
    bound = 1.0 / temperature if normalize else None
    return Scores(logits, pos, neg, -bound if bound is not None else None, bound,
                  anchor_labels, candidate_labels, positives, ignored, positives_per_anchor)


def _masks_from(shape: tuple[int, int], positives: Entries, ignored: Entries, device: torch.device
                ) -> tuple[Tensor, Tensor]:
    """The bool masks of a layout given by its positive and its ignored entries (set through flat
    indices: ``index_fill_`` never reads the indices on the host)."""
    pos_flat = positives[0] * shape[1] + positives[1]
    pos = torch.zeros(shape, dtype=torch.bool, device=device)
    pos.view(-1).index_fill_(0, pos_flat, True)
    neg = torch.ones(shape, dtype=torch.bool, device=device)
    neg.view(-1).index_fill_(0, torch.cat([pos_flat, ignored[0] * shape[1] + ignored[1]]), False)
    return pos, neg


def _no_entries(device: torch.device) -> Entries:
    empty = torch.zeros(0, dtype=torch.long, device=device)
    return empty, empty


def _gather(x: Tensor, gather: bool) -> tuple[Tensor, int]:
    """Candidates from every rank (with gradient) and the offset of this rank's rows among them."""
    return gather_with_grad(x) if gather else (x, 0)


def pair_scores(z1: Tensor, z2: Tensor, temperature: float, *, labels: Tensor | None = None,
                normalize: bool = True, gather: bool = False) -> Scores:
    """SimCLR layout: the 2B rows ``cat(z1, z2)`` are anchors and candidates; the positive of row i
    is its other view, every other row but itself is a negative (M=1, N=2B-2)."""
    _check_temperature(temperature)
    _check_embeddings("z1", z1)
    _check_embeddings("z2", z2, z1.shape[1])
    if z1.shape[0] != z2.shape[0]:
        raise ValueError(f"z1 and z2 must hold the same samples, got {z1.shape[0]} and {z2.shape[0]} rows")
    return multiview_scores([z1, z2], temperature, labels=labels, normalize=normalize, gather=gather)


def multiview_scores(views: Sequence[Tensor] | Tensor, temperature: float, *,
                     labels: Tensor | None = None, normalize: bool = True,
                     gather: bool = False) -> Scores:
    """V views of B samples (a list of [B, d] or a [V, B, d] tensor). Anchors and candidates are
    all V·B rows, view-major; positives are the other V-1 views of the same sample, negatives every
    view of every other sample.

    This pooled layout is the better-defined choice for a loss that reads several positives at once
    (DCL's ``pos_mean`` over M = V - 1 positives, Chuang et al. Fig. 4c; ``debiased_pos`` grouping):
    each anchor's row holds all its positives and every view of every other sample, so its estimates
    use the whole batch, and every view is an anchor. For the average of two-view losses over the pairs
    of views (negatives from the pair alone) see :func:`pairwise_scores`."""
    views, batch = _check_views("multiview_scores", views, temperature)
    anchors, candidates, offset, global_batch = _view_rows(views, normalize, gather)
    positives, ignored, pos, neg = _multiview_layout(len(views), batch, global_batch, offset, anchors.device)
    anchor_labels, cand_labels = _view_labels(labels, batch, len(views), len(views), gather)
    return _finish(anchors, candidates, pos, neg, temperature, normalize, anchor_labels, cand_labels,
                   positives, ignored, len(views) - 1)


def pairwise_scores(views: Sequence[Tensor] | Tensor, temperature: float, *,
                    labels: Tensor | None = None, normalize: bool = True,
                    gather: bool = False) -> Scores:
    """The SimCLR layout of every pair of V views, stacked: for each pair ``(v, w)``, ``v < w`` in
    order, the 2B anchors ``cat(views[v], views[w])``, each with its other view in the pair as its one
    positive and views v and w of every other sample as its negatives; the other V - 2 views are
    ignored. Candidates are the V·B rows of :func:`multiview_scores`.

    Every row has M = 1 and N = 2B - 2, and every pair holds 2B anchors, so the mean over anchors is
    the mean over pairs of the loss on ``pair_scores(views[v], views[w])``: the "loss combination" of
    Troeshestova & Isachenko's code (intsystems/2023-Project-123, ``code/main.py``, the default
    ``m_agg_mode``), whose extra views never serve as another pair's negatives. For V = 2 it is
    ``pair_scores``. It costs V(V-1)/2·2B anchor rows against V·B candidates (twice the pooled layout's
    rows at V = 3)."""
    views, batch = _check_views("pairwise_scores", views, temperature)
    rows, candidates, offset, global_batch = _view_rows(views, normalize, gather)
    local, positives, ignored, pos, neg = _pairwise_layout(len(views), batch, global_batch, offset, rows.device)
    n_pairs = len(views) * (len(views) - 1) // 2
    anchor_labels, cand_labels = _view_labels(labels, batch, 2 * n_pairs, len(views), gather)
    return _finish(rows.index_select(0, local), candidates, pos, neg, temperature, normalize, anchor_labels,
                   cand_labels, positives, ignored, 1)


def _check_views(name: str, views: Sequence[Tensor] | Tensor, temperature: float) -> tuple[list[Tensor], int]:
    """The views as a list (at least 2, of one shape), and their batch size B."""
    _check_temperature(temperature)
    views = list(views)
    if len(views) < 2:
        raise ValueError(f"{name} needs at least 2 views, got {len(views)}")
    for i, v in enumerate(views):
        _check_embeddings(f"views[{i}]", v, views[0].shape[1])
        if v.shape[0] != views[0].shape[0]:
            raise ValueError(f"views[{i}] has {v.shape[0]} rows, views[0] has {views[0].shape[0]}")
    return views, views[0].shape[0]


def _view_rows(views: list[Tensor], normalize: bool, gather: bool) -> tuple[Tensor, Tensor, int, int]:
    """The V·B local rows (view-major), the candidates (every rank's rows, view-major), the offset of this
    rank's samples among a view's candidates, and the global batch size."""
    rows = _prepare(torch.cat(views), normalize)
    if not gather:
        return rows, rows, 0, views[0].shape[0]
    # Gather per view so the global layout is view-major too.
    gathered = [gather_with_grad(_prepare(v, normalize)) for v in views]
    return rows, torch.cat([g for g, _ in gathered]), gathered[0][1], gathered[0][0].shape[0]


def _view_labels(labels: Tensor | None, batch: int, anchor_repeats: int, n_views: int, gather: bool
                 ) -> tuple[Tensor | None, Tensor | None]:
    """The labels of the anchors (``anchor_repeats`` blocks of the batch) and of the candidates (V blocks of
    every rank's batch)."""
    if labels is None:
        return None, None
    _check_labels(labels, batch)
    anchor_labels = labels.repeat(anchor_repeats)
    if not gather and anchor_repeats == n_views:  # the anchors are the candidates: one copy serves both
        return anchor_labels, anchor_labels
    return anchor_labels, (gather_with_grad(labels)[0] if gather else labels).repeat(n_views)


def kept_tensors() -> contextlib.AbstractContextManager:
    """Where tensors kept for later steps are built: without autograd, and outside inference mode (a later
    step's autograd cannot use an inference tensor). While ``torch.compile`` traces, without autograd only:
    dynamo traces no inference mode, and nothing built in a graph outlives its step."""
    if torch.compiler.is_compiling():
        return torch.no_grad()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode(False))
    stack.enter_context(torch.no_grad())
    return stack


def _per_size(build: Callable[..., T]) -> Callable[..., T]:
    """A layout builder whose tensors depend on the sizes alone, cached per size: the Scores of every step
    share them (read-only: the Scores are frozen), which saves a dozen small kernels a step. They are built as
    :func:`kept_tensors`. While ``torch.compile`` traces, the builder runs inside the graph instead (a graph
    keeps no Python cache): its kernels fuse with the rest."""
    cached = functools.lru_cache(maxsize=4)(build)

    @functools.wraps(build)
    def layout(*sizes: Any) -> T:
        if torch.compiler.is_compiling():
            return build(*sizes)
        with kept_tensors():
            return cached(*sizes)

    return layout


@_per_size
def _multiview_layout(n_views: int, batch: int, global_batch: int, offset: int, device: torch.device
                      ) -> tuple[Entries, Entries, Tensor, Tensor]:
    """Positives, ignored entries and masks of the multiview layout, built once per size (:func:`_per_size`).

    Anchor (view v, sample i) and candidate (view w, global sample j) are views of one sample iff
    j == offset + i: positives for w != v, the anchor itself (ignored) for w == v."""
    rows = torch.arange(n_views * batch, device=device)
    view, sample = rows // batch, rows % batch + offset
    ignored = (rows, view * global_batch + sample)
    other = (view[:, None] + torch.arange(1, n_views, device=device)) % n_views  # [V·B, V-1]
    positives = (rows[:, None].expand_as(other).reshape(-1),
                 (other * global_batch + sample[:, None]).reshape(-1))
    pos, neg = _masks_from((n_views * batch, n_views * global_batch), positives, ignored, device)
    return positives, ignored, pos, neg


@_per_size
def _pairwise_layout(n_views: int, batch: int, global_batch: int, offset: int, device: torch.device
                     ) -> tuple[Tensor, Entries, Entries, Tensor, Tensor]:
    """The local row (in ``cat(views)``) of each anchor, and the positives, ignored entries and masks of the
    pairwise layout, built once per size (:func:`_per_size`) from ``arange`` and fills alone (no copy
    from the host).

    Anchors are pair-major, then side, then sample: the rows of pair ``(v, w)`` are its views v and w. Each
    ignores itself and every candidate of the V - 2 views outside its pair."""
    sample = torch.arange(batch, device=device)
    span = torch.arange(global_batch, device=device)
    local, positive_cols, self_cols, away_rows, away_cols = [], [], [], [], []
    for p, (v, w) in enumerate(itertools.combinations(range(n_views), 2)):  # v < w, in order
        for view, other in ((v, w), (w, v)):
            local.append(view * batch + sample)
            positive_cols.append(other * global_batch + offset + sample)
            self_cols.append(view * global_batch + offset + sample)
        pair_rows = torch.arange(2 * batch * p, 2 * batch * (p + 1), device=device)
        for u in (u for u in range(n_views) if u not in (v, w)):
            away_rows.append(pair_rows[:, None].expand(-1, global_batch).reshape(-1))
            away_cols.append((u * global_batch + span).repeat(2 * batch))
    rows = torch.arange(sum(x.shape[0] for x in local), device=device)
    positives = (rows, torch.cat(positive_cols))
    ignored = (torch.cat([rows, *away_rows]), torch.cat(self_cols + away_cols))
    pos, neg = _masks_from((rows.shape[0], n_views * global_batch), positives, ignored, device)
    return torch.cat(local), positives, ignored, pos, neg


def bank_scores(query: Tensor, key: Tensor, bank: Tensor, temperature: float, *,
                labels: Tensor | None = None, bank_labels: Tensor | None = None,
                normalize: bool = True, gather: bool = False) -> Scores:
    """MoCo / CMC layout: anchors are the B queries; candidates of query i are ``[key_i] + bank``:
    column 0 is its own key (the positive), the K bank entries are negatives. With ``gather=True``
    each rank's bank is taken as a shard and the shards of every rank are concatenated."""
    _check_temperature(temperature)
    _check_embeddings("query", query)
    _check_embeddings("key", key, query.shape[1])
    _check_embeddings("bank", bank, query.shape[1])
    if key.shape[0] != query.shape[0]:
        raise ValueError(f"key must have one row per query, got {key.shape[0]} keys for {query.shape[0]} queries")
    if (labels is None) != (bank_labels is None):
        raise ValueError("labels and bank_labels must be given together")
    q, k = _prepare(query, normalize), _prepare(key, normalize)
    bank, _ = _gather(_prepare(bank, normalize), gather)
    with torch.autocast(device_type=q.device.type, enabled=False):
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ bank.T], dim=1) / temperature
    pos = torch.zeros(logits.shape, dtype=torch.bool, device=q.device)
    pos[:, 0] = True
    anchor_labels = cand_labels = None
    if labels is not None:
        _check_labels(labels, q.shape[0])
        bank_labels = gather_with_grad(bank_labels)[0] if gather else bank_labels
        _check_labels(bank_labels, bank.shape[0], "bank_labels")
        # Column 0 holds a different key on every row (always the positive), so it has no single
        # label: -1 marks it; no loss reads the label of a positive.
        anchor_labels = labels
        cand_labels = torch.cat([labels.new_full((1,), -1), bank_labels])
    bound = 1.0 / temperature if normalize else None
    positives = (torch.arange(q.shape[0], device=q.device), torch.zeros(q.shape[0], dtype=torch.long, device=q.device))
    return Scores(logits, pos, ~pos, -bound if bound is not None else None, bound, anchor_labels, cand_labels,
                  positives, _no_entries(q.device), 1)


def label_scores(z: Tensor, labels: Tensor, temperature: float, *, normalize: bool = True,
                 gather: bool = False) -> Scores:
    """Supervised layout: positives are the other rows with the same label, negatives the rows with
    another label; the labels are kept in the Scores."""
    _check_temperature(temperature)
    _check_embeddings("z", z)
    _check_labels(labels, z.shape[0])
    anchors = _prepare(z, normalize)
    candidates, offset = _gather(anchors, gather)
    cand_labels = gather_with_grad(labels)[0] if gather else labels
    same = labels[:, None] == cand_labels[None, :]
    neg = ~same
    pos = same  # in place: the same label, not the row itself
    rows = torch.arange(z.shape[0], device=z.device)
    pos.view(-1).index_fill_(0, rows * (candidates.shape[0] + 1) + offset, False)
    # The positives depend on the labels (their number too): the losses find them from the mask.
    return _finish(anchors, candidates, pos, neg, temperature, normalize, labels, cand_labels,
                   ignored=(rows, rows + offset))


def membership_scores(anchors: Tensor, candidates: Tensor, member_of: Tensor, temperature: float, *,
                      members: str = "candidates", normalize: bool = True,
                      gather: bool = False) -> Scores:
    """Membership layout (InfoGraph). With ``members="candidates"`` (``member_of`` has one entry
    per candidate) anchor ``a`` is positive with candidate ``k`` iff ``member_of[k] == a``: a graph
    and its own nodes. With ``members="anchors"`` (one entry per anchor) iff ``member_of[a] == k``:
    a node and its own graph. Every other pair is a negative."""
    _check_temperature(temperature)
    _check_embeddings("anchors", anchors)
    _check_embeddings("candidates", candidates, anchors.shape[1])
    if members not in ("candidates", "anchors"):
        raise ValueError(f"members must be 'candidates' or 'anchors', got {members!r}")
    owners, owned = (anchors, candidates) if members == "candidates" else (candidates, anchors)
    if member_of.dim() != 1 or member_of.shape[0] != owned.shape[0]:
        raise ValueError(f"member_of must have one entry per {members[:-1]} ({owned.shape[0]}), "
                         f"got shape {tuple(member_of.shape)}")
    require(((member_of >= 0) & (member_of < owners.shape[0])).all(),
            f"member_of values must lie in [0, {owners.shape[0]})")
    a = _prepare(anchors, normalize)
    c, offset = _gather(_prepare(candidates, normalize), gather)
    device = a.device
    member_of_local = member_of = member_of.long()
    if members == "candidates":
        if gather:
            # Another rank's nodes belong to another rank's graphs: mark them with an owner id that
            # matches no local anchor.
            all_member_of = gather_with_grad(member_of)[0]
            local = torch.zeros(c.shape[0], dtype=torch.bool, device=device)
            local[offset:offset + member_of.shape[0]] = True
            member_of = torch.where(local, all_member_of, torch.full_like(all_member_of, -1))
        pos = torch.arange(a.shape[0], device=device)[:, None] == member_of[None, :]
        positives = (member_of_local, offset + torch.arange(member_of_local.shape[0], device=device))
    else:
        pos = (member_of + offset)[:, None] == torch.arange(c.shape[0], device=device)[None, :]
        positives = (torch.arange(a.shape[0], device=device), member_of + offset)
    return _finish(a, c, pos, ~pos, temperature, normalize, positives=positives, ignored=_no_entries(device),
                   positives_per_anchor=1 if members == "anchors" else None)


def class_scores(logits: Tensor, labels: Tensor) -> Scores:
    """Classifier layout: a classifier's logits ``[B, C]`` of B samples (anchors) against the C classes
    (candidates), as they are (temperature 1, no bound). The positive of sample i is its class ``labels[i]``, every
    other class a negative; the candidates' labels are the classes. ``ce`` on it is the cross-entropy."""
    if not isinstance(logits, Tensor) or logits.dim() != 2:
        raise ValueError(f"logits must be a 2-D tensor [B, C], got {_shape(logits)}")
    _check_labels(labels, logits.shape[0])
    n_classes, device = logits.shape[1], logits.device
    require(((labels >= 0) & (labels < n_classes)).all(), f"labels must lie in [0, {n_classes}): one per class")
    labels = labels.long()
    positives = (torch.arange(logits.shape[0], device=device), labels)
    ignored = _no_entries(device)
    pos, neg = _masks_from(tuple(logits.shape), positives, ignored, device)
    return Scores(logits, pos, neg, anchor_labels=labels, candidate_labels=torch.arange(n_classes, device=device),
                  positives=positives, ignored=ignored, positives_per_anchor=1)


def _check_labels(labels: Tensor, size: int, name: str = "labels") -> None:
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.shape[0] != size:
        raise ValueError(f"{name} must be a 1-D tensor of {size} class ids, got {_shape(labels)}")
    if labels.is_floating_point():
        raise ValueError(f"{name} must hold integer class ids, got {labels.dtype}")
