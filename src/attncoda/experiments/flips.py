"""Flips: how often the keep / drop convention reverses "which head is closer"
(docs/design.md, "The experiments").

For heads ``A, B, C`` the triplet verdict is ``v(A; B, C) = sign(D(A, C) - D(A, B))``, with ``D``
the head distance of docs/design.md, "Conventions and the head distance" (the mean row metric over
every recorded query row with every sink key present and at least two content keys, pooled over
documents). A *flip* is a triplet whose verdict under ``convention="keep"`` is the opposite of its
verdict under ``convention="drop"``, both decided. A triplet is a *tie* when ``|D(A, C) - D(A, B)|``
is within the tie tolerance under either convention; ties are counted apart and never as flips.

Counting is exact and covers every triplet (``N * C(N-1, 2)`` for ``N`` heads). For a fixed
``A`` the flips are the discordant pairs between the keep and the drop ranking of the other
heads (Kendall), so rows of ``A`` without near-ties are counted as the inversions of a
permutation in ``O(N log^2 N)`` vectorised work (a bottom-up merge count in which every merge
is one SIMD sort of 16-bit keys). The few pairs within the tie tolerance are then listed
from the sorted rows and taken out, so near-ties cost time in proportion to their number.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.coda import head_distances
from attncoda.experiments.contract import Experiment, Inputs, Tables, without_run_columns
from attncoda.experiments.inputs import DocRows, HeadRows

__all__ = [
    "CAPTURE_TOL",
    "CONVENTIONS",
    "DocumentSums",
    "EXPERIMENT",
    "FLIP_METRICS",
    "FlipsResult",
    "Settings",
    "TripletFlips",
    "document_sums",
    "flips",
    "tie_tolerance",
    "triplet_flips",
    "used_rows",
]

FLIP_METRICS = ("cosine", "jsd", "entropy_gap", "hellinger", "tv")
CONVENTIONS = ("keep", "drop")
DEFAULT_TOL = 1e-9

TABLE_COLUMNS = (
    "model",
    "metric",
    "n_heads",
    "n_triplets",
    "n_ties",
    "flips",
    "flip_rate",
    "ci_low",
    "ci_high",
)
BY_LAYER_COLUMNS = ("model", "metric", "layer", "n_triplets", "n_ties", "flips", "flip_rate")

_CHUNK_ELEMS = 1 << 16  # int16 keys per inversion-count block: stays in the L2 cache
_BOOT_ELEMS = 1 << 22  # resampled distance entries per bootstrap block


# --------------------------------------------------------------------------------------------
# Exact triplet counting


@dataclass(frozen=True)
class TripletFlips:
    """Exact flip and tie counts of every triplet ``(A; B, C)``, broken down by head ``A``.

    Attributes
    ----------
    n_triplets : int
        Triplets per head ``A``: ``C(N-1, 2)`` unordered pairs ``{B, C}`` of the other heads.
    ties : ndarray of int64, shape (head,)
        Triplets of each ``A`` within the tie tolerance under keep or under drop.
    flips : ndarray of int64, shape (head,)
        Decided triplets of each ``A`` whose keep and drop verdicts disagree.
    """

    n_triplets: int
    ties: np.ndarray
    flips: np.ndarray


def tie_tolerance(distances: np.ndarray, tol: float) -> np.ndarray:
    """Absolute tie tolerance ``tol * max|D|`` of each matrix, shape ``distances.shape[:-2]``."""
    scale = np.abs(distances).max(axis=(-2, -1))
    return tol * scale


def triplet_flips(d_keep: Any, d_drop: Any, *, tol: float = DEFAULT_TOL) -> TripletFlips:
    r"""Count flips between two head-distance matrices over every triplet, exactly.

    For every head ``A`` and every unordered pair ``{B, C}`` of other heads, the verdict under
    a matrix ``D`` is ``sign(D[A, C] - D[A, B])``. The triplet is a tie when
    ``|D[A, C] - D[A, B]| <= tol * max|D|`` for ``D = d_keep`` or for ``D = d_drop`` (each
    convention against its own scale); otherwise it is a flip when the two signs differ.

    Parameters
    ----------
    d_keep, d_drop : array_like, shape (head, head)
        Head distances under ``convention="keep"`` and ``convention="drop"`` (any metric);
        only the off-diagonal entries of row ``A`` enter the verdicts of ``A``.
    tol : float
        Relative tie tolerance (``>= 0``); the absolute tolerance of a matrix is
        ``tol * max|D|``.

    Returns
    -------
    TripletFlips
        Per-``A`` tie and flip counts.

    Examples
    --------
    >>> import numpy as np
    >>> keep = np.array([[0, 1, 2], [1, 0, 3], [2, 3, 0]], dtype=float)
    >>> drop = np.array([[0, 2, 1], [2, 0, 3], [1, 3, 0]], dtype=float)
    >>> triplet_flips(keep, drop).flips.tolist()
    [1, 0, 0]
    """
    d_keep = _square(d_keep, "d_keep")
    d_drop = _square(d_drop, "d_drop")
    if d_keep.shape != d_drop.shape:
        raise AttncodaError(
            f"d_keep and d_drop must have the same shape; got {d_keep.shape} and {d_drop.shape}"
        )
    n = d_keep.shape[0]
    if n < 3:
        raise AttncodaError(f"a triplet needs at least 3 heads; the matrices have {n}")
    tol = _check_tol(tol)
    x, y = _off_diagonal(d_keep[None]), _off_diagonal(d_drop[None])
    tx = np.repeat(tie_tolerance(d_keep[None], tol), n)
    ty = np.repeat(tie_tolerance(d_drop[None], tol), n)
    flips, ties = _count_rows(x, y, tx, ty)
    return TripletFlips(n_triplets=math.comb(n - 1, 2), ties=ties, flips=flips)


def _square(d: Any, name: str) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise AttncodaError(f"{name} must be a square (head, head) matrix; got shape {d.shape}")
    if not np.isfinite(d).all():
        raise AttncodaError(f"{name} has a non-finite entry at index {_first(~np.isfinite(d))}")
    return d


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _check_tol(tol: Any) -> float:
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)):
        raise AttncodaError(f"tol must be a non-negative float (relative to max|D|); got {tol!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise AttncodaError(f"tol must be a non-negative float (relative to max|D|); got {tol!r}")
    return float(tol)


def _off_diagonal(d: np.ndarray) -> np.ndarray:
    """Rows of ``d`` (shape (batch, head, head)) without their diagonal: (batch*head, head-1)."""
    b, n, _ = d.shape
    # Row-major, the off-diagonal entries are the flat matrix minus its first entry, cut
    # into rows of n + 1 whose last entry is the next diagonal one.
    flat = np.ascontiguousarray(d).reshape(b, n * n)[:, 1:]
    return flat.reshape(b, n - 1, n + 1)[:, :, :n].reshape(b * n, n - 1)


def _count_rows(
    x: np.ndarray, y: np.ndarray, tx: np.ndarray, ty: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Discordant decided pairs and tied pairs of each row pair ``(x[i], y[i])``.

    ``x, y`` have shape (rows, n); ``tx, ty`` shape (rows,) are absolute tolerances. Returns
    ``(flips, ties)``, int64 of shape (rows,). Works in cache-sized blocks of rows.
    """
    rows, n = x.shape
    flips = np.zeros(rows, dtype=np.int64)
    ties = np.zeros(rows, dtype=np.int64)
    if n < 2:
        return flips, ties
    step = max(1, _CHUNK_ELEMS // n)
    for r0 in range(0, rows, step):
        sl = slice(r0, r0 + step)
        flips[sl], ties[sl] = _count_block(x[sl], y[sl], tx[sl], ty[sl])
    return flips, ties


def _count_block(
    x: np.ndarray, y: np.ndarray, tx: np.ndarray, ty: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Flips and ties of a block of rows: inversions of every pair, minus the tied pairs.

    Every pair ``B < C`` is discordant when ``(x_C > x_B) != (y_C > y_B)``. Ordering each row
    by value, equal values by falling head index, makes "C ranks above B" mean exactly
    ``x_C > x_B`` (so exact duplicates count as that predicate does), and the discordant pairs
    are the inversions of the drop ranks read in keep order. The tied pairs (within the
    tolerance under keep or under drop) are few; they are listed from the sorted rows and
    their discordant ones subtracted, which leaves the decided flips of the definition.
    """
    rows, n = x.shape
    (ox, xs), (oy, ys) = _order(x), _order(y)
    rank_y = np.empty_like(oy)
    np.put_along_axis(rank_y, oy, np.arange(n)[None, :], axis=1)
    # pi[i] = drop rank of the head holding keep rank i: its inversions are the discordances.
    discordant = _inversions(np.take_along_axis(rank_y, ox, axis=1))
    r, a, b = _tied_pairs(xs, ox, tx, ys, oy, ty)
    if r.size == 0:
        return discordant, np.zeros(rows, dtype=np.int64)
    dx = x[r, b] - x[r, a]
    dy = y[r, b] - y[r, a]
    tied_discordant = np.bincount(r[(dx > 0) != (dy > 0)], minlength=rows)
    return discordant - tied_discordant, np.bincount(r, minlength=rows).astype(np.int64)


def _order(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Argsort of each row ascending, equal values ordered by falling index; and the sorted rows.

    The default (SIMD) argsort is not stable; rows holding an exact duplicate, which are
    rare, are sorted again stably.
    """
    n = v.shape[1]
    order = np.argsort(v, axis=1)
    vs = np.take_along_axis(v, order, axis=1)
    dup = np.flatnonzero((vs[:, 1:] == vs[:, :-1]).any(axis=1))
    if dup.size:
        order[dup] = (n - 1) - np.argsort(v[dup, ::-1], axis=1, kind="stable")
        vs[dup] = np.take_along_axis(v[dup], order[dup], axis=1)
    return order, vs


def _tied_pairs(
    xs: np.ndarray, ox: np.ndarray, tx: np.ndarray, ys: np.ndarray, oy: np.ndarray, ty: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair within tolerance under ``x`` or ``y``, once: ``(row, a, b)`` with ``a < b``.

    ``xs, ys`` are the sorted rows and ``ox, oy`` their orders (:func:`_order`).

    In a sorted row the entries within ``t`` of an entry follow it, and rounded subtraction
    is monotone (``c >= b >= a`` gives ``fl(c - a) >= fl(b - a)``), so the pairs at sorted
    distance ``k`` are scanned for ``k = 1, 2, ...`` until none is within tolerance.
    """
    rows, n = xs.shape
    codes = []
    for vs, order, t in ((xs, ox, tx), (ys, oy, ty)):
        for k in range(1, n):
            hit = (vs[:, k:] - vs[:, :-k]) <= t[:, None]
            if not hit.any():
                break
            r, i = np.nonzero(hit)
            h0, h1 = order[r, i], order[r, i + k]
            lo, hi = np.minimum(h0, h1), np.maximum(h0, h1)
            codes.append((r.astype(np.int64) * n + lo) * n + hi)
    if not codes:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    code = np.unique(np.concatenate(codes))
    return code // (n * n), (code // n) % n, code % n


_Level = tuple[int, int, np.ndarray, np.ndarray, int]


@functools.lru_cache(maxsize=16)
def _merge_levels(n: int) -> tuple[int, type, list[_Level]]:
    """The levels of a bottom-up merge count of inversions in rows of ``n`` entries.

    Level ``h`` merges blocks ``[L | R]`` of ``h + h`` entries. Its keys are
    ``block << vb | value << 1 | (entry in R)``, sorted in segments of ``S`` entries (up to
    ``2**room`` blocks), so one sort orders every block of the level. After the sort, an
    entry ``b`` of ``R`` at position ``p`` within its block has
    ``#{a in L: a > b} = h - p + rank_R(b)``; summed over a block,
    ``h*h + h*(h-1)/2 - sum p``. Rows are padded (per level, to a whole number of segments)
    with the values ``n, n+1, ...``: larger than every entry and increasing, they add no
    inversion. Each level is ``(width, S, pattern, weights, constant)`` with
    ``constant - flags @ weights`` its inversions.
    """
    top = 1 << max(1, (n - 1).bit_length())  # the last level merges two halves of this
    vb = top.bit_length()  # bits of (value << 1 | flag) for values < top
    dtype: type = np.int16 if vb <= 12 else np.int32
    cap = 1 << ((15 if dtype is np.int16 else 31) - vb)
    levels: list[_Level] = []
    h = 1
    while h < top:
        blocks = -(-n // (2 * h))
        nb = -(-blocks // -(-blocks // cap))  # blocks per segment, spread evenly, <= cap
        seg = nb * 2 * h
        width = -(-n // seg) * seg
        j = np.arange(width) % seg
        pattern: np.ndarray = (((j // (2 * h)) << vb) | ((j % (2 * h)) >= h)).astype(dtype)
        # Block k of a segment starts at 2hk: positions within it are p - 2hk.
        const = (nb * (h * h + h * (h - 1) // 2) + h * h * nb * (nb - 1)) * (width // seg)
        levels.append((width, seg, pattern, j.astype(np.float32), const))
        h *= 2
    return top, dtype, levels


def _inversions(pi: np.ndarray) -> np.ndarray:
    """Inversions ``#{i < j: pi[i] > pi[j]}`` of each row, a permutation of ``0..n-1``.

    Shape (rows, n) -> int64 (rows,), in cache-sized blocks of rows.
    """
    rows, n = pi.shape
    out = np.zeros(rows, dtype=np.int64)
    if n < 2:
        return out
    top, dtype, levels = _merge_levels(n)
    total = sum(level[4] for level in levels)
    pad = np.arange(n, top, dtype=dtype) << 1
    step = max(1, _CHUNK_ELEMS // top)
    # float32 sums of positions are exact: every partial sum stays below 2**24.
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        seq = np.empty((r1 - r0, top), dtype=dtype)
        np.left_shift(pi[r0:r1], 1, out=seq[:, :n], casting="unsafe")
        seq[:, n:] = pad
        acc = np.zeros(r1 - r0, dtype=np.float64)
        for width, seg, pattern, weights, _ in levels:
            keys = np.bitwise_or(seq[:, :width], pattern)
            keys.reshape(-1, seg).sort(axis=-1)
            np.bitwise_and(keys, 1, out=keys)
            acc += keys.astype(np.float32) @ weights
        out[r0:r1] = total - np.rint(acc).astype(np.int64)
    return out


# --------------------------------------------------------------------------------------------
# Head distances, per document


@dataclass(frozen=True)
class DocumentSums:
    """Per-document sums of row distances, so that resampling documents reweights them.

    Attributes
    ----------
    sums : ndarray, shape (document, head, head)
        ``S_d = sum`` over document ``d``'s used rows of the row metric between two heads.
    counts : ndarray of int64, shape (document,)
        ``n_d``, the used rows of each document (every sink key present, ``m >= 2``).
    docs : tuple of int
        Index in ``HeadRows.docs`` of each kept document (documents without a used row are
        left out).
    """

    sums: np.ndarray
    counts: np.ndarray
    docs: tuple[int, ...]

    @property
    def distances(self) -> np.ndarray:
        """The pooled head distances ``D = sum_d S_d / sum_d n_d``, shape (head, head)."""
        return self.sums.sum(axis=0) / self.counts.sum()


def used_rows(doc: DocRows) -> int:
    """Recorded rows of a document with every sink key present and ``m >= 2`` content keys."""
    mask = np.asarray(doc.key_mask, dtype=bool)
    n_valid = mask.sum(axis=-1)
    has_sink = mask[:, list(doc.sink)].all(axis=-1)
    return int((has_sink & (n_valid - len(doc.sink) >= 2)).sum())


def document_sums(
    head_rows: HeadRows, metric: str, convention: str | None, *, device: str | None = None
) -> DocumentSums:
    """Per-document sums ``S_d`` and counts ``n_d`` of a metric's row distances.

    Parameters
    ----------
    head_rows : HeadRows
        The recorded rows of every head.
    metric : str
        A metric of :func:`attncoda.head_distances`.
    convention : {"keep", "drop"} or None
        As :func:`attncoda.head_distances` requires for ``metric``.
    device : str, optional
        A torch device (``"cuda"``) to compute the head distances on; None: numpy on the
        host.

    Returns
    -------
    DocumentSums
        ``sums`` in the metric's units (nats for ``jsd`` and ``entropy_gap``).
    """
    sums, counts, kept = [], [], []
    for i, doc in enumerate(head_rows.docs):
        n_used = used_rows(doc)
        if n_used == 0 and _sinks_present(doc):
            continue  # no row with content: nothing to average (head_distances would refuse)
        logp, key_mask = doc.logp, doc.key_mask
        if device is not None:
            import torch

            logp = torch.as_tensor(logp, device=device)
            key_mask = torch.as_tensor(key_mask, device=device)
        mean = head_distances(logp, metric, convention=convention, sink=doc.sink, key_mask=key_mask)
        if device is not None:
            mean = mean.cpu().numpy()
        sums.append(np.asarray(mean, dtype=np.float64) * n_used)
        counts.append(n_used)
        kept.append(i)
    if not kept:
        raise AttncodaError(
            f"model {head_rows.model!r} has no recorded row with every sink key present and "
            "at least 2 content keys: head distances are means over such rows"
        )
    return DocumentSums(np.stack(sums), np.asarray(counts, dtype=np.int64), tuple(kept))


def _sinks_present(doc: DocRows) -> bool:
    mask = np.asarray(doc.key_mask, dtype=bool)
    rows_with_keys = mask.any(axis=-1)
    return bool(mask[rows_with_keys][:, list(doc.sink)].all())


# --------------------------------------------------------------------------------------------
# The experiment


@dataclass(frozen=True, eq=False)
class FlipsResult:
    """Flip rates of one model, keep vs drop, per metric.

    Attributes
    ----------
    model : str
        The model spec.
    table : pandas.DataFrame
        One row per metric, columns ``model, metric, n_heads, n_triplets, n_ties, flips,
        flip_rate, ci_low, ci_high``. ``flip_rate = flips / (n_triplets - n_ties)`` (NaN only
        when every triplet is a tie); ``ci_low, ci_high`` are the 2.5 and 97.5 percentiles of
        the bootstrap flip rates over documents.
    by_layer : pandas.DataFrame
        The same counts broken down by the layer of ``A``: ``model, metric, layer,
        n_triplets, n_ties, flips, flip_rate`` (no CI).
    distances : dict
        ``(metric, convention) -> ndarray (head, head)``: the pooled head distances.
    bootstrap : dict
        ``metric -> ndarray (n_boot,)``: the flip rate of each bootstrap resample.
    n_docs, n_rows : int
        Documents with a used row, and used rows in all (per head).
    tol : float
        The relative tie tolerance.
    """

    model: str
    table: Any
    by_layer: Any = field(repr=False)
    distances: dict[tuple[str, str], np.ndarray] = field(repr=False)
    bootstrap: dict[str, np.ndarray] = field(repr=False)
    n_docs: int
    n_rows: int
    tol: float

    def to_tables(self) -> Tables:
        """The result as a flips unit's :class:`Tables`: frames ``flips`` and
        ``flips_by_layer``; arrays ``distance:{metric}:{convention}``,
        ``bootstrap:{metric}`` and the 0-d ``n_docs``, ``n_rows``, ``tol``."""
        arrays: dict[str, np.ndarray] = {
            "n_docs": np.asarray(self.n_docs),
            "n_rows": np.asarray(self.n_rows),
            "tol": np.asarray(self.tol),
        }
        arrays.update({f"distance:{m}:{c}": d for (m, c), d in self.distances.items()})
        arrays.update({f"bootstrap:{m}": b for m, b in self.bootstrap.items()})
        return Tables(frames={"flips": self.table, "flips_by_layer": self.by_layer}, arrays=arrays)

    @classmethod
    def from_tables(cls, model: str, tables: Tables) -> FlipsResult:
        """The result a flips unit's :class:`Tables` hold (see :meth:`to_tables`).

        Stored frames carry the run's key columns (``revision``, ``family``); they are left
        out, so the frames are the experiment's own.
        """
        arrays = tables.arrays
        for key in ("n_docs", "n_rows", "tol"):
            if key not in arrays:
                raise AttncodaError(
                    f"the flips tables of {model!r} hold no {key!r} array: rerun flips"
                )
        distances = {}
        bootstrap = {}
        for key, value in arrays.items():
            kind, _, rest = key.partition(":")
            if kind == "distance":
                metric, _, convention = rest.partition(":")
                distances[(metric, convention)] = value
            elif kind == "bootstrap":
                bootstrap[rest] = value
        return cls(
            model=model,
            table=without_run_columns(tables.frames["flips"]),
            by_layer=without_run_columns(tables.frames["flips_by_layer"]),
            distances=distances,
            bootstrap=bootstrap,
            n_docs=int(arrays["n_docs"]),
            n_rows=int(arrays["n_rows"]),
            tol=float(arrays["tol"]),
        )


def flips(
    head_rows: HeadRows,
    metrics: Sequence[str] = FLIP_METRICS,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    tol: float = DEFAULT_TOL,
    n_threads: int | None = None,
    device: str | None = None,
) -> FlipsResult:
    r"""Flip rate of triplet verdicts between ``convention="keep"`` and ``"drop"``.

    For each metric, ``D_keep`` and ``D_drop`` are the pooled head distances (the mean row
    metric over every used row of every document). Every triplet ``(A; B, C)``, ``A`` any head
    and ``B < C`` two other heads, gets the verdict ``sign(D(A, C) - D(A, B))`` under each
    convention; a flip is a decided triplet whose two verdicts differ.

    .. math:: \mathrm{flip\ rate} = \frac{\#\mathrm{flips}}{N\binom{N-1}{2} - \#\mathrm{ties}}

    Parameters
    ----------
    head_rows : HeadRows
        Recorded log-probability rows of every head, per document.
    metrics : sequence of str
        Classic metrics (each has a keep and a drop version): ``cosine``, ``jsd``,
        ``entropy_gap``, ``hellinger``, ``tv``.
    n_boot : int
        Bootstrap resamples over documents (``>= 1``). Each resample draws the documents with
        replacement and recomputes ``D = sum_d w_d S_d / sum_d w_d n_d`` from the per-document
        sums, then recounts every triplet.
    seed : int
        Seed of the resampling (``numpy.random.default_rng``).
    tol : float
        Relative tie tolerance: a triplet is a tie when ``|D(A, C) - D(A, B)| <= tol * max|D|``
        under keep or under drop, each matrix against its own maximum (also in each
        resample). The default ``1e-9`` catches rounding-level equalities of float64
        distances only; rows captured in float32 give ``D`` about ``1e-7`` relative
        precision, so ``tol=1e-6`` counts their near-equalities as ties.
    n_threads : int, optional
        Threads for the bootstrap (default: the CPUs available, at most 8). The counts do
        not depend on it.
    device : str, optional
        Where the head distances run: None or ``"cpu"`` (numpy, the reference), or a torch
        device such as ``"cuda"``. The counting and the bootstrap run on the host.

    Returns
    -------
    FlipsResult
        ``.table`` (one row per metric), ``.by_layer``, ``.distances``, ``.bootstrap``.

    Raises
    ------
    AttncodaError
        For a non-classic or unknown metric, ``n_boot < 1``, a negative ``tol``, fewer than
        3 heads, or no row with content.
    """
    import pandas as pd

    metrics = _check_metrics(metrics)
    n_boot = _check_n_boot(n_boot)
    tol = _check_tol(tol)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise AttncodaError(f"seed must be an int; got {seed!r}")
    n = head_rows.n_layers * head_rows.n_heads
    if n < 3:
        raise AttncodaError(
            f"flips needs at least 3 heads for a triplet; model {head_rows.model!r} has {n}"
        )
    threads = _threads(n_threads)
    on = None if device in (None, "cpu") else device
    n_triplets = n * math.comb(n - 1, 2)
    layer_of = head_rows.layer_of
    rows, layer_rows, distances, boot = [], [], {}, {}
    weights: np.ndarray | None = None
    n_docs = n_rows = 0
    for metric in metrics:
        keep = document_sums(head_rows, metric, "keep", device=on)
        drop = document_sums(head_rows, metric, "drop", device=on)
        if weights is None:
            n_docs, n_rows = len(keep.docs), int(keep.counts.sum())
            weights = _resample_weights(n_docs, n_boot, seed)
        point = triplet_flips(keep.distances, drop.distances, tol=tol)
        rates = _bootstrap_rates(keep, drop, weights, tol, n_triplets, threads)
        finite = rates[np.isfinite(rates)]
        low, high = np.percentile(finite, [2.5, 97.5]) if finite.size else (math.nan, math.nan)
        n_ties, n_flips = int(point.ties.sum()), int(point.flips.sum())
        rows.append(
            (
                head_rows.model,
                metric,
                n,
                n_triplets,
                n_ties,
                n_flips,
                _rate(n_flips, n_triplets - n_ties),
                float(low),
                float(high),
            )
        )
        for layer in range(head_rows.n_layers):
            sel = layer_of == layer
            t, f = int(point.ties[sel].sum()), int(point.flips[sel].sum())
            total = point.n_triplets * int(sel.sum())
            layer_rows.append((head_rows.model, metric, layer, total, t, f, _rate(f, total - t)))
        distances[(metric, "keep")] = keep.distances
        distances[(metric, "drop")] = drop.distances
        boot[metric] = rates
    table = _typed(pd.DataFrame(rows, columns=list(TABLE_COLUMNS)))
    by_layer = _typed(pd.DataFrame(layer_rows, columns=list(BY_LAYER_COLUMNS)))
    return FlipsResult(
        model=head_rows.model,
        table=table,
        by_layer=by_layer,
        distances=distances,
        bootstrap=boot,
        n_docs=n_docs,
        n_rows=n_rows,
        tol=tol,
    )


def _rate(flips_: int | np.ndarray, decided: int | np.ndarray) -> Any:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(decided > 0, np.divide(flips_, np.maximum(decided, 1)), np.nan)[()]


def _typed(df: Any) -> Any:
    ints = [c for c in ("n_heads", "layer", "n_triplets", "n_ties", "flips") if c in df]
    floats = [c for c in ("flip_rate", "ci_low", "ci_high") if c in df]
    return df.astype({**{c: "int64" for c in ints}, **{c: "float64" for c in floats}})


def _check_metrics(metrics: Any) -> tuple[str, ...]:
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


def _check_n_boot(n_boot: Any) -> int:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise AttncodaError(
            f"n_boot must be a positive int (bootstrap resamples over documents); got {n_boot!r}"
        )
    return int(n_boot)


def _threads(n_threads: Any) -> int:
    if n_threads is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
        return max(1, min(8, cpus))
    if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
        raise AttncodaError(f"n_threads must be a positive int; got {n_threads!r}")
    return n_threads


def _resample_weights(n_docs: int, n_boot: int, seed: int) -> np.ndarray:
    """How often each document is drawn in each resample, shape (n_boot, document)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_docs, size=(n_boot, n_docs))
    offsets = (np.arange(n_boot) * n_docs)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=n_boot * n_docs)
    return counts.reshape(n_boot, n_docs).astype(np.float64)


def _bootstrap_rates(
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
        rates = _bootstrap_rates(keep, drop, distinct, tol, n_triplets, threads)
        return rates[inverse.reshape(-1)]
    n_boot = weights.shape[0]
    n = keep.sums.shape[1]
    iu, ju = np.triu_indices(n, 1)
    sk = keep.sums[:, iu, ju]  # (document, pair)
    sd = drop.sums[:, iu, ju]
    pair = np.zeros((n, n), dtype=np.intp)
    pair[iu, ju] = pair[ju, iu] = np.arange(iu.size)
    rows_of_a = _off_diagonal(pair[None])  # (head, head - 1): pair index of (A, other)
    scaled = weights / (weights @ keep.counts.astype(np.float64))[:, None]
    step = max(1, _BOOT_ELEMS // (n * n))

    def block(r0: int) -> tuple[int, np.ndarray, np.ndarray]:
        w = scaled[r0 : r0 + step]
        dk, dd = w @ sk, w @ sd  # (resample, pair)
        tk = np.repeat(tol * np.abs(dk).max(axis=1), n)
        td = np.repeat(tol * np.abs(dd).max(axis=1), n)
        x = np.take(dk, rows_of_a, axis=1).reshape(-1, n - 1)  # np.take: 9x fancy indexing
        y = np.take(dd, rows_of_a, axis=1).reshape(-1, n - 1)
        f, t = _count_rows(x, y, tk, td)
        return r0, f.reshape(-1, n).sum(axis=1), t.reshape(-1, n).sum(axis=1)

    flips_ = np.zeros(n_boot, dtype=np.int64)
    ties = np.zeros(n_boot, dtype=np.int64)
    starts = range(0, n_boot, step)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for r0, f, t in pool.map(block, starts) if threads > 1 else map(block, starts):
            flips_[r0 : r0 + len(f)] = f
            ties[r0 : r0 + len(t)] = t
    return _rate(flips_, n_triplets - ties).astype(np.float64)


# --------------------------------------------------------------------------------------------
# The experiment's declaration

#: Distances from float32 rows are good to about 1e-7 relative: closer verdicts are ties.
CAPTURE_TOL = 1e-6


@dataclass(frozen=True)
class Settings:
    """Settings of the flips experiment."""

    metrics: tuple[str, ...] = field(
        default=FLIP_METRICS, metadata={"help": "classic metrics compared under keep and drop"}
    )
    n_boot: int = field(default=200, metadata={"help": "bootstrap resamples over documents"})
    tol: float = field(
        default=CAPTURE_TOL,
        metadata={"help": "relative tie tolerance of the head distances (float32 rows: 1e-6)"},
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """Flip rates of the unit's recorded rows (:func:`flips`) as a flips unit's tables."""
    result = flips(
        inputs.need("rows"),
        settings.metrics,
        n_boot=settings.n_boot,
        seed=inputs.seed,
        tol=settings.tol,
        device=inputs.device,
    )
    return result.to_tables()


EXPERIMENT = Experiment(
    name="flips",
    needs=("rows",),
    after=(),
    settings=Settings,
    run=run,
    tables=("flips", "flips_by_layer"),
)
