"""The bins of the safety map: their edges, the cell of each triplet, and each cell's ties,
flips and verdict (docs/design.md, "The experiments").

A cell is one bin of sink share by one bin of sink-mass gap; a bin of one coordinate is the
sum of its cells. Its verdict is the flip rate over its decided triplets with the two-sided
95% Clopper-Pearson interval, and whether the upper end lies below the threshold.

Each count is decided at a threshold, so each cell states how far rounding can move it
(docs/design.md, "Verdicts and ratios within rounding"): its triplets within rounding of the
tie edge (``n_fragile``, as flips counts them), its triplets within rounding of a bin edge
between it and a neighbour (``n_edge``), how far the rate and the interval's ends can move
by them, and whether the verdict itself lies within that of the threshold (``safe_edge``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import CLOPPER_PEARSON, flip_rate, flip_rate_interval
from attncoda.experiments.flips import fragile_band, rate_rounding, tie_tolerance

__all__ = [
    "CELL_COLUMNS",
    "GRID_KEYS",
    "Binning",
    "TripletCells",
    "assign_bins",
    "bin_edges",
    "cell_counts",
    "cell_values",
    "interval_rounding",
]

_BLOCK_ELEMS = 1 << 22  # triplets per block of heads A

#: The columns that name a cell of the grid: the model, the metric, and the bin of each
#: coordinate with its range (the first columns of the grid table).
GRID_KEYS = (
    "model",
    "metric",
    "sink_share_bin",
    "sink_share_low",
    "sink_share_high",
    "sink_gap_bin",
    "sink_gap_low",
    "sink_gap_high",
)
#: A cell's counts and verdict, the last columns of both tables (:func:`cell_values`):
#: what it counts, then how far rounding can move it.
CELL_COLUMNS = (
    "n_triplets",
    "n_ties",
    "flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "ci_method",
    "n_decided",
    "safe_threshold",
    "safe",
    "n_fragile",
    "n_edge",
    "rate_rounding",
    "ci_rounding",
    "safe_edge",
)


@dataclass(frozen=True, eq=False)
class Binning:
    """The bins of one coordinate as :func:`bin_edges` made them: ``edges`` (shape (bin +
    1,)), from ``n_bins`` quantile bins, or the ``fixed`` edges given (then not moved by
    rounding: a setting)."""

    edges: np.ndarray
    n_bins: int
    fixed: Any = None


@dataclass(frozen=True, eq=False)
class TripletCells:
    """The cell of each triplet ``(A; B, C)``, head ``A`` by pair ``(B, C)`` in
    ``numpy.triu_indices`` order (:func:`triplet_coordinates`): ``cell`` (int, shape (head,
    pair)), ``valid`` (bool, same shape: ``A`` not in ``{B, C}``, the triplets counted) and
    the number of cells ``n_cells``."""

    cell: np.ndarray
    valid: np.ndarray
    n_cells: int


def cell_values(
    n: int, ties: int, flips: int, threshold: float, fragile: int = 0, edge: int = 0
) -> tuple[Any, ...]:
    """A cell's values of :data:`CELL_COLUMNS`: its triplets, ties and flips, the flip rate
    over the decided triplets with its 95% interval, the interval's method and n, the
    threshold, whether it is safe; then its fragile and edge triplets, how far the rate
    (:func:`~attncoda.experiments.flips.rate_rounding`) and the interval's ends
    (:func:`interval_rounding`) can move when ``fragile + edge`` triplets change, and
    whether the upper end lies within that of the threshold (``safe`` may go either
    way)."""
    decided = n - ties
    low, high = flip_rate_interval(flips, decided)
    safe = bool(decided > 0 and high < threshold)
    rate = flip_rate(flips, decided)
    moved = fragile + edge
    ends = interval_rounding(flips, decided, moved)
    on_edge = bool(abs(high - threshold) <= ends)
    return (
        n, ties, flips, rate, low, high, CLOPPER_PEARSON, decided, float(threshold), safe,
        fragile, edge, float(rate_rounding(moved, decided)), ends, on_edge,
    )  # fmt: skip


def interval_rounding(flips: int, decided: int, moved: int) -> float:
    """How far either end of the Clopper-Pearson interval of ``flips / decided`` can move
    when ``moved`` triplets change (each moves the flips and the decided count by at most
    one).

    Both ends rise with the flips and fall with the decided count, so over the box
    ``|F' - F| <= k``, ``|N' - N| <= k``, ``0 <= F' <= N'`` each end is extreme at a corner:
    both ends lowest at ``(F - k, N + k)``, the lower end highest at ``(F + k, max(N - k,
    F + k))``, the upper end highest at ``(min(F + k, N - k), N - k)`` (``(0, 1)`` with
    nothing decided).

    Returns
    -------
    float
        The largest move of either end, in ``[0, 1]``.
    """
    if moved <= 0:
        return 0.0
    low, high = flip_rate_interval(flips, decided)
    down = flip_rate_interval(max(flips - moved, 0), decided + moved)
    fewest = max(decided - moved, 0)
    up_low = flip_rate_interval(flips + moved, max(decided - moved, flips + moved))[0]
    up_high = flip_rate_interval(min(flips + moved, fewest), fewest)[1]
    return float(max(low - down[0], up_low - low, high - down[1], up_high - high))


def bin_edges(
    values: np.ndarray, n_bins: int, fixed: Any, name: str, *, overwrite: bool = False
) -> np.ndarray:
    """The bin edges of one coordinate: ``n_bins`` quantile bins of ``values``, or ``fixed``
    checked.

    Parameters
    ----------
    values : ndarray
        The coordinate of every triplet counted (sink share or sink-mass gap, in ``[0, 1]``).
    n_bins : int
        Quantile bins when ``fixed`` is None (repeated quantiles merge, so there may be
        fewer; all values equal give one bin ``[v, v]``).
    fixed : sequence of float or None
        Given edges: at least 2, finite, strictly increasing, covering every value.
    name : str
        The coordinate (``"sink_share"`` or ``"sink_gap"``), for messages.
    overwrite : bool
        Whether the quantiles may partition ``values`` in place (it is then partitioned at
        the order statistics they interpolate, which :func:`edge_rounding` reads).

    Returns
    -------
    ndarray, shape (bin + 1,)
        Increasing edges, float64.

    Raises
    ------
    AttncodaError
        ``fixed`` is not such a sequence, or leaves a value outside.
    """
    if fixed is None:
        levels = np.linspace(0.0, 1.0, n_bins + 1)
        edges = np.unique(np.quantile(values, levels, overwrite_input=overwrite))
        return edges if len(edges) > 1 else np.array([edges[0], edges[0]])
    try:
        edges = np.asarray(fixed, dtype=np.float64)
    except (TypeError, ValueError):
        edges = np.array([np.nan])
    if edges.ndim != 1 or len(edges) < 2 or not np.isfinite(edges).all():
        raise AttncodaError(f"{name}_edges must be at least 2 finite numbers; got {fixed!r}")
    if not (np.diff(edges) > 0).all():
        raise AttncodaError(f"{name}_edges must be strictly increasing; got {edges.tolist()}")
    outside = (values < edges[0]) | (values > edges[-1])
    if outside.any():
        value = float(values[outside][0])
        raise AttncodaError(
            f"{name} value {value:.6g} lies outside the fixed bin edges "
            f"[{edges[0]:g}, {edges[-1]:g}]; give edges that cover [0, 1]"
        )
    return edges


def assign_bins(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value: ``[e_i, e_(i+1))``, the last bin closed; int64, same shape."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def cell_counts(
    d_keep: np.ndarray,
    d_drop: np.ndarray,
    cells: TripletCells,
    tol: float,
    rounding: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ties, flips and fragile triplets per cell, triplet by triplet (the definitions of
    ``triplet_flips``).

    Parameters
    ----------
    d_keep, d_drop : ndarray, shape (head, head)
        Head distances under ``keep`` and ``drop`` (one metric).
    cells : TripletCells
        The cell of each triplet, and which are counted.
    tol : float
        Relative tie tolerance of each matrix (``tol * max|D|``).
    rounding : (ndarray, ndarray), optional
        How far rounding can move each entry of ``d_keep`` and ``d_drop``
        (:attr:`attncoda.experiments.flips.FlipsResult.rounding`); None: not at all.

    Returns
    -------
    ties, flips, fragile : ndarray of int64, shape (n_cells,)
        ``fragile`` counts the triplets within their row's band
        (:func:`~attncoda.experiments.flips.fragile_band`) of the tie edge, under keep and
        under drop apart, as ``triplet_flips`` counts them: its total over the cells is
        flips' ``n_fragile``.
    """
    n, cell, valid, n_cells = d_keep.shape[0], cells.cell, cells.valid, cells.n_cells
    b, c = np.triu_indices(n, 1)
    tk = float(tie_tolerance(d_keep, tol))
    td = float(tie_tolerance(d_drop, tol))
    if rounding is None:
        rounding = (np.zeros_like(d_keep), np.zeros_like(d_drop))
    bk, bd = fragile_band(d_keep, rounding[0], tol), fragile_band(d_drop, rounding[1], tol)
    # The band's ends as triplet_flips compares them: t - band <= |difference| <= t + band.
    low_k, high_k, low_d, high_d = tk - bk, tk + bk, td - bd, td + bd
    ties = np.zeros(n_cells, dtype=np.int64)
    flips = np.zeros(n_cells, dtype=np.int64)
    fragile = np.zeros(n_cells, dtype=np.int64)
    step = max(1, _BLOCK_ELEMS // max(1, len(b)))
    for a0 in range(0, n, step):
        a = slice(a0, a0 + step)
        # np.take gathers the rows' pairs several times faster than fancy indexing.
        dx = np.take(d_keep[a], c, axis=1)
        dx -= np.take(d_keep[a], b, axis=1)
        dy = np.take(d_drop[a], c, axis=1)
        dy -= np.take(d_drop[a], b, axis=1)
        ok, at = valid[a].ravel(), cell[a].ravel()
        discordant = ((dx > 0) != (dy > 0)).ravel()
        flips += np.bincount(at[ok & discordant], minlength=n_cells)
        # Ties and fragile triplets lie within the band's reach of the tie edge: few, so
        # they are listed and counted apart (the discordant ties taken out of the flips).
        ax, ay = np.abs(dx, out=dx), np.abs(dy, out=dy)
        near = []
        for size, low, high in ((ax, low_k[a], high_k[a]), (ay, low_d[a], high_d[a])):
            flat = np.flatnonzero(size <= high[:, None])
            flat = flat[ok[flat]]
            within = size.ravel()[flat] >= low[flat // len(b)]
            fragile += np.bincount(at[flat[within]], minlength=n_cells)
            near.append(flat)
        flat = np.unique(np.concatenate(near))
        flat = flat[(ax.ravel()[flat] <= tk) | (ay.ravel()[flat] <= td)]
        ties += np.bincount(at[flat], minlength=n_cells)
        flips -= np.bincount(at[flat[discordant[flat]]], minlength=n_cells)
    return ties, flips, fragile
