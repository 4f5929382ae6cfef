"""Where keep and drop agree: the run of safe bins of a safety table, in numbers and in
words (docs/design.md, "The experiments").

A bin whose verdict lies on the edge (``safe_edge``: the upper end of its interval within
rounding of the threshold) is safe on one machine and not on another. The region is the
run of bins safe beyond rounding; the bins on the edge right after it are named apart, as
how far the region may reach, and never counted in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda.experiments.contract import CLOPPER_PEARSON, flip_rate_interval

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["REGION_COLUMNS", "safe_regions"]

#: Columns of :func:`safe_regions`.
REGION_COLUMNS = (
    "model",
    "metric",
    "bin_kind",
    "n_bins",
    "n_safe_bins",
    "safe_below",
    "n_edge_bins",
    "edge_below",
    "n_decided",
    "flips",
    "flip_rate",
    "flip_rate_high",
    "ci_method",
    "safe_threshold",
    "statement",
)


def safe_regions(table: pd.DataFrame) -> pd.DataFrame:
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
        bins from the lowest that are safe beyond rounding (safe, and not on the edge:
        ``safe_edge``, where the table has it); ``safe_below`` is the upper edge of the
        last of them (NaN when there is none). ``n_edge_bins`` counts the bins after them
        that the region may still reach: from the first bin on the edge (safe or not by
        rounding) on, every bin safe or on the edge; ``edge_below`` is the upper edge of
        the last of them (NaN when there is none).
        ``n_decided``, ``flips``, ``flip_rate`` and ``flip_rate_high`` pool the safe bins
        (for ``"all"``: the worst metric's upper end); ``ci_method`` names the interval
        (``"Clopper-Pearson over triplets"``, its n ``n_decided``). ``statement`` says it in
        words.
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
            reach = min(r["n_safe_bins"] + r["n_edge_bins"] for r in per_metric.values())
            bins = sorted(dict.fromkeys(k["bin"]))
            threshold = float(k["safe_threshold"].iloc[0])
            forced = [
                _region(mg, threshold, force=(n_all, reach))
                for _, mg in k.groupby("metric", sort=False)
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


def _leading(flags: np.ndarray) -> int:
    """How many of ``flags`` are set before the first that is not."""
    return len(flags) if flags.all() else int(np.argmin(flags))


def _region(
    bins: pd.DataFrame,
    threshold: float,
    *,
    n_bins: int | None = None,
    force: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The safe run of one metric's bins (sorted by ``bin``), pooled: the bins safe beyond
    rounding, then those on the edge after them (``force``: both lengths given)."""
    bins = bins.sort_values("bin")
    safe = bins["safe"].to_numpy(bool)
    edge = (
        bins["safe_edge"].fillna(False).to_numpy(bool)
        if "safe_edge" in bins.columns
        else np.zeros(len(bins), bool)
    )
    if force is not None:
        n_safe, reach = (int(f) for f in force)
    else:
        n_safe, reach = _leading(safe & ~edge), _leading(safe | edge)
    run = bins.iloc[:n_safe]
    decided = int((run["n_triplets"] - run["n_ties"]).sum())
    flips = int(run["flips"].sum())
    high = flip_rate_interval(flips, decided)[1] if n_safe else float("nan")
    region: dict[str, Any] = {
        "n_bins": int(n_bins if n_bins is not None else len(bins)),
        "n_safe_bins": n_safe,
        "safe_below": float(run["bin_high"].iloc[-1]) if n_safe else float("nan"),
        "n_edge_bins": reach - n_safe,
        "edge_below": float(bins["bin_high"].iloc[reach - 1]) if reach > n_safe else float("nan"),
        "n_decided": decided,
        "flips": flips,
        "flip_rate": flips / decided if decided else float("nan"),
        "flip_rate_high": high,
        "ci_method": CLOPPER_PEARSON,
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
    threshold = f"{region['safe_threshold']:.0%}"
    edge = region["n_edge_bins"]
    if not region["n_safe_bins"]:
        if edge:
            reach = "" if edge == 1 else f"; the region may reach {region['edge_below']:.3g}"
            return (
                f"no region of {name} is safe beyond rounding for {metrics}: in its lowest "
                f"bin the upper 95% Clopper-Pearson bound of the flip rate is "
                f"{lowest_high:.1%}, within rounding of {threshold} (on the edge: safe or not "
                f"by rounding){reach}"
            )
        return (
            f"no region of {name} is safe for {metrics}: in its lowest bin the upper 95% "
            f"Clopper-Pearson bound of the flip rate is {lowest_high:.1%}, not below "
            f"{threshold}"
        )
    whole = region["n_safe_bins"] == region["n_bins"]
    where = (
        f"at every value of {name}"
        if whole
        else (f"when {name} is below {region['safe_below']:.3g}")
    )
    said = (
        f"{where}, keep and drop agree on >= {agree:.0%} of verdicts for {metrics} "
        f"(flip rate {region['flip_rate']:.1%}, upper 95% Clopper-Pearson bound "
        f"{region['flip_rate_high']:.1%} over {region['n_decided']:,} decided triplets)"
    )
    if edge:
        said += (
            f"; bins on the edge follow it (their upper bound within rounding of {threshold}: "
            f"safe or not by rounding), so the region may reach {region['edge_below']:.3g}"
        )
    return said
