"""The types of the extras a training loop reads back from its checkpoint, declared as a :class:`CheckpointExtras`
and checked when the checkpoint is read (``RunContext.restore_checkpoint``, ``RunContext.saved_extras``): a value
of another type (a tampered or damaged file) is then the clean "cannot be read" error, not a traceback or a wrong
record where the loop uses it."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads typing's TypedDict only from Python 3.12


class CheckpointExtras(TypedDict):
    """Subclassed by a training loop, one key for each extra it reads, with that extra's type: ``NotRequired[...]``
    for one an older checkpoint may lack, a nested TypedDict for a dict with fixed keys. Extras it does not declare
    are not checked. Strict: nothing is converted (a "3" is no int, a bool no int, an int is a float); a class such
    as ``Tensor`` is checked by ``isinstance``."""

    __pydantic_config__ = ConfigDict(strict=True, arbitrary_types_allowed=True)


class SameClassCounts(TypedDict):
    """What ``losses.prior.SameClassShare.state_dict`` saves (graph and vision checkpoint it): the same-class
    negatives and all the negatives counted."""

    same: int
    negatives: int


@functools.cache
def _validator(declared: type[CheckpointExtras]) -> TypeAdapter:
    return TypeAdapter(declared)


def mistyped(extra: dict[str, Any], declared: type[CheckpointExtras]) -> str | None:
    """What in ``extra`` is not of the type ``declared`` gives it (the first such value), or None."""
    try:
        _validator(declared).validate_python(extra)
    except ValidationError as exc:
        error = exc.errors()[0]
        name, *within = error["loc"]
        where = f"{name}{''.join(f'[{key!r}]' for key in within)}"
        if error["type"] == "missing":
            return f"its {where} is missing"
        expected = error["msg"][:1].lower() + error["msg"][1:]  # "Input should be ...", inside a sentence
        return f"its {where} has the wrong type ({expected}, got {type(error['input']).__name__})"
    return None
