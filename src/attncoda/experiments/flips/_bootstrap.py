"""The bootstrap of flip rates over documents: resample the documents, reweight their
distance sums, recount every triplet (docs/design.md, "The experiments").
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    check_n_boot,
    flip_rate,
    percentile_interval,
    resample_weights,
)
from attncoda.experiments.flips._count import count_rows, off_diagonal
from attncoda.experiments.flips._sums import distance_rounding

if TYPE_CHECKING:
    from attncoda.experiments.flips._sums import DocumentSums

__all__ = [
    "bootstrap_rates",
    "check_n_boot",
    "check_threads",
    "interval_rounding",
    "rate_rounding",
    "resample_weights",
]

_BOOT_ELEMS = 1 << 22  # resampled distance entries per bootstrap block


def check_threads(n_threads: Any) -> int:
    """Threads for the bootstrap: ``n_threads``, or by default the CPUs available (at most 8)."""
    if n_threads is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
        return max(1, min(8, cpus))
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise AttncodaError(f"n_threads must be a positive int; got {n_threads!r}")
    return n_threads


def rate_rounding(fragile: Any, decided: Any) -> np.ndarray:
    """How far a flip rate ``flips / decided`` can move when ``fragile`` triplets change
    between tie and decided (or change verdict): ``k / (N - k)``, 1 where ``k >= N``.

    Each such triplet moves the numerator by at most 1 and the denominator by 1, so
    ``|(F + a) / (N + b) - F / N| = |a N - b F| / (N (N + b)) <= k N / (N (N - k))``.
    """
    k = np.asarray(fragile, dtype=np.float64)
    n = np.asarray(decided, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(n > k, k / np.maximum(n - k, 1.0), 1.0)
    return np.where(k == 0, 0.0, out)


def bootstrap_rates(
    keep: DocumentSums,
    drop: DocumentSums,
    weights: np.ndarray,
    tol: float,
    n_triplets: int,
    threads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Flip rate of each resample and its rounding, each shape (n_boot,): ``D`` reweighted,
    every triplet recounted.

    ``D_r = sum_d w_rd S_d / sum_d w_rd n_d`` is formed on the upper triangle only (one
    matrix product per block of resamples), then gathered into the rows of each ``A``.
    The mean row entropies are reweighted alike, and give each ``D_r``'s rounding
    (:func:`~attncoda.experiments.flips._sums.distance_rounding`); a resample's rate moves by
    at most :func:`rate_rounding` of its fragile triplets. Resamples that drew the same
    documents as often (few documents: 4 give only 35 distinct draws) have the same ``D``,
    so each distinct draw is counted once.
    """
    distinct, inverse = np.unique(weights, axis=0, return_inverse=True)
    if distinct.shape[0] < weights.shape[0]:
        rates, rounding = bootstrap_rates(keep, drop, distinct, tol, n_triplets, threads)
        return rates[inverse.reshape(-1)], rounding[inverse.reshape(-1)]
    n_boot = weights.shape[0]
    n = keep.sums.shape[1]
    iu, ju = np.triu_indices(n, 1)
    sk = keep.sums[:, iu, ju]  # (document, pair)
    sd = drop.sums[:, iu, ju]
    pair = np.zeros((n, n), dtype=np.intp)
    pair[iu, ju] = pair[ju, iu] = np.arange(iu.size)
    rows_of_a = off_diagonal(pair[None])  # (head, head - 1): pair index of (A, other)
    scaled = weights / (weights @ keep.counts.astype(np.float64))[:, None]
    step = max(1, _BOOT_ELEMS // (n * n))

    def gathered(sums: DocumentSums, d: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, ...]:
        """Rows of ``A`` of a block's distances (resample, pair), their tolerances and their
        fragile bands: ``2 e_A + tol e_max`` with ``e_A`` a bound of the rounding of every
        entry of row ``A`` (its largest distance with the largest entropy of another head)."""
        h = w @ sums.entropies  # (resample, head): mean row entropies
        top = np.abs(d).max(axis=1)
        x = np.take(d, rows_of_a, axis=1).reshape(-1, n - 1)  # np.take: 9x fancy indexing
        other = np.sort(h, axis=1)  # the largest entropy of a head other than A
        h_other = np.where(h == other[:, -1:], other[:, -2:-1], other[:, -1:]).reshape(-1)
        e_row = distance_rounding(np.abs(x).max(axis=1), h.reshape(-1) + h_other, sums)
        e_max = distance_rounding(top, 2 * other[:, -1], sums)
        return x, np.repeat(tol * top, n), 2 * e_row + np.repeat(tol * e_max, n)

    def block(r0: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        w = scaled[r0 : r0 + step]
        x, tk, bk = gathered(keep, w @ sk, w)
        y, td, bd = gathered(drop, w @ sd, w)
        f, t, k = count_rows(x, y, tk, td, bk, bd)
        return r0, *(v.reshape(-1, n).sum(axis=1) for v in (f, t, k))

    flips_ = np.zeros(n_boot, dtype=np.int64)
    ties = np.zeros(n_boot, dtype=np.int64)
    fragile = np.zeros(n_boot, dtype=np.int64)
    starts = range(0, n_boot, step)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for r0, f, t, k in pool.map(block, starts) if threads > 1 else map(block, starts):
            flips_[r0 : r0 + len(f)] = f
            ties[r0 : r0 + len(t)] = t
            fragile[r0 : r0 + len(k)] = k
    rates = flip_rate(flips_, n_triplets - ties).astype(np.float64)
    return rates, rate_rounding(fragile, n_triplets - ties)


def interval_rounding(rates: np.ndarray, moved: np.ndarray, interval: tuple[float, float]) -> float:
    """How far either end of the percentile interval can move when each resample's rate
    moves by up to its ``moved`` (within [0, 1]): a percentile is monotone in every value,
    so each end lies between the ends of the rates moved all down and all up. NaN without
    an interval."""
    if not all(math.isfinite(end) for end in interval):
        return math.nan
    down = percentile_interval(np.clip(rates - moved, 0.0, 1.0))
    up = percentile_interval(np.clip(rates + moved, 0.0, 1.0))
    return float(max(max(e - d, u - e) for e, d, u in zip(interval, down, up, strict=True)))
