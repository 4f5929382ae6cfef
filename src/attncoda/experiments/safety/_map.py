"""The safety map itself: every triplet's coordinates and their rounding, its bins and
their edges, and each bin's and cell's counts, rate, interval and verdict with what rounding
leaves open (docs/design.md, "The experiments"; :mod:`attncoda.experiments.safety`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    DEFAULT_TOL,
    FLIP_METRICS,
    HeadRows,
    check_metrics,
    check_tol,
)
from attncoda.experiments.flips import FlipsResult, document_sums, entropy_sums
from attncoda.experiments.safety._bins import (
    CELL_COLUMNS,
    GRID_KEYS,
    Binning,
    TripletCells,
    assign_bins,
    bin_edges,
    cell_counts,
    cell_values,
)
from attncoda.experiments.safety._edges import bin_reach, edge_counts, edge_rounding
from attncoda.experiments.safety._split import (
    SquaredSplit,
    gap_rounding,
    mean_squared_split,
    share_reach,
    share_rounding,
    triplet_coordinates,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_SAFE_THRESHOLD",
    "GRID_COLUMNS",
    "SAFETY_COLUMNS",
    "SafetyResult",
    "safety_map",
]

#: A bin is safe when the upper end of its 95% interval on the flip rate is below this.
DEFAULT_SAFE_THRESHOLD = 0.05

SAFETY_COLUMNS = (
    "model", "metric", "bin_kind", "bin", "bin_low", "bin_high", "bin_rounding", *CELL_COLUMNS,
)  # fmt: skip
GRID_COLUMNS = (
    *GRID_KEYS[:5], "sink_share_rounding", *GRID_KEYS[5:], "sink_gap_rounding", *CELL_COLUMNS,
)  # fmt: skip
BIN_KINDS = ("sink_share", "sink_gap")


@dataclass(frozen=True, eq=False)
class SafetyResult:
    """Flip rate of keep vs drop binned by sink share and by sink-mass gap.

    Attributes
    ----------
    model : str
        The model spec.
    table : pandas.DataFrame
        Columns :data:`SAFETY_COLUMNS`: ``model, metric, bin_kind, bin, bin_low, bin_high,
        bin_rounding, n_triplets, n_ties, flips, flip_rate, flip_rate_low,
        flip_rate_high, ci_method, n_decided, safe_threshold, safe, n_fragile, n_edge,
        rate_rounding, ci_rounding, safe_edge``; ``bin_kind`` is ``"sink_share"`` or
        ``"sink_gap"``. Bins are ``[bin_low, bin_high)``, the last one closed;
        ``bin_rounding`` (float, the coordinate's units) is how far rounding can move
        either edge (0 for fixed edges). ``flip_rate`` is NaN exactly where a bin has no
        decided triplet; ``flip_rate_low``/``flip_rate_high`` are its 95% interval,
        ``ci_method`` (``"Clopper-Pearson over triplets"``) over ``n_decided = n_triplets
        - n_ties`` triplets (``[0, 1]`` without decided triplets), and ``safe`` is
        ``flip_rate_high < safe_threshold``. Then what rounding leaves open:
        ``n_fragile`` (int), the bin's triplets within rounding of the tie edge, under
        keep and under drop counted apart (their sum over the bins is flips'
        ``n_fragile``); ``n_edge`` (int), the triplets that can move into or out of the
        bin (their coordinate within its rounding plus the edge's of an interior edge
        bounding it); ``n_triplets`` is good to ``n_edge``, ``n_ties``, ``flips`` and
        ``n_decided`` to ``n_fragile + n_edge``; ``rate_rounding`` (float), how far
        ``flip_rate`` moves when that many triplets change
        (:func:`~attncoda.experiments.flips.rate_rounding`); ``ci_rounding`` (float), how
        far either end of the interval can (its counts moved within the same box); and
        ``safe_edge`` (bool), ``|flip_rate_high - safe_threshold| <= ci_rounding``: the
        verdict ``safe`` may go either way.
    grid : pandas.DataFrame
        The same counts over both binnings at once (one row per cell, every cell listed),
        columns :data:`GRID_COLUMNS`: ``model, metric, sink_share_bin, sink_share_low,
        sink_share_high, sink_share_rounding, sink_gap_bin, sink_gap_low, sink_gap_high,
        sink_gap_rounding``, then those of ``table`` from ``n_triplets`` on. A cell's
        ``n_edge`` counts the triplets within rounding of an interior edge of either
        coordinate bounding it.
    share_edges, gap_edges : ndarray
        The bin edges used.
    squares : SquaredSplit
        The head-level means of ``d_A^2`` and its sink term.
    """

    model: str
    table: pd.DataFrame
    grid: pd.DataFrame = field(repr=False)
    share_edges: np.ndarray = field(repr=False)
    gap_edges: np.ndarray = field(repr=False)
    squares: SquaredSplit = field(repr=False)


def safety_map(  # params: the public call's keywords, each documented below
    head_rows: HeadRows,
    metrics: Sequence[str] = FLIP_METRICS,
    *,
    flips_result: FlipsResult | None = None,
    n_bins: int = 5,
    share_edges: Sequence[float] | None = None,
    gap_edges: Sequence[float] | None = None,
    tol: float | None = None,
    threshold: float = DEFAULT_SAFE_THRESHOLD,
) -> SafetyResult:
    """Flip rate of keep vs drop per bin of sink share and of sink-mass gap.

    Parameters
    ----------
    head_rows : HeadRows
        Recorded rows of every head.
    metrics : sequence of str
        Classic metrics, as for :func:`attncoda.experiments.flips.flips`.
    flips_result : FlipsResult, optional
        A result of ``flips`` on the same ``head_rows``: its head distances, their rounding
        (and ``tol``) are reused instead of being computed again; one recorded before the
        rounding was stored is refused (run flips again).
    n_bins : int
        Quantile bins over all triplets for each coordinate whose edges are not given
        (repeated quantiles merge, so there may be fewer).
    share_edges, gap_edges : sequence of float, optional
        Fixed, strictly increasing edges; they must cover every value (both coordinates lie
        in ``[0, 1]``).
    tol : float, optional
        Relative tie tolerance, as in ``flips`` (default: that of ``flips_result``, else
        ``1e-9``).
    threshold : float
        A bin or cell is safe when the upper end of its 95% interval on the flip rate lies
        below this (a flip rate, strictly between 0 and 1; default 0.05).

    Returns
    -------
    SafetyResult
        ``.table`` (per bin of each coordinate) and ``.grid`` (per cell of both); their
        totals per metric equal the counts of ``flips``.
    """
    metrics = check_metrics(metrics)
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise AttncodaError(f"n_bins must be a positive int; got {n_bins!r}")
    ok = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    if not (ok and 0 < threshold < 1):
        raise AttncodaError(
            f"threshold must be a flip rate strictly between 0 and 1; got {threshold!r}"
        )
    tol = _resolve_tol(tol, flips_result)
    distances, rounding = _distances(head_rows, metrics, flips_result)
    squares = mean_squared_split(head_rows)
    grid = _binned(head_rows, squares, n_bins, share_edges, gap_edges)
    grid_rows, table_rows = [], []
    for metric in metrics:
        keep, drop = (metric, "keep"), (metric, "drop")
        pair = (rounding[keep], rounding[drop])
        counts = cell_counts(distances[keep], distances[drop], grid.cells, tol, rounding=pair)
        grid_rows += _grid_rows((head_rows.model, metric), grid, counts, threshold)
        table_rows += _bin_rows((head_rows.model, metric), grid, counts, threshold)
    return SafetyResult(
        model=head_rows.model,
        table=_frame(table_rows, SAFETY_COLUMNS),
        grid=_frame(grid_rows, GRID_COLUMNS),
        share_edges=grid.share.edges,
        gap_edges=grid.gap.edges,
        squares=squares,
    )


@dataclass(frozen=True, eq=False)
class _Axis:
    """The bins of one coordinate: ``kind`` (:data:`BIN_KINDS`), ``edges`` and how far
    rounding moves each (``rounding``, shape (bin + 1,), the coordinate's units), and per
    bin the triplets that can move into or out of it (``near``, int64, shape (bin,))."""

    kind: str
    edges: np.ndarray
    rounding: np.ndarray
    near: np.ndarray


@dataclass(frozen=True, eq=False)
class _Grid:
    """Every triplet binned by both coordinates: the two axes, the cell of each triplet,
    and per cell (share bin major) its triplets and those that can move into or out of it."""

    share: _Axis
    gap: _Axis
    cells: TripletCells
    n_triplets: np.ndarray
    near: np.ndarray


def _binned(
    head_rows: HeadRows, squares: SquaredSplit, n_bins: int,
    share_edges: Sequence[float] | None, gap_edges: Sequence[float] | None,
) -> _Grid:  # fmt: skip
    """The triplets' coordinates (sink share of ``d_A^2``, sink-mass gap), their bins (the
    edges given, or ``n_bins`` quantiles) with the edges' rounding, the cell of each
    triplet and the triplets within rounding of a bin edge."""
    mass = np.asarray(head_rows.sink_mass, float)
    share, gap, valid, _ = triplet_coordinates(squares, mass)
    counted = share[valid]
    # A share's rounding is read only near the edges; every one is within the reach.
    reach = share_reach(squares, float(counted.max(initial=0.0)))
    e_share = partial(share_rounding, squares, share)
    e_gap = gap_rounding(squares, mass)
    # The quantiles partition the shares counted, in place: the edges' rounding reads them.
    s_bins = Binning(
        bin_edges(counted, n_bins, share_edges, "sink_share", overwrite=True), n_bins, share_edges
    )
    g_bins = Binning(bin_edges(gap, n_bins, gap_edges, "sink_gap"), n_bins, gap_edges)
    s_round = edge_rounding(share, e_share, s_bins, where=valid, reach=reach, ranked=counted)
    del counted
    g_round = edge_rounding(gap, e_gap, g_bins)
    s_edges, g_edges = s_bins.edges, g_bins.edges
    n_s, n_g = len(s_edges) - 1, len(g_edges) - 1
    s_bin, g_bin = assign_bins(share, s_edges), assign_bins(gap, g_edges)
    edge, share_edge, gap_edge = edge_counts(
        bin_reach(share, e_share, s_edges, s_round, reach=reach),
        bin_reach(gap, e_gap, g_edges, g_round),
        (s_bin, g_bin),
        valid,
        (n_s, n_g),
    )
    cell = (s_bin * n_g + g_bin[None, :]).astype(np.int32)
    del share, e_share, s_bin
    return _Grid(
        share=_Axis("sink_share", s_edges, s_round, share_edge),
        gap=_Axis("sink_gap", g_edges, g_round, gap_edge),
        cells=TripletCells(cell, valid, n_s * n_g),
        n_triplets=np.bincount(cell[valid], minlength=n_s * n_g),
        near=edge,
    )


def _grid_rows(key: tuple[str, str], grid: _Grid, counts: tuple, threshold: float) -> list:
    """The rows of the grid table of one (model, metric) ``key``: one per cell, its bins'
    ranges and rounding, then :func:`cell_values` of its ``counts`` (ties, flips, fragile
    triplets per cell, :func:`cell_counts`)."""
    ties, flip, fragile = counts
    s, g = grid.share, grid.gap
    rows = []
    for i in range(len(s.edges) - 1):
        for j in range(len(g.edges) - 1):
            k = i * (len(g.edges) - 1) + j
            rows.append((
                *key, i, s.edges[i], s.edges[i + 1], max(s.rounding[i], s.rounding[i + 1]),
                j, g.edges[j], g.edges[j + 1], max(g.rounding[j], g.rounding[j + 1]),
                *cell_values(
                    grid.n_triplets[k], ties[k], flip[k], threshold, fragile[k], grid.near[k]
                ),
            ))  # fmt: skip
    return rows


def _bin_rows(key: tuple[str, str], grid: _Grid, counts: tuple, threshold: float) -> list:
    """The rows of the table of one (model, metric) ``key``: one per bin of each coordinate
    (its cells summed over the other's bins), as :func:`_grid_rows` states a cell."""
    rows = []
    shape = (len(grid.share.edges) - 1, len(grid.gap.edges) - 1)
    for axis, bins in ((1, grid.share), (0, grid.gap)):
        tot, tie, fl, fr = (a.reshape(shape).sum(axis=axis) for a in (grid.n_triplets, *counts))
        edges, moved = bins.edges, bins.rounding
        for b in range(len(edges) - 1):
            rows.append((
                *key, bins.kind, b, edges[b], edges[b + 1], max(moved[b], moved[b + 1]),
                *cell_values(tot[b], tie[b], fl[b], threshold, fr[b], bins.near[b]),
            ))  # fmt: skip
    return rows


_INTS = (
    "bin", "sink_share_bin", "sink_gap_bin", "n_triplets", "n_ties", "flips", "n_decided",
    "n_fragile", "n_edge",
)  # fmt: skip
_FLOATS = (
    "bin_low", "bin_high", "bin_rounding", "sink_share_low", "sink_share_high",
    "sink_share_rounding", "sink_gap_low", "sink_gap_high", "sink_gap_rounding",
    "flip_rate", "flip_rate_low", "flip_rate_high", "safe_threshold", "rate_rounding",
    "ci_rounding",
)  # fmt: skip


def _frame(rows: list, columns: tuple[str, ...]) -> pd.DataFrame:
    """The rows as a typed table of ``columns``."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=list(columns))
    types = {c: "int64" for c in _INTS if c in df} | {c: "float64" for c in _FLOATS if c in df}
    types["safe"] = types["safe_edge"] = "bool"
    types["ci_method"] = "str"
    return df.astype(types)


def _resolve_tol(tol: float | None, flips_result: FlipsResult | None) -> float:
    if tol is None:
        return flips_result.tol if flips_result is not None else DEFAULT_TOL
    tol = check_tol(tol)
    if flips_result is not None and tol != flips_result.tol:
        raise AttncodaError(
            f"tol={tol!r} differs from the tol={flips_result.tol!r} of flips_result; "
            "leave tol out to use it"
        )
    return tol


Matrices = dict[tuple[str, str], np.ndarray]


def _distances(
    head_rows: HeadRows, metrics: tuple[str, ...], flips_result: FlipsResult | None
) -> tuple[Matrices, Matrices]:
    """The head distances of each (metric, convention) and their rounding: those of
    ``flips_result``, or computed as flips computes them."""
    if flips_result is None:
        # The row entropies (the distances' rounding magnitudes) once per convention.
        entropies = {c: entropy_sums(head_rows, c) for c in ("keep", "drop")}
        sums = {
            (m, c): document_sums(head_rows, m, c, entropies=entropies[c])
            for m in metrics
            for c in ("keep", "drop")
        }
        return {k: v.distances for k, v in sums.items()}, {k: v.rounding for k, v in sums.items()}
    if flips_result.model != head_rows.model:
        raise AttncodaError(
            f"flips_result is for model {flips_result.model!r}, not {head_rows.model!r}"
        )
    missing = [m for m in metrics if (m, "keep") not in flips_result.distances]
    if missing:
        raise AttncodaError(
            f"flips_result has no distances for metric {missing[0]!r}; run flips with it"
        )
    missing = [m for m in metrics if (m, "keep") not in flips_result.rounding]
    if missing:
        raise AttncodaError(
            f"flips_result has no rounding of the distances of metric {missing[0]!r} (a "
            "flips result recorded before it was stored); run flips again"
        )
    return flips_result.distances, flips_result.rounding
