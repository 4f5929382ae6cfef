"""The triplets at a bin edge: how far rounding can move each edge, which triplets can
fall in another bin, and how many can move into or out of each bin and cell (docs/design.md,
"Verdicts and ratios within rounding")."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.safety._bins import Binning, assign_bins

__all__ = ["Rounding", "bin_reach", "edge_counts", "edge_rounding"]

#: How far rounding can move values: an array of their shape, or a function of flat
#: positions that gives it there (computed only where asked).
Rounding = np.ndarray | Callable[[np.ndarray], np.ndarray]


def _rounding_at(rounding: Rounding, at: np.ndarray) -> np.ndarray:
    return rounding(at) if callable(rounding) else np.ravel(rounding)[at]


def _largest(rounding: Rounding, where: np.ndarray | None) -> float:
    """The largest rounding of the values counted: the reach of every one."""
    if callable(rounding):
        raise AttncodaError(
            "a rounding given as a function of positions needs the bound of every value: "
            "give reach="
        )
    return float(np.max(np.ravel(rounding), where=True if where is None else where, initial=0))


def edge_rounding(
    values: np.ndarray,
    rounding: Rounding,
    bins: Binning,
    *,
    where: np.ndarray | None = None,
    reach: float | None = None,
    ranked: np.ndarray | None = None,
) -> np.ndarray:
    """How far rounding can move each bin edge of :func:`bin_edges`.

    A quantile edge interpolates linearly between two order statistics ``x_(j) <=
    x_(j+1)`` of the values. When every value moves by at most its rounding, itself at
    most ``R``, the values below ``x_(j) - R`` stay below ``x_(j)`` and those above
    ``x_(j+1) + R`` stay above ``x_(j+1)``, so each order statistic moves by at most the
    largest rounding of the values in ``[x_(j) - R, x_(j+1) + R]``, and so does the edge.
    Repeated quantiles merged into one edge carry the largest of their moves; a fixed edge
    is a setting and does not move.

    Parameters
    ----------
    values : ndarray
        A coordinate.
    rounding : ndarray or callable
        Its rounding: an array of the same shape, or a function of flat positions in
        ``values`` that gives it there.
    bins : Binning
        The bins of the values counted (:func:`bin_edges`).
    where : ndarray of bool, optional
        The values counted (the shape of ``values``; default: all).
    reach : float, optional
        ``R``, a bound of every value's rounding (default: the largest of the array).
    ranked : ndarray, optional
        The values counted, partitioned by :func:`bin_edges` (``overwrite=True``) at the
        order statistics its quantiles interpolate (default: partitioned here).

    Returns
    -------
    ndarray, shape (bin + 1,)
        Non-negative, the coordinate's units.
    """
    edges, out = bins.edges, np.zeros(len(bins.edges))
    flat = np.ravel(values)
    keep = None if where is None else np.ravel(where)
    if bins.fixed is not None or not flat.size or (keep is not None and not keep.any()):
        return out
    if reach is None:
        reach = _largest(rounding, keep)
    # The order statistics np.quantile interpolates ("linear": at (size - 1) q).
    size = flat.size if keep is None else int(np.count_nonzero(keep))
    below = np.floor(np.linspace(0.0, 1.0, bins.n_bins + 1) * (size - 1)).astype(np.int64)
    above = np.minimum(below + 1, size - 1)
    if ranked is None:
        ranked = flat[keep] if keep is not None else flat.copy()
        ranked.partition(np.unique(np.concatenate([below, above])))
    low, high = ranked[below], ranked[above]
    for at, lo, hi in zip(_within(flat, low - reach, high + reach), low, high, strict=True):
        at = at if keep is None else at[keep[at]]
        edge = (edges >= lo) & (edges <= hi)
        out[edge] = np.maximum(out[edge], _rounding_at(rounding, at).max(initial=0.0))
    return out


#: Buckets of the values' range :func:`_within` sorts values into (a lookup per value),
#: and values per block of that lookup.
_BUCKETS = 1 << 20
_BLOCK = 1 << 20


def _within(values: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> list[np.ndarray]:
    """The positions of ``values`` (flat) in each closed interval ``[lows[w], highs[w]]``.

    The intervals are narrow (an edge's reach): the values are put in buckets at least as
    wide as the widest interval, by one lookup each, and only those in a bucket an interval
    touches are compared with it.
    """
    if values.size == 0 or len(lows) == 0:
        return [np.zeros(0, np.int64) for _ in lows]
    start, stop = float(values.min()), float(values.max())
    width = max(float(np.max(highs - lows)), (stop - start) / _BUCKETS)
    scale = 1.0 / width if width > 0 else 1.0
    # A bucket either side of each interval's own: the scaled values round.
    first = np.floor((lows - start) * scale).astype(np.int64) - 1
    last = np.floor((highs - start) * scale).astype(np.int64) + 1
    touched = np.zeros(int((stop - start) * scale) + 2, dtype=bool)
    for a, b in zip(first, last, strict=True):
        touched[max(a, 0) : max(b + 1, 0)] = True
    found = []
    scaled = np.empty(min(values.size, _BLOCK))
    for s0 in range(0, values.size, _BLOCK):
        block = values[s0 : s0 + _BLOCK]
        part = np.subtract(block, start, out=scaled[: block.size])
        part *= scale
        found.append(np.flatnonzero(touched[part.astype(np.int64)]) + s0)
    inside = np.concatenate(found)
    near = values[inside]
    return [inside[(near >= lo) & (near <= hi)] for lo, hi in zip(lows, highs, strict=True)]


def bin_reach(
    values: np.ndarray,
    rounding: Rounding,
    edges: np.ndarray,
    edge_rounding: np.ndarray,
    *,
    reach: float | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values that can fall in another bin (:func:`assign_bins`) when they and the
    edges move within their rounding, and the lowest and highest bin each can fall in:
    the value moved down against the edges moved up, and the other way round. The outer
    edges bound no neighbour (a quantile edge's outer ones are the extreme values
    themselves, which move with them).

    Parameters
    ----------
    values : ndarray
        A coordinate.
    rounding : ndarray or callable
        Its rounding, as for :func:`edge_rounding`.
    edges, edge_rounding : ndarray, shape (bin + 1,)
        The bin edges and their rounding (:func:`edge_rounding`).
    reach : float, optional
        A bound of every value's rounding (default: the largest of the array).

    Returns
    -------
    at : ndarray of int64
        Flat positions in ``values`` of those within their rounding plus an interior
        edge's of that edge, where ``low < high``.
    low, high : ndarray of int64, the shape of ``at``
        The bins each can fall in, ``low <= assign_bins(value) <= high``.
    """
    flat = np.ravel(values)
    if reach is None:
        reach = _largest(rounding, None)
    interior = slice(1, len(edges) - 1)
    wide = reach + edge_rounding[interior]
    near = np.unique(
        np.concatenate(
            _within(flat, edges[interior] - wide, edges[interior] + wide) or [np.zeros(0, np.int64)]
        )
    )
    x, e = flat[near], _rounding_at(rounding, near)
    up = np.maximum.accumulate(edges + edge_rounding)
    down = np.maximum.accumulate(edges - edge_rounding)
    low, high = assign_bins(x - e, up), assign_bins(x + e, down)
    moves = low < high
    return near[moves], low[moves], high[moves]


def edge_counts(
    share: tuple[np.ndarray, np.ndarray, np.ndarray],
    gap: tuple[np.ndarray, np.ndarray, np.ndarray],
    bins: tuple[np.ndarray, np.ndarray],
    valid: np.ndarray,
    n_bins: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The triplets that can move into or out of each bin and cell: those whose coordinate
    lies within its rounding of an interior edge bounding the bin (plus the edge's own),
    counted in every bin they can fall in (their own and the neighbour they can move to).

    Parameters
    ----------
    share : (ndarray, ndarray, ndarray)
        :func:`bin_reach` of the sink shares, shape (head, pair) flattened.
    gap : (ndarray, ndarray, ndarray)
        :func:`bin_reach` of the sink-mass gaps, shape (pair,).
    bins : (ndarray, ndarray)
        The share bin of every triplet, shape (head, pair), and the gap bin of every pair.
    valid : ndarray of bool, shape (head, pair)
        The triplets counted.
    n_bins : (int, int)
        Bins of sink share and of sink-mass gap.

    Returns
    -------
    cells : ndarray of int64, shape (n_share * n_gap,)
        Per cell (share bin major), the triplets that can fall in it and in another.
    share_bins, gap_bins : ndarray of int64, shapes (n_share,), (n_gap,)
        The same per bin of one coordinate.
    """
    n_s, n_g = n_bins
    n_pairs = valid.shape[1]
    flat_valid = valid.ravel()
    s_at, s_low, s_high = share
    s_keep = flat_valid[s_at]
    s_at, s_low, s_high = s_at[s_keep], s_low[s_keep], s_high[s_keep]
    g_at, g_low, g_high = gap
    share_bins = _spans(s_low, s_high, n_s)
    gap_bins = _spans(g_low, g_high, n_g, weights=valid.sum(axis=0)[g_at])
    # Every triplet that can move in one coordinate or the other, with its reach in both.
    moving_pairs = np.zeros(n_pairs, bool)
    moving_pairs[g_at] = True
    by_gap = np.flatnonzero((valid & moving_pairs[None, :]).ravel())
    at = np.union1d(s_at, by_gap)
    pair = at % n_pairs
    s_bin, g_bin = bins[0].ravel()[at], bins[1][pair]
    sl, sh, gl, gh = s_bin.copy(), s_bin.copy(), g_bin.copy(), g_bin.copy()
    where = np.searchsorted(at, s_at)
    sl[where], sh[where] = s_low, s_high
    reach_g = np.full(n_pairs, -1)
    reach_g[g_at] = np.arange(len(g_at))
    moving = reach_g[pair] >= 0
    gl[moving], gh[moving] = g_low[reach_g[pair][moving]], g_high[reach_g[pair][moving]]
    cells = np.zeros(n_s * n_g, dtype=np.int64)
    for i in range(int((sh - sl).max(initial=0)) + 1):
        for j in range(int((gh - gl).max(initial=0)) + 1):
            here = (sl + i <= sh) & (gl + j <= gh)
            cells += np.bincount((sl[here] + i) * n_g + gl[here] + j, minlength=n_s * n_g)
    return cells, share_bins, gap_bins


def _spans(
    low: np.ndarray, high: np.ndarray, n_bins: int, weights: np.ndarray | None = None
) -> np.ndarray:
    """Per bin, the (weighted) number of spans ``[low, high]`` that cover it."""
    out = np.zeros(n_bins, dtype=np.int64)
    weights = np.ones(len(low), dtype=np.int64) if weights is None else weights
    for i in range(int((high - low).max(initial=0)) + 1):
        here = low + i <= high
        out += np.bincount(low[here] + i, weights=weights[here], minlength=n_bins).astype(np.int64)
    return out
