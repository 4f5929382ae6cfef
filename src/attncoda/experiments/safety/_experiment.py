r"""Safety map: where the keep / drop choice flips verdicts, and where it is safe
(docs/design.md, "The experiments").

Every triplet ``(A; B, C)`` of :mod:`attncoda.experiments.flips` gets two coordinates:

- **sink share** — how much of the Aitchison geometry of the triplet is the sink:

  .. math:: \sigma(A; B, C) = \frac{S(A, B) + S(A, C)}{T(A, B) + T(A, C)}

  with ``T(A, B)`` the mean over used rows of ``d_A(p_A, p_B)^2`` and ``S(A, B)`` the mean of
  the sink term ``(b_A - b_B)^2`` (``b`` the sink balance), both in nats². It lies in
  ``[0, 1]`` (the split is orthogonal); a triplet whose three heads have identical rows
  (``T = 0``) gets share 0.
- **sink-mass gap** — ``|s_B - s_C|``, the difference of the mean sink masses
  (``HeadRows.sink_mass``) of the two heads being ranked.

Triplets are binned on each coordinate (quantile bins over all triplets by default, or fixed
edges), and the flip rate of keep vs drop is reported per bin and per cell of both binnings.

**Where it is safe.** Each bin and cell carries the two-sided 95% Clopper-Pearson interval
of its flip rate (flips among the decided triplets), and names it: ``ci_method`` is
``"Clopper-Pearson over triplets"`` and ``n_decided`` its n. A bin or cell is **safe** when
the upper end of that interval lies below ``threshold`` (default 5%): there, keep and drop
agree on at least ``1 - threshold`` of the verdicts with 95% confidence. The interval treats
triplets as independent draws; triplets that share heads and documents are not, so it is the
narrowest honest interval, not a conservative one. :func:`safe_regions` turns the bins into
a statement per model: the run of safe bins from the lowest value up ("when the sink-mass
gap between the two heads is below 0.03, keep and drop agree on >= 95% of verdicts"), or
that no bin is safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    DEFAULT_TOL,
    FLIP_METRICS,
    Command,
    Experiment,
    HeadRows,
    Inputs,
    Tables,
    View,
    check_metrics,
    check_tol,
    setting,
)
from attncoda.experiments.flips import FlipsResult, document_sums, entropy_sums
from attncoda.experiments.safety._bins import (
    CELL_COLUMNS,
    GRID_KEYS,
    assign_bins,
    bin_edges,
    cell_counts,
    cell_values,
)
from attncoda.experiments.safety._figure import draw
from attncoda.experiments.safety._section import safety_section
from attncoda.experiments.safety._split import (
    SquaredSplit,
    mean_squared_split,
    triplet_coordinates,
)
from attncoda.experiments.safety._summary import summary

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXPERIMENT",
    "GRID_COLUMNS",
    "SAFETY_COLUMNS",
    "DEFAULT_SAFE_THRESHOLD",
    "SafetyResult",
    "Settings",
    "safety_map",
]

#: A bin is safe when the upper end of its 95% interval on the flip rate is below this.
DEFAULT_SAFE_THRESHOLD = 0.05

SAFETY_COLUMNS = ("model", "metric", "bin_kind", "bin", "bin_low", "bin_high", *CELL_COLUMNS)
GRID_COLUMNS = (*GRID_KEYS, *CELL_COLUMNS)
BIN_KINDS = ("sink_share", "sink_gap")


@dataclass(frozen=True, eq=False)
class SafetyResult:
    """Flip rate of keep vs drop binned by sink share and by sink-mass gap.

    Attributes
    ----------
    model : str
        The model spec.
    table : pandas.DataFrame
        Columns ``model, metric, bin_kind, bin, bin_low, bin_high, n_triplets, n_ties,
        flips, flip_rate, flip_rate_low, flip_rate_high, ci_method, n_decided,
        safe_threshold, safe``; ``bin_kind`` is ``"sink_share"`` or ``"sink_gap"``. Bins
        are ``[bin_low, bin_high)``, the last one closed. ``flip_rate`` is NaN exactly where
        a bin has no decided triplet; ``flip_rate_low``/``flip_rate_high`` are its 95%
        interval, ``ci_method`` (``"Clopper-Pearson over triplets"``) over ``n_decided =
        n_triplets - n_ties`` triplets (``[0, 1]`` without decided triplets), and ``safe``
        is ``flip_rate_high < safe_threshold``.
    grid : pandas.DataFrame
        The same counts over both binnings at once (one row per cell, every cell listed),
        columns ``model, metric, sink_share_bin, sink_share_low, sink_share_high,
        sink_gap_bin, sink_gap_low, sink_gap_high, n_triplets, n_ties, flips, flip_rate,
        flip_rate_low, flip_rate_high, ci_method, n_decided, safe_threshold, safe``.
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


def safety_map(
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
        A result of ``flips`` on the same ``head_rows``: its head distances (and ``tol``)
        are reused instead of being computed again.
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
    import pandas as pd

    metrics = check_metrics(metrics)
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise AttncodaError(f"n_bins must be a positive int; got {n_bins!r}")
    ok = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    if not (ok and 0 < threshold < 1):
        raise AttncodaError(
            f"threshold must be a flip rate strictly between 0 and 1; got {threshold!r}"
        )
    tol = _resolve_tol(tol, flips_result)
    distances = _distances(head_rows, metrics, flips_result)
    squares = mean_squared_split(head_rows)
    share, gap, valid, _ = triplet_coordinates(squares, np.asarray(head_rows.sink_mass, float))
    s_edges = bin_edges(share[valid], n_bins, share_edges, "sink_share")
    g_edges = bin_edges(gap, n_bins, gap_edges, "sink_gap")
    n_s, n_g = len(s_edges) - 1, len(g_edges) - 1
    cell = assign_bins(share, s_edges) * n_g + assign_bins(gap, g_edges)[None, :]
    cell = cell.astype(np.int32)
    del share
    n_triplets = np.bincount(cell[valid], minlength=n_s * n_g)
    grid_rows, table_rows = [], []
    for metric in metrics:
        ties, flip = cell_counts(
            distances[(metric, "keep")], distances[(metric, "drop")], cell, valid, tol, n_s * n_g
        )
        for i in range(n_s):
            for j in range(n_g):
                k = i * n_g + j
                grid_rows.append(
                    (
                        head_rows.model,
                        metric,
                        i,
                        s_edges[i],
                        s_edges[i + 1],
                        j,
                        g_edges[j],
                        g_edges[j + 1],
                        *cell_values(n_triplets[k], ties[k], flip[k], threshold),
                    )
                )
        for kind, axis, edges in (("sink_share", 1, s_edges), ("sink_gap", 0, g_edges)):
            shape = (n_s, n_g)
            tot, tie, fl = (a.reshape(shape).sum(axis=axis) for a in (n_triplets, ties, flip))
            for b in range(len(edges) - 1):
                table_rows.append(
                    (
                        head_rows.model,
                        metric,
                        kind,
                        b,
                        edges[b],
                        edges[b + 1],
                        *cell_values(tot[b], tie[b], fl[b], threshold),
                    )
                )
    ints = ("bin", "sink_share_bin", "sink_gap_bin", "n_triplets", "n_ties", "flips", "n_decided")
    floats = (
        "bin_low",
        "bin_high",
        "sink_share_low",
        "sink_share_high",
        "sink_gap_low",
        "sink_gap_high",
        "flip_rate",
        "flip_rate_low",
        "flip_rate_high",
        "safe_threshold",
    )

    def frame(rows: list, columns: tuple[str, ...]) -> pd.DataFrame:
        df = pd.DataFrame(rows, columns=list(columns))
        types = {c: "int64" for c in ints if c in df} | {c: "float64" for c in floats if c in df}
        types["safe"] = "bool"
        types["ci_method"] = "str"
        return df.astype(types)

    return SafetyResult(
        model=head_rows.model,
        table=frame(table_rows, SAFETY_COLUMNS),
        grid=frame(grid_rows, GRID_COLUMNS),
        share_edges=s_edges,
        gap_edges=g_edges,
        squares=squares,
    )


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


def _distances(
    head_rows: HeadRows, metrics: tuple[str, ...], flips_result: FlipsResult | None
) -> dict[tuple[str, str], np.ndarray]:
    if flips_result is None:
        # The row entropies (the distances' rounding magnitudes) once per convention.
        entropies = {c: entropy_sums(head_rows, c) for c in ("keep", "drop")}
        return {
            (m, c): document_sums(head_rows, m, c, entropies=entropies[c]).distances
            for m in metrics
            for c in ("keep", "drop")
        }
    if flips_result.model != head_rows.model:
        raise AttncodaError(
            f"flips_result is for model {flips_result.model!r}, not {head_rows.model!r}"
        )
    missing = [m for m in metrics if (m, "keep") not in flips_result.distances]
    if missing:
        raise AttncodaError(
            f"flips_result has no distances for metric {missing[0]!r}; run flips with it"
        )
    return flips_result.distances


@dataclass(frozen=True)
class Settings:
    """Settings of the safety experiment."""

    n_bins: int = setting(5, "quantile bins of sink share and of sink-mass gap", at_least=1)
    threshold: float = setting(
        DEFAULT_SAFE_THRESHOLD,
        "a bin is safe when the upper 95 percent bound of its flip rate is below this",
        above=0.0,
        at_most=1.0,
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The safety map of the unit's recorded rows, from the head distances of its flips
    unit (same model and revision), for the metrics flips measured."""
    flips_result = FlipsResult.from_tables(inputs.model, inputs.tables_of("flips"))
    result = safety_map(
        inputs.need("rows"),
        tuple(str(m) for m in flips_result.table["metric"]),
        flips_result=flips_result,
        n_bins=settings.n_bins,
        threshold=settings.threshold,
    )
    return Tables(frames={"safety": result.table, "safety_grid": result.grid})


EXPERIMENT = Experiment(
    name="safety",
    needs=("rows",),
    after=("flips",),
    cost=4.0,
    settings=Settings,
    run=run,
    tables=("safety", "safety_grid"),
    view=View(
        title="Safety map: where each convention is safe",
        needs=("safety",),
        section=safety_section,
        figure_tables=("safety_grid",),
        figure=draw,
    ),
    command=Command(
        help="flip rate by sink share and sink-mass gap",
        sources="models+",
        summary=summary,
        doc="The flip rate by sink share and sink-mass gap, and where keep and drop agree.",
        flags={"n_bins": ("--n-bins", "--bins"), "threshold": ("--threshold", "--safe-threshold")},
    ),
)
