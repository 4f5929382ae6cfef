"""What every interval in a table shares: the fewest observations a bootstrap interval is
drawn from, the names of the methods, and the note that stands where there is no interval
(docs/design.md, "Intervals").

An interval names its method and its n; with too few observations for one, there is none:
its bounds are NaN and a note says why, never a zero-width interval.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError

__all__ = [
    "BOOTSTRAP_DOCUMENTS",
    "BOOTSTRAP_WINDOWS",
    "CLOPPER_PEARSON",
    "MIN_BOOTSTRAP_N",
    "check_n_boot",
    "no_interval_note",
    "percentile_interval",
    "resample_weights",
]

#: The fewest independent observations (documents, evaluation windows) a bootstrap interval
#: is drawn from (docs/design.md, "Intervals"): ``n`` observations give only
#: ``C(2n - 1, n)`` distinct resamples (4 give 35), and the percentile interval of a handful
#: of them is not a 95% interval.
MIN_BOOTSTRAP_N = 10

#: The method of the flip-rate interval of flips (its n: ``n_docs``, ``n_boot``).
BOOTSTRAP_DOCUMENTS = "percentile bootstrap over documents"
#: The method of the perplexity-ratio interval of prune (its n: ``n_windows``, ``n_boot``).
BOOTSTRAP_WINDOWS = "paired percentile bootstrap over windows"
#: The method of the flip-rate interval of a safety bin (its n: ``n_decided``).
CLOPPER_PEARSON = "Clopper-Pearson over triplets"


def check_n_boot(n_boot: Any, over: str = "documents") -> int:
    """``n_boot`` as a positive int (bootstrap resamples over ``over``)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise AttncodaError(
            f"n_boot must be a positive int (bootstrap resamples over {over}); got {n_boot!r}"
        )
    return int(n_boot)


def no_interval_note(n: int, unit: str) -> str:
    """Why a bootstrap over ``n`` observations gives no interval, or ``""`` when it gives one.

    Parameters
    ----------
    n : int
        The observations resampled (documents, windows).
    unit : str
        Their name in the plural (``"documents"``).

    Returns
    -------
    str
        ``"no interval: 4 documents, fewer than 10"`` below :data:`MIN_BOOTSTRAP_N`, else
        ``""``.

    Examples
    --------
    >>> no_interval_note(4, "documents")
    'no interval: 4 documents, fewer than 10'
    >>> no_interval_note(16, "windows")
    ''
    """
    if n >= MIN_BOOTSTRAP_N:
        return ""
    return f"no interval: {n} {unit}, fewer than {MIN_BOOTSTRAP_N}"


def resample_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """How often each of ``n`` observations is drawn in each bootstrap resample.

    Resample ``r`` draws ``n`` indices with replacement,
    ``numpy.random.default_rng(seed).integers(0, n, size=(n_boot, n))[r]``, and counts them.

    Returns
    -------
    ndarray of float64, shape (n_boot, n)
        Counts; each row sums to ``n``.
    """
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n, size=(n_boot, n))
    offsets = (np.arange(n_boot) * n)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=n_boot * n)
    return counts.reshape(n_boot, n).astype(np.float64)


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The central percentile interval of the finite bootstrap ``values``, shape (n_boot,).

    ``(nan, nan)`` when no value is finite. The bounds are ``numpy.percentile``'s (linear
    interpolation) at ``(1 - level) / 2`` and ``(1 + level) / 2``.
    """
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return math.nan, math.nan
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)
