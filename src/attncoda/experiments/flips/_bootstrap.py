"""The bootstrap of flip rates over documents: resample the documents, reweight their
distance sums, recount every triplet (docs/design.md, "The experiments").
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import check_n_boot, flip_rate, resample_weights
from attncoda.experiments.flips._count import count_rows, off_diagonal

if TYPE_CHECKING:
    from attncoda.experiments.flips._sums import DocumentSums

__all__ = ["bootstrap_rates", "check_n_boot", "check_threads", "resample_weights"]

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


def bootstrap_rates(
    keep: DocumentSums,
    drop: DocumentSums,
    weights: np.ndarray,
    tol: float,
    n_triplets: int,
    threads: int,
) -> np.ndarray:
    """Flip rate of each resample, shape (n_boot,): ``D`` reweighted, every triplet recounted.

    ``D_r = sum_d w_rd S_d / sum_d w_rd n_d`` is formed on the upper triangle only (one
    matrix product per block of resamples), then gathered into the rows of each ``A``.
    Resamples that drew the same documents as often (few documents: 4 give only 35
    distinct draws) have the same ``D``, so each distinct draw is counted once.
    """
    distinct, inverse = np.unique(weights, axis=0, return_inverse=True)
    if distinct.shape[0] < weights.shape[0]:
        rates = bootstrap_rates(keep, drop, distinct, tol, n_triplets, threads)
        return rates[inverse.reshape(-1)]
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

    def block(r0: int) -> tuple[int, np.ndarray, np.ndarray]:
        w = scaled[r0 : r0 + step]
        dk, dd = w @ sk, w @ sd  # (resample, pair)
        tk = np.repeat(tol * np.abs(dk).max(axis=1), n)
        td = np.repeat(tol * np.abs(dd).max(axis=1), n)
        x = np.take(dk, rows_of_a, axis=1).reshape(-1, n - 1)  # np.take: 9x fancy indexing
        y = np.take(dd, rows_of_a, axis=1).reshape(-1, n - 1)
        f, t = count_rows(x, y, tk, td)
        return r0, f.reshape(-1, n).sum(axis=1), t.reshape(-1, n).sum(axis=1)

    flips_ = np.zeros(n_boot, dtype=np.int64)
    ties = np.zeros(n_boot, dtype=np.int64)
    starts = range(0, n_boot, step)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for r0, f, t in pool.map(block, starts) if threads > 1 else map(block, starts):
            flips_[r0 : r0 + len(f)] = f
            ties[r0 : r0 + len(t)] = t
    return flip_rate(flips_, n_triplets - ties).astype(np.float64)
