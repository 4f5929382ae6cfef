"""The bins of the safety map: their edges, the cell of each triplet, and each cell's ties,
flips and verdict (docs/design.md, "The experiments").

A cell is one bin of sink share by one bin of sink-mass gap; a bin of one coordinate is the
sum of its cells. Its verdict is the flip rate over its decided triplets with the two-sided
95% Clopper-Pearson interval, and whether the upper end lies below the threshold.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import CLOPPER_PEARSON, flip_rate, flip_rate_interval
from attncoda.experiments.flips import tie_tolerance

__all__ = [
    "CELL_COLUMNS",
    "GRID_KEYS",
    "assign_bins",
    "bin_edges",
    "cell_counts",
    "cell_values",
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
#: A cell's counts and verdict, the last columns of both tables (:func:`cell_values`).
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
)


def cell_values(n: int, ties: int, flips: int, threshold: float) -> tuple[Any, ...]:
    """A cell's values of :data:`CELL_COLUMNS`: its triplets, ties and flips, the flip rate
    over the decided triplets with its 95% interval, the interval's method and n, the
    threshold, and whether it is safe."""
    decided = n - ties
    low, high = flip_rate_interval(flips, decided)
    safe = bool(decided > 0 and high < threshold)
    rate = flip_rate(flips, decided)
    return n, ties, flips, rate, low, high, CLOPPER_PEARSON, decided, float(threshold), safe


def bin_edges(values: np.ndarray, n_bins: int, fixed: Any, name: str) -> np.ndarray:
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
        edges = np.unique(np.quantile(values, np.linspace(0.0, 1.0, n_bins + 1)))
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
    cell: np.ndarray,
    valid: np.ndarray,
    tol: float,
    n_cells: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Ties and flips per cell, triplet by triplet (the definition of ``triplet_flips``).

    Parameters
    ----------
    d_keep, d_drop : ndarray, shape (head, head)
        Head distances under ``keep`` and ``drop`` (one metric).
    cell : ndarray of int, shape (head, pair)
        The cell of triplet ``(A; B, C)``, head ``A`` by pair ``(B, C)`` in
        ``numpy.triu_indices`` order (as :func:`triplet_coordinates` gives them).
    valid : ndarray of bool, shape (head, pair)
        ``A`` not in ``{B, C}``: the triplets counted.
    tol : float
        Relative tie tolerance of each matrix (``tol * max|D|``).
    n_cells : int
        Number of cells.

    Returns
    -------
    ties, flips : ndarray of int64, shape (n_cells,)
    """
    n = d_keep.shape[0]
    b, c = np.triu_indices(n, 1)
    tk = float(tie_tolerance(d_keep, tol))
    td = float(tie_tolerance(d_drop, tol))
    ties = np.zeros(n_cells, dtype=np.int64)
    flips = np.zeros(n_cells, dtype=np.int64)
    step = max(1, _BLOCK_ELEMS // max(1, len(b)))
    for a0 in range(0, n, step):
        a = slice(a0, a0 + step)
        dx = d_keep[a][:, c] - d_keep[a][:, b]
        dy = d_drop[a][:, c] - d_drop[a][:, b]
        tie = (np.abs(dx) <= tk) | (np.abs(dy) <= td)
        flip = ~tie & ((dx > 0) != (dy > 0))
        ok = valid[a]
        ties += np.bincount(cell[a][ok & tie], minlength=n_cells)
        flips += np.bincount(cell[a][ok & flip], minlength=n_cells)
    return ties, flips
