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
of its flip rate (flips among the decided triplets). A bin or cell is **safe** when the upper
end of that interval lies below ``threshold`` (default 5%): there, keep and drop agree on at
least ``1 - threshold`` of the verdicts with 95% confidence. The interval treats triplets
as independent draws; triplets that share heads and documents are not, so it is the
narrowest honest interval, not a conservative one. :func:`safe_regions` turns the bins into
a statement per model: the run of safe bins from the lowest value up ("when the sink-mass
gap between the two heads is below 0.03, keep and drop agree on >= 95% of verdicts"), or
that no bin is safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Experiment, Inputs, Tables
from attncoda.experiments.flips import (
    DEFAULT_TOL,
    FLIP_METRICS,
    FlipsResult,
    _check_metrics,
    _check_tol,
    _rate,
    document_sums,
    tie_tolerance,
)
from attncoda.experiments.inputs import HeadRows

__all__ = [
    "EXPERIMENT",
    "GRID_COLUMNS",
    "SAFETY_COLUMNS",
    "DEFAULT_SAFE_THRESHOLD",
    "REGION_COLUMNS",
    "SafetyResult",
    "Settings",
    "SquaredSplit",
    "flip_rate_interval",
    "mean_squared_split",
    "safe_regions",
    "safety_map",
    "triplet_coordinates",
]

#: A bin is safe when the upper end of its 95% interval on the flip rate is below this.
DEFAULT_SAFE_THRESHOLD = 0.05
_CI_LEVEL = 0.95

SAFETY_COLUMNS = (
    "model",
    "metric",
    "bin_kind",
    "bin",
    "bin_low",
    "bin_high",
    "n_triplets",
    "n_ties",
    "flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "safe_threshold",
    "safe",
)
GRID_COLUMNS = (
    "model",
    "metric",
    "sink_share_bin",
    "sink_share_low",
    "sink_share_high",
    "sink_gap_bin",
    "sink_gap_low",
    "sink_gap_high",
    "n_triplets",
    "n_ties",
    "flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "safe_threshold",
    "safe",
)
#: Columns of :func:`safe_regions`.
REGION_COLUMNS = (
    "model",
    "metric",
    "bin_kind",
    "n_bins",
    "n_safe_bins",
    "safe_below",
    "n_decided",
    "flips",
    "flip_rate",
    "flip_rate_high",
    "safe_threshold",
    "statement",
)
BIN_KINDS = ("sink_share", "sink_gap")

_BLOCK_ELEMS = 1 << 22  # triplets per block of heads A


@dataclass(frozen=True)
class SquaredSplit:
    """Head-by-head means of squared Aitchison distances and of their sink term.

    Attributes
    ----------
    total : ndarray, shape (head, head)
        ``T(A, B)``: mean over used rows (every sink key present, ``m >= 2``) of
        ``d_A(p_A, p_B)^2``, in nats².
    sink : ndarray, shape (head, head)
        ``S(A, B)``: mean over the same rows of ``(b_A - b_B)^2``, in nats²;
        ``0 <= S <= T``.
    n_rows : int
        The used rows (per head).
    """

    total: np.ndarray
    sink: np.ndarray
    n_rows: int

    @property
    def sink_share(self) -> float:
        """Share of all pairwise ``d_A^2`` that is the sink term: ``sum S / sum T`` over pairs."""
        total = float(self.total.sum())
        return float(self.sink.sum()) / total if total > 0 else 0.0


def mean_squared_split(head_rows: HeadRows) -> SquaredSplit:
    r"""Means over rows of ``d_A^2`` and of its sink term for every pair of heads.

    The Aitchison distance splits as ``d_A^2 = (b - b')^2 + d_A(p_S, p'_S)^2 + d_A(q, q')^2``
    (docs/design.md, "The mathematics"). This averages ``d_A^2`` and ``(b - b')^2`` (not the
    distances) over the rows :func:`attncoda.head_distances` uses — every sink key present, at least
    two content keys — pooled over documents. Per document both are Gram matrices of the flattened
    clr rows and of the sink balances: ``sum_r ||x_a - x_b||^2 = |x_a|^2 + |x_b|^2 - 2 x_a.x_b``.

    Parameters
    ----------
    head_rows : HeadRows
        Recorded log-probability rows (log-probabilities or logits: both terms are
        shift-invariant).

    Returns
    -------
    SquaredSplit
        ``total`` and ``sink`` of shape (head, head), in nats².

    Raises
    ------
    AttncodaError
        When a present key has a non-finite log-probability, or no row has content.
    """
    n = head_rows.n_layers * head_rows.n_heads
    total = np.zeros((n, n))
    sink = np.zeros((n, n))
    n_rows = 0
    for i, doc in enumerate(head_rows.docs):
        mask = np.asarray(doc.key_mask, dtype=bool)
        is_sink = np.zeros(mask.shape[1], dtype=bool)
        is_sink[list(doc.sink)] = True
        k = len(doc.sink)
        used = mask[:, is_sink].all(axis=1) & (mask.sum(axis=1) - k >= 2)
        if not used.any():
            continue
        mask = mask[used]
        z = np.asarray(doc.logp, dtype=np.float64)[:, used, :]
        bad = mask[None] & ~np.isfinite(z)
        if bad.any():
            raise AttncodaError(
                f"document {i} of {head_rows.model!r} has a non-finite log-probability at "
                f"(head, row, key) {tuple(int(j) for j in np.argwhere(bad)[0])} of a used "
                "row: the Aitchison split needs every present key to have positive mass"
            )
        z = np.where(mask[None], z, 0.0)
        content = mask & ~is_sink
        n_keys, m = mask.sum(axis=1), content.sum(axis=1)
        clr = np.where(mask[None], z - (z.sum(axis=2) / n_keys)[..., None], 0.0)
        mean_s = (z * is_sink).sum(axis=2) / k
        mean_c = (z * content).sum(axis=2) / m
        balance = np.sqrt(k * m / (k + m)) * (mean_s - mean_c)  # (head, row)
        total += _gram_sq_sums(clr.reshape(n, -1))
        sink += _gram_sq_sums(balance)
        n_rows += int(used.sum())
    if n_rows == 0:
        raise AttncodaError(
            f"model {head_rows.model!r} has no recorded row with every sink key present and "
            "at least 2 content keys: head distances are means over such rows"
        )
    return SquaredSplit(total=total / n_rows, sink=sink / n_rows, n_rows=n_rows)


def _gram_sq_sums(x: np.ndarray) -> np.ndarray:
    """``sum ||x_a - x_b||^2`` over the last axis for every pair, via one Gram matrix."""
    x = x - x.mean(axis=0)  # distances are translation-invariant; this limits cancellation
    sq = np.einsum("ij,ij->i", x, x)
    scale = sq[:, None] + sq[None, :]
    out = np.clip(scale - 2 * (x @ x.T), 0.0, None)
    # The Gram difference cancels for nearly equal heads: recompute those pairs directly.
    a, b = np.nonzero(np.triu(out <= 1e-6 * scale, 1))
    step = max(1, _BLOCK_ELEMS // max(1, x.shape[1]))
    for k in range(0, len(a), step):
        diff = x[a[k : k + step]] - x[b[k : k + step]]
        out[a[k : k + step], b[k : k + step]] = np.einsum("ij,ij->i", diff, diff)
    out = np.triu(out, 1)
    return out + out.T


def triplet_coordinates(
    squares: SquaredSplit, sink_mass: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sink share and sink-mass gap of every triplet.

    Parameters
    ----------
    squares : SquaredSplit
        From :func:`mean_squared_split`.
    sink_mass : ndarray, shape (head,)
        Mean sink mass of each head.

    Returns
    -------
    share : ndarray, shape (head, pair)
        ``sigma(A; B, C)`` for head ``A`` (row) and pair ``(B, C) = (b[j], c[j])``;
        entries with ``A`` in the pair are meaningless and masked by ``valid``.
    gap : ndarray, shape (pair,)
        ``|s_B - s_C|``.
    valid : ndarray of bool, shape (head, pair)
        ``A`` not in ``{B, C}``.
    pairs : ndarray of int, shape (2, pair)
        ``b < c``, the pairs in ``numpy.triu_indices`` order.
    """
    n = squares.total.shape[0]
    b, c = np.triu_indices(n, 1)
    share = np.empty((n, len(b)))
    step = max(1, _BLOCK_ELEMS // max(1, len(b)))
    for a0 in range(0, n, step):
        a = slice(a0, a0 + step)
        num = squares.sink[a][:, b] + squares.sink[a][:, c]
        den = squares.total[a][:, b] + squares.total[a][:, c]
        ratio = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
        share[a] = np.clip(ratio, 0.0, 1.0)
    heads = np.arange(n)[:, None]
    valid = (heads != b[None, :]) & (heads != c[None, :])
    gap = np.abs(sink_mass[b] - sink_mass[c])
    return share, gap, valid, np.stack([b, c])


@dataclass(frozen=True, eq=False)
class SafetyResult:
    """Flip rate of keep vs drop binned by sink share and by sink-mass gap.

    Attributes
    ----------
    model : str
        The model spec.
    table : pandas.DataFrame
        Columns ``model, metric, bin_kind, bin, bin_low, bin_high, n_triplets, n_ties,
        flips, flip_rate, flip_rate_low, flip_rate_high, safe_threshold, safe``;
        ``bin_kind`` is ``"sink_share"`` or ``"sink_gap"``. Bins are ``[bin_low,
        bin_high)``, the last one closed. ``flip_rate`` is NaN exactly where a bin has no
        decided triplet; ``flip_rate_low``/``flip_rate_high`` are its 95% Clopper-Pearson
        interval (``[0, 1]`` without decided triplets) and ``safe`` is
        ``flip_rate_high < safe_threshold``.
    grid : pandas.DataFrame
        The same counts over both binnings at once (one row per cell, every cell listed),
        columns ``model, metric, sink_share_bin, sink_share_low, sink_share_high,
        sink_gap_bin, sink_gap_low, sink_gap_high, n_triplets, n_ties, flips, flip_rate,
        flip_rate_low, flip_rate_high, safe_threshold, safe``.
    share_edges, gap_edges : ndarray
        The bin edges used.
    squares : SquaredSplit
        The head-level means of ``d_A^2`` and its sink term.
    """

    model: str
    table: Any
    grid: Any = field(repr=False)
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

    metrics = _check_metrics(metrics)
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
    s_edges = _edges(share[valid], n_bins, share_edges, "sink_share")
    g_edges = _edges(gap, n_bins, gap_edges, "sink_gap")
    n_s, n_g = len(s_edges) - 1, len(g_edges) - 1
    cell = (_assign(share, s_edges) * n_g + _assign(gap, g_edges)[None, :]).astype(np.int32)
    del share
    n_triplets = np.bincount(cell[valid], minlength=n_s * n_g)
    grid_rows, table_rows = [], []
    for metric in metrics:
        ties, flip = _cell_counts(
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
                        n_triplets[k],
                        ties[k],
                        flip[k],
                        _rate(flip[k], n_triplets[k] - ties[k]),
                        *_safety(flip[k], n_triplets[k] - ties[k], threshold),
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
                        tot[b],
                        tie[b],
                        fl[b],
                        _rate(fl[b], tot[b] - tie[b]),
                        *_safety(fl[b], tot[b] - tie[b], threshold),
                    )
                )
    ints = ("bin", "sink_share_bin", "sink_gap_bin", "n_triplets", "n_ties", "flips")
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

    def frame(rows: list, columns: tuple[str, ...]) -> Any:
        df = pd.DataFrame(rows, columns=list(columns))
        types = {c: "int64" for c in ints if c in df} | {c: "float64" for c in floats if c in df}
        types["safe"] = "bool"
        return df.astype(types)

    return SafetyResult(
        model=head_rows.model,
        table=frame(table_rows, SAFETY_COLUMNS),
        grid=frame(grid_rows, GRID_COLUMNS),
        share_edges=s_edges,
        gap_edges=g_edges,
        squares=squares,
    )


def flip_rate_interval(flips: int, decided: int, level: float = _CI_LEVEL) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a flip rate ``flips / decided``.

    Parameters
    ----------
    flips, decided : int
        Flipped and decided (non-tied) triplets, ``0 <= flips <= decided``.
    level : float
        Confidence level (default 0.95).

    Returns
    -------
    (float, float)
        The interval; ``(0.0, 1.0)`` when nothing is decided.

    Examples
    --------
    >>> low, high = flip_rate_interval(0, 100)
    >>> low, round(high, 4)
    (0.0, 0.0362)
    """
    from scipy.stats import beta

    flips, decided = int(flips), int(decided)
    if not 0 <= flips <= decided:
        raise AttncodaError(f"need 0 <= flips <= decided; got flips={flips}, decided={decided}")
    if decided == 0:
        return 0.0, 1.0
    alpha = 1.0 - level
    low = 0.0 if flips == 0 else float(beta.ppf(alpha / 2, flips, decided - flips + 1))
    high = 1.0 if flips == decided else float(beta.ppf(1 - alpha / 2, flips + 1, decided - flips))
    return low, high


def _safety(flips: int, decided: int, threshold: float) -> tuple[float, float, float, bool]:
    low, high = flip_rate_interval(flips, decided)
    return low, high, float(threshold), bool(decided > 0 and high < threshold)


def safe_regions(table: Any) -> Any:
    """Where keep and drop agree: the run of safe bins from the lowest value up, per model.

    Parameters
    ----------
    table : pandas.DataFrame
        :attr:`SafetyResult.table` (or the run's ``safety`` table, which adds ``revision``).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`REGION_COLUMNS` (plus ``revision`` when the input has it): one row per
        (model, metric, bin kind), and one with ``metric == "all"`` where a bin counts as
        safe only when it is safe for every metric. ``n_safe_bins`` counts the consecutive
        safe bins from the lowest; ``safe_below`` is the upper edge of the last of them (NaN
        when the lowest bin is not safe). ``n_decided``, ``flips``, ``flip_rate`` and
        ``flip_rate_high`` pool those bins (for ``"all"``: the worst metric's upper end).
        ``statement`` says it in words.
    """
    import pandas as pd

    keys = ["model", "revision"] if "revision" in table.columns else ["model"]
    rows = []
    for key, g in table.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        for kind in dict.fromkeys(g["bin_kind"]):
            k = g[g["bin_kind"] == kind].sort_values("bin")
            per_metric = {
                m: _region(mg, float(mg["safe_threshold"].iloc[0]))
                for m, mg in k.groupby("metric", sort=False)
            }
            for metric, region in per_metric.items():
                rows.append(
                    {
                        **dict(zip(keys, key, strict=True)),
                        "metric": metric,
                        "bin_kind": kind,
                        **region,
                    }
                )
            # A bin is safe for every metric up to the first bin unsafe for any of them;
            # the pooled numbers are those of the worst metric over that run.
            n_all = min(r["n_safe_bins"] for r in per_metric.values())
            bins = sorted(dict.fromkeys(k["bin"]))
            threshold = float(k["safe_threshold"].iloc[0])
            forced = [
                _region(mg, threshold, force=n_all) for _, mg in k.groupby("metric", sort=False)
            ]
            region = max(forced, key=lambda r: (r["flip_rate_high"], r["flips"]))
            region = {**region, "n_bins": len(bins)}
            first = k[k["bin"] == bins[0]]
            region["statement"] = _statement(
                kind, region, "every metric", float(first["flip_rate_high"].max())
            )
            rows.append(
                {**dict(zip(keys, key, strict=True)), "metric": "all", "bin_kind": kind, **region}
            )
    columns = [*keys, *REGION_COLUMNS[1:]]
    return pd.DataFrame(rows, columns=columns)


_REGION_NAMES = {
    "sink_gap": "the sink-mass gap |s_B - s_C| between the two heads",
    "sink_share": "the sink share of d_A^2 of the triplet",
}


def _region(
    bins: Any, threshold: float, *, n_bins: int | None = None, force: int | None = None
) -> dict[str, Any]:
    """The safe run of one metric's bins (sorted by ``bin``), pooled."""
    bins = bins.sort_values("bin")
    safe = bins["safe"].to_numpy(bool)
    if force is not None:
        n_safe = int(force)
    else:
        n_safe = len(safe) if safe.all() else int(np.argmin(safe))
    run = bins.iloc[:n_safe]
    decided = int((run["n_triplets"] - run["n_ties"]).sum())
    flips = int(run["flips"].sum())
    high = flip_rate_interval(flips, decided)[1] if n_safe else float("nan")
    region = {
        "n_bins": int(n_bins if n_bins is not None else len(bins)),
        "n_safe_bins": n_safe,
        "safe_below": float(run["bin_high"].iloc[-1]) if n_safe else float("nan"),
        "n_decided": decided,
        "flips": flips,
        "flip_rate": flips / decided if decided else float("nan"),
        "flip_rate_high": high,
        "safe_threshold": threshold,
    }
    metric = str(bins["metric"].iloc[0])
    region["statement"] = _statement(
        str(bins["bin_kind"].iloc[0]), region, metric, float(bins["flip_rate_high"].iloc[0])
    )
    return region


def _statement(kind: str, region: Mapping[str, Any], metrics: str, lowest_high: float) -> str:
    name = _REGION_NAMES.get(kind, kind)
    agree = 1.0 - region["safe_threshold"]
    if not region["n_safe_bins"]:
        return (
            f"no region of {name} is safe for {metrics}: in its lowest bin the upper 95% "
            f"bound of the flip rate is {lowest_high:.1%}, not below "
            f"{region['safe_threshold']:.0%}"
        )
    whole = region["n_safe_bins"] == region["n_bins"]
    where = (
        f"at every value of {name}"
        if whole
        else (f"when {name} is below {region['safe_below']:.3g}")
    )
    return (
        f"{where}, keep and drop agree on >= {agree:.0%} of verdicts for {metrics} "
        f"(flip rate {region['flip_rate']:.1%}, upper 95% bound {region['flip_rate_high']:.1%}, "
        f"{region['n_decided']:,} decided triplets)"
    )


def _resolve_tol(tol: float | None, flips_result: FlipsResult | None) -> float:
    if tol is None:
        return flips_result.tol if flips_result is not None else DEFAULT_TOL
    tol = _check_tol(tol)
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
        return {
            (m, c): document_sums(head_rows, m, c).distances
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


def _edges(values: np.ndarray, n_bins: int, fixed: Any, name: str) -> np.ndarray:
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


def _assign(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Bin of each value: ``[e_i, e_(i+1))``, the last bin closed; int64, same shape."""
    return np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)


def _cell_counts(
    d_keep: np.ndarray,
    d_drop: np.ndarray,
    cell: np.ndarray,
    valid: np.ndarray,
    tol: float,
    n_cells: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Ties and flips per cell, triplet by triplet (the definition of ``triplet_flips``)."""
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


@dataclass(frozen=True)
class Settings:
    """Settings of the safety experiment."""

    n_bins: int = field(
        default=5, metadata={"help": "quantile bins of sink share and of sink-mass gap"}
    )
    threshold: float = field(
        default=DEFAULT_SAFE_THRESHOLD,
        metadata={
            "help": "a bin is safe when the upper 95 percent bound of its flip rate is below this"
        },
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
    settings=Settings,
    run=run,
    tables=("safety", "safety_grid"),
)
