"""Exact counts of flips and ties over every triplet of heads (docs/design.md, "The
experiments").

For heads ``A, B, C`` the triplet verdict under a head-distance matrix ``D`` is
``sign(D(A, C) - D(A, B))``. Counting is exact and covers every triplet (``N * C(N-1, 2)`` for
``N`` heads). For a fixed ``A`` the flips are the discordant pairs between the keep and the
drop ranking of the other heads (Kendall), so rows of ``A`` without near-ties are counted as
the inversions of a permutation in ``O(N log^2 N)`` vectorised work (a bottom-up merge count
in which every merge is one SIMD sort of 16-bit keys). The few pairs within the tie tolerance
are then listed from the sorted rows and taken out, so near-ties cost time in proportion to
their number.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._progress import steps
from attncoda.experiments.contract import DEFAULT_TOL, check_tol

__all__ = [
    "TripletFlips",
    "count_inversions",
    "count_rows",
    "fragile_band",
    "off_diagonal",
    "tie_tolerance",
    "triplet_flips",
]

_CHUNK_ELEMS = 1 << 16  # int16 keys per inversion-count block: stays in the L2 cache


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
    fragile : ndarray of int64, shape (head,)
        Triplets of each ``A`` whose difference ``|D(A, C) - D(A, B)|`` lies within its
        rounding of the tie edge, under keep and under drop counted apart (a triplet at
        both edges counts twice): a tie on one device, decided on another. ``ties`` and
        ``flips`` of ``A`` are each good to this many.
    """

    n_triplets: int
    ties: np.ndarray
    flips: np.ndarray
    fragile: np.ndarray


def tie_tolerance(distances: np.ndarray, tol: float) -> np.ndarray:
    """Absolute tie tolerance ``tol * max|D|`` of each matrix, shape ``distances.shape[:-2]``."""
    scale = np.abs(distances).max(axis=(-2, -1))
    return tol * scale


def triplet_flips(
    d_keep: Any,
    d_drop: Any,
    *,
    tol: float = DEFAULT_TOL,
    rounding: tuple[Any, Any] | None = None,
) -> TripletFlips:
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
    rounding : (array_like, array_like), optional
        How far rounding can move each entry of ``d_keep`` and of ``d_drop`` (same shapes,
        the distances' units, ``>= 0``; :func:`attncoda.experiments.flips.distance_rounding`).
        A triplet is *fragile* under a convention when ``| |D(A, C) - D(A, B)| - tol
        max|D| |`` is within the row's band :func:`fragile_band`: a tie on one device,
        decided on another. None: no entry is rounded, and only a difference exactly at
        the edge is fragile.

    Returns
    -------
    TripletFlips
        Per-``A`` tie, flip and fragile counts.

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
    tol = check_tol(tol)
    if rounding is None:
        rounding = (np.zeros_like(d_keep), np.zeros_like(d_drop))
    e_keep, e_drop = (
        _rounding(e, d.shape, name)
        for e, d, name in zip(rounding, (d_keep, d_drop), ("keep", "drop"), strict=True)
    )
    x, y = off_diagonal(d_keep[None]), off_diagonal(d_drop[None])
    tx = np.repeat(tie_tolerance(d_keep[None], tol), n)
    ty = np.repeat(tie_tolerance(d_drop[None], tol), n)
    bx, by = fragile_band(d_keep, e_keep, tol), fragile_band(d_drop, e_drop, tol)
    flips, ties, fragile = count_rows(x, y, tx, ty, bx, by)
    return TripletFlips(n_triplets=math.comb(n - 1, 2), ties=ties, flips=flips, fragile=fragile)


def fragile_band(distances: np.ndarray, rounding: np.ndarray, tol: float) -> np.ndarray:
    """The fragile band of each row ``A`` of a (head, head) matrix, shape (head,): how far
    rounding can move a difference ``D(A, C) - D(A, B)`` and the tie edge ``tol max|D|``
    together, ``2 max_B e(A, B) + tol e(max|D|)`` (``e`` the entries' rounding, the
    diagonal left out)."""
    n = distances.shape[0]
    off = off_diagonal(rounding[None])
    at = np.unravel_index(np.argmax(np.abs(distances)), distances.shape)
    return 2 * off.max(axis=1) + tol * rounding[at] if n > 1 else np.zeros(n)


def _rounding(e: Any, shape: tuple[int, ...], convention: str) -> np.ndarray:
    e = np.asarray(e, dtype=np.float64)
    if e.shape != shape or not (np.isfinite(e).all() and (e >= 0).all()):
        raise AttncodaError(
            f"the rounding of the {convention} distances must be finite, non-negative and of "
            f"shape {shape}; got shape {e.shape}"
        )
    return e


def _square(d: Any, name: str) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise AttncodaError(f"{name} must be a square (head, head) matrix; got shape {d.shape}")
    if not np.isfinite(d).all():
        raise AttncodaError(f"{name} has a non-finite entry at index {_first(~np.isfinite(d))}")
    return d


def _first(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def off_diagonal(d: np.ndarray) -> np.ndarray:
    """Rows of ``d`` (shape (batch, head, head)) without their diagonal: (batch*head, head-1)."""
    b, n, _ = d.shape
    # Row-major, the off-diagonal entries are the flat matrix minus its first entry, cut
    # into rows of n + 1 whose last entry is the next diagonal one.
    flat = np.ascontiguousarray(d).reshape(b, n * n)[:, 1:]
    return flat.reshape(b, n - 1, n + 1)[:, :, :n].reshape(b * n, n - 1)


def count_rows(
    x: np.ndarray,
    y: np.ndarray,
    tx: np.ndarray,
    ty: np.ndarray,
    bx: np.ndarray | None = None,
    by: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Discordant decided pairs, tied pairs and fragile pairs of each row pair ``(x[i], y[i])``.

    ``x, y`` have shape (rows, n); ``tx, ty`` shape (rows,) are absolute tolerances and
    ``bx, by`` shape (rows,) the fragile bands (None: zero). A pair ``(a, b)`` is fragile
    under ``x`` when ``| |x_b - x_a| - tx | <= bx``, and the same under ``y``; the two are
    counted apart (a bound). Returns ``(flips, ties, fragile)``, int64 of shape (rows,).
    Works in cache-sized blocks of rows.
    """
    rows, n = x.shape
    flips = np.zeros(rows, dtype=np.int64)
    ties = np.zeros(rows, dtype=np.int64)
    fragile = np.zeros(rows, dtype=np.int64)
    if n < 2:
        return flips, ties, fragile
    bx = np.zeros(rows) if bx is None else bx
    by = np.zeros(rows) if by is None else by
    step = max(1, _CHUNK_ELEMS // n)
    for r0 in steps(range(0, rows, step), desc=f"flips: {rows} pairs", unit="block"):
        sl = slice(r0, r0 + step)
        flips[sl], ties[sl], fragile[sl] = _count_block(
            x[sl], y[sl], tx[sl], ty[sl], bx[sl], by[sl]
        )
    return flips, ties, fragile


def _count_block(
    x: np.ndarray, y: np.ndarray, tx: np.ndarray, ty: np.ndarray, bx: np.ndarray, by: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flips, ties and fragile pairs of a block of rows: inversions of every pair, minus the
    tied pairs.

    Every pair ``B < C`` is discordant when ``(x_C > x_B) != (y_C > y_B)``. Ordering each row
    by value, equal values by falling head index, makes "C ranks above B" mean exactly
    ``x_C > x_B`` (so exact duplicates count as that predicate does), and the discordant pairs
    are the inversions of the drop ranks read in keep order. The tied pairs (within the
    tolerance under keep or under drop) are few; they are listed from the sorted rows and
    their discordant ones subtracted, which leaves the decided flips of the definition. The
    pairs are listed out to the tolerance plus the band, so that the fragile ones (within
    the band of the tolerance) come out of the same list.
    """
    rows, n = x.shape
    (ox, xs), (oy, ys) = _order(x), _order(y)
    rank_y = np.empty_like(oy)
    np.put_along_axis(rank_y, oy, np.arange(n)[None, :], axis=1)
    # pi[i] = drop rank of the head holding keep rank i: its inversions are the discordances.
    discordant = count_inversions(np.take_along_axis(rank_y, ox, axis=1))
    r, a, b, fragile = _tied_pairs(_Sorted(xs, ox, tx, bx), _Sorted(ys, oy, ty, by))
    if r.size == 0:
        return discordant, np.zeros(rows, dtype=np.int64), fragile
    dx = x[r, b] - x[r, a]
    dy = y[r, b] - y[r, a]
    tied_discordant = np.bincount(r[(dx > 0) != (dy > 0)], minlength=rows)
    return discordant - tied_discordant, np.bincount(r, minlength=rows).astype(np.int64), fragile


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


class _Sorted(NamedTuple):
    """One convention's block of rows, sorted: ``values`` (rows, n) ascending and ``order``
    their argsort (:func:`_order`), with each row's absolute tie tolerance ``tol`` and
    fragile band ``band`` (rows,)."""

    values: np.ndarray
    order: np.ndarray
    tol: np.ndarray
    band: np.ndarray


def _tied_pairs(x: _Sorted, y: _Sorted) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every pair within tolerance under ``x`` or ``y``, once: ``(row, a, b)`` with ``a < b``;
    and the fragile pairs of each row, counted (int64, shape (rows,)).

    In a sorted row the entries within ``t`` of an entry follow it, and rounded subtraction
    is monotone (``c >= b >= a`` gives ``fl(c - a) >= fl(b - a)``), so the pairs at sorted
    distance ``k`` are scanned for ``k = 1, 2, ...`` until none is within ``t + b``; a row
    leaves the scan at the first ``k`` where it has none. The pairs within ``t`` are listed,
    those within ``b`` of ``t`` counted, under ``x`` and under ``y`` apart: a pair fragile
    under both is counted twice (the count is a bound).
    """
    rows, n = x.values.shape
    codes = []
    fragile = np.zeros(rows, dtype=np.int64)
    for vs, order, t, band in (x, y):
        active = np.arange(rows)
        low = t - band
        for k in range(1, n):
            sub = vs if active.size == rows else vs[active]
            gap = sub[:, k:] - sub[:, :-k]
            reach = gap <= (t + band)[active, None]
            j, i = np.nonzero(reach)  # few: the pairs within the band's reach
            if j.size == 0:
                break
            r = active[j]
            near = gap[j, i]
            fragile += np.bincount(r[near >= low[r]], minlength=rows)
            tied = near <= t[r]
            if tied.any():
                r, i = r[tied], i[tied]
                h0, h1 = order[r, i], order[r, i + k]
                lo, hi = np.minimum(h0, h1), np.maximum(h0, h1)
                codes.append((r.astype(np.int64) * n + lo) * n + hi)
            active = active[np.unique(j)]
    if not codes:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, fragile
    code = np.unique(np.concatenate(codes))
    return code // (n * n), (code // n) % n, code % n, fragile


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


def count_inversions(pi: np.ndarray) -> np.ndarray:
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
    for r0 in steps(range(0, rows, step), desc=f"flips: {rows} orders", unit="block"):
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
