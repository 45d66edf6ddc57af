"""How the harness prints a metric: one decimal rule for the pages, the regression gate and a run's own lines
(``harness run``'s seeds and summary, a sweep's jobs). A leaf module, standard library only: ``harness/run``
imports it, so it is part of the code a run's identity hashes (:mod:`harness.run_code`), and nothing of the pages
may come in with it."""

from __future__ import annotations

import math
import statistics


def fmt(value: float, digits: int | None = None) -> str:
    """A metric for tables: 2 decimals from 1 to 1000, 1 above, 4 below 1."""
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.{decimals(value) if digits is None else digits}f}"


def decimals(value: float) -> int:
    magnitude = abs(value)
    return 1 if magnitude >= 1000 else 2 if magnitude >= 1 else 4


def mean_std(mean: float, std: float) -> str:
    """``mean ± std``, both to the mean's decimals (:func:`decimals`): the std is read against the mean, so it
    stops at the same place (``87.00 ± 0.35``, not ``87 ± 0.3515``). An std that is not finite is ``–``."""
    digits = decimals(mean)
    return f"{fmt(mean, digits)} ± {fmt(std, digits)}"


def spread(values: list[float]) -> str:
    """:func:`mean_std` of ``values`` (mean and std as a :class:`harness.groups.Group` takes them), one value alone as
    :func:`fmt` prints it, none ``–``: for numbers that are no group's (a run's seeds, the prior page's estimates)."""
    if len(values) < 2:
        return fmt(values[0]) if values else "–"
    return mean_std(statistics.fmean(values), statistics.stdev(values))
