"""What a loss needs of a layout given by the constructors' index lists (:class:`Layout`), built once per layout
and kept in a small cache (:func:`layout_of`), so that a step of the same size finds it built."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import Tensor

from losses._masks import Mask, per_row
from losses.scores import Scores, kept_tensors

T = TypeVar("T")


@dataclass(frozen=True)
class Layout:
    """What a loss needs of a layout given by the constructors' index lists, built once per layout: the
    masks of the negatives and of every kept entry, the positives' flat indices, the counts, and the
    constants the losses derive from them (:meth:`losses._core.Prepared.constant`)."""

    pins: tuple[Tensor, ...]  # the index tensors of the key: held, so that no other tensor takes their id
    neg: Mask
    kept: Mask
    pos_flat: Tensor
    n_pos: Tensor
    n_neg: Tensor
    constants: dict[str, Any] = field(default_factory=dict)

    def constant(self, name: str, make: Callable[[], T]) -> T:
        """``make()``, which must depend on this layout alone (``name`` says what it is), computed once."""
        if name not in self.constants:
            with kept_tensors():
                self.constants[name] = make()
        return self.constants[name]


_LAYOUTS: OrderedDict[tuple, Layout] = OrderedDict()
_MAX_LAYOUTS = 8  # a run uses one or two layouts (training, evaluation); the last batch of an epoch may add one


def layout_of(scores: Scores) -> Layout | None:
    """The :class:`Layout` of Scores whose positives and ignored entries are index lists (the constructors'),
    from a small cache keyed by those tensors' identity and version (a change in place is a new layout);
    None for masks alone. The constructors share the same index tensors between the steps of one size, so
    a step finds its layout built; index lists made afresh each step only cost the building."""
    if scores.positives is None or scores.ignored is None:
        return None
    tensors = (*scores.positives, *scores.ignored)
    # Built each call: while torch.compile traces (the layout is built in the graph and its kernels fuse with
    # the loss's), and for inference tensors (no version counter to key on).
    if torch.compiler.is_compiling() or any(t.is_inference() for t in tensors):
        return _build_layout(scores, tensors)
    key = (tuple(scores.logits.shape), *((id(t), t._version) for t in tensors))
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = _build_layout(scores, tensors)
        if len(_LAYOUTS) > _MAX_LAYOUTS:
            _LAYOUTS.popitem(last=False)
    else:
        _LAYOUTS.move_to_end(key)
    return layout


def _build_layout(scores: Scores, tensors: tuple[Tensor, ...]) -> Layout:
    shape = tuple(scores.logits.shape)
    anchor, cand = scores.positives
    with kept_tensors():
        neg = Mask.excluding(shape, scores.positives, scores.ignored)
        return Layout(pins=tensors, neg=neg, kept=Mask.excluding(shape, scores.ignored),
                      pos_flat=anchor * shape[1] + cand, n_pos=per_row(anchor, shape[0]), n_neg=neg.count())
