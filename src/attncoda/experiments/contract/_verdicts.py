"""What every count of keep / drop verdicts shares (flips, the safety map): the metrics
compared, the relative tie tolerance, and the flip rate (docs/design.md, "The experiments").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda.metrics import CLASSIC_METRICS, CONVENTIONS

__all__ = [
    "CONVENTIONS",
    "DEFAULT_TOL",
    "FLIP_METRICS",
    "check_metrics",
    "check_tol",
    "flip_rate",
    "flip_rate_interval",
]

#: The metrics a flip compares: the classic ones, each with a keep and a drop convention.
FLIP_METRICS = CLASSIC_METRICS
#: The relative tie tolerance of float64 head distances (rounding-level equalities only).
DEFAULT_TOL = 1e-9
#: The confidence level of the interval of a flip rate.
CI_LEVEL = 0.95


def flip_rate(flips: int | np.ndarray, decided: int | np.ndarray) -> Any:
    """``flips / decided``, NaN where nothing is decided (a float, or an array of them)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(decided > 0, np.divide(flips, np.maximum(decided, 1)), np.nan)[()]


def check_metrics(metrics: Any) -> tuple[str, ...]:
    """``metrics`` as a tuple of distinct names of :data:`FLIP_METRICS`; an error names the
    first one that is not."""
    if isinstance(metrics, str) or not isinstance(metrics, Sequence) or not metrics:
        raise AttncodaError(
            f"metrics must be a non-empty sequence of metric names; got {metrics!r}"
        )
    for m in metrics:
        if m not in FLIP_METRICS:
            raise AttncodaError(
                f"flips compares the keep and drop conventions of a classic metric; got "
                f"{m!r}: use one of {', '.join(FLIP_METRICS)}"
            )
    if len(set(metrics)) != len(metrics):
        raise AttncodaError(f"metrics must be distinct; got {list(metrics)}")
    return tuple(metrics)


def check_tol(tol: Any) -> float:
    """A relative tie tolerance (a finite float ``>= 0``, relative to ``max|D|``)."""
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)):
        raise AttncodaError(f"tol must be a non-negative float (relative to max|D|); got {tol!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise AttncodaError(f"tol must be a non-negative float (relative to max|D|); got {tol!r}")
    return float(tol)


def flip_rate_interval(flips: int, decided: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a flip rate ``flips / decided``.

    Parameters
    ----------
    flips, decided : int
        Flipped and decided (non-tied) triplets, ``0 <= flips <= decided``.
    level : float
        Confidence level (default 0.95).

    Returns
    -------
    (float, float)
        The interval; ``(0.0, 1.0)`` when nothing is decided.

    Examples
    --------
    >>> low, high = flip_rate_interval(0, 100)
    >>> low, round(high, 4)
    (0.0, 0.0362)
    """
    from scipy.stats import beta

    flips, decided = int(flips), int(decided)
    if not 0 <= flips <= decided:
        raise AttncodaError(f"need 0 <= flips <= decided; got flips={flips}, decided={decided}")
    if decided == 0:
        return 0.0, 1.0
    alpha = 1.0 - level
    low = 0.0 if flips == 0 else float(beta.ppf(alpha / 2, flips, decided - flips + 1))
    high = 1.0 if flips == decided else float(beta.ppf(1 - alpha / 2, flips + 1, decided - flips))
    return low, high
