"""The report section of the safety map: the flip rate keep vs drop by bin of the sink
share of d_A² and of the sink-mass gap, each bin's flip rate with the upper end of its 95%
Clopper-Pearson interval over its decided triplets, and where keep and drop agree.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attncoda.experiments.safety._figure import draw
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_count,
    fmt_num,
    fmt_pct,
    groups,
    is_missing,
    note,
    paper_vs_measured,
    table,
)

__all__ = ["safety_section"]


_BIN_KINDS = {"sink_share": "sink share of d_A²", "sink_gap": "sink-mass gap |s_B − s_C|"}


def safety_section(ctx: Context) -> str:
    """Flip rate keep vs drop by bin of the sink share of d_A² and of the sink-mass gap."""
    binned = ctx.tables.safety
    grid = ctx.optional.safety_grid
    convention = (
        "keep vs drop, binned by the Aitchison sink share of d_A² and the sink-mass gap "
        f"(sink = {ctx.sink})"
    )
    claims, parts = [], []
    has_bounds = "safe" in binned.columns
    regions = None
    if has_bounds:
        from attncoda.experiments.safety._regions import safe_regions

        regions = safe_regions(binned)
    for label, g in groups(binned):
        if regions is not None:
            ours = regions[
                (regions["model"] == g["model"].iloc[0])
                & (regions["revision"] == g["revision"].iloc[0])
            ]
            parts.append(_safe_region(label, g, ours))
            claims += _region_claims(label, ours)
        claims += _rate_claims(label, g)
        parts.append(_bins_table(label, g, has_bounds, convention))
        if grid is not None:
            parts.append(_heatmaps(label, g, grid, convention))
    return paper_vs_measured(convention, claims) + note(_HOW_TO_READ) + "".join(parts)


_HOW_TO_READ = (
    "The paper gives no number for this map; it shows where each convention is safe: "
    "verdicts should flip more where the sink term carries more of d_A² and where the "
    "heads' sink masses differ more. A bin is safe when the upper end of the 95% "
    "Clopper-Pearson interval of its flip rate lies below the threshold; the safe region "
    "is the run of safe bins from the lowest value up, for every metric at once. The "
    "interval treats triplets as independent, which they are not (they share heads), so "
    "it is the narrowest honest bound, not a conservative one. Each count is good to "
    "the triplets within rounding of the tie edge or of a bin edge; a bin whose upper "
    "bound lies within what they move of the threshold is on the edge, safe or not by "
    "rounding: it is marked so, and a safe region never counts it."
)


def _safe_region(label: str, g: Any, ours: Any) -> str:
    """Where one model is safe, every metric at once and each alone, and the bin kinds
    where a metric has no safe region, as a block of notes; ``ours`` are its rows of
    :func:`~attncoda.experiments.safety.safe_regions` and ``g`` its binned rows."""
    mine = ours[ours["metric"] == "all"]
    said = [f"{label}: {r}." for r in mine["statement"]]
    # A metric may be safe somewhere even when not every metric is.
    each = ours[(ours["metric"] != "all") & (ours["n_safe_bins"] > 0)]
    said += [f"{label}, {r.metric} alone: {r.statement}." for r in each.itertuples()]
    for kind in dict.fromkeys(ours["bin_kind"]):
        none = ours[
            (ours["bin_kind"] == kind) & (ours["metric"] != "all") & (ours["n_safe_bins"] == 0)
        ]
        if len(none):
            said.append(
                f"{label}: no safe region of {_BIN_KINDS.get(kind, kind)} for "
                f"{', '.join(none['metric'])}."
            )
    return (
        '<div class="safe-region">'
        + note(
            f"Where {label} is safe (threshold "
            f"{fmt_pct(float(g['safe_threshold'].iloc[0]))}, upper 95% Clopper-Pearson "
            "bound over the decided triplets):"
        )
        + "".join(note(line) for line in said)
        + "</div>"
    )


def _region_claims(label: str, ours: Any) -> list[tuple[str, str, str]]:
    """One model's safe region of each bin kind for every metric at once, as claims."""
    return [
        (
            f"{label}: safe region of {_BIN_KINDS.get(r.bin_kind, r.bin_kind)}, every metric",
            "no paper number",
            f"below {fmt_num(r.safe_below)} ({r.n_safe_bins} of {r.n_bins} bins)"
            if r.n_safe_bins
            else "none is safe",
        )
        for r in ours[ours["metric"] == "all"].itertuples(index=False)
    ]


def _rate_claims(label: str, g: Any) -> list[tuple[str, str, str]]:
    """One model's flip rate (mean over metrics) in its lowest and highest bin of each
    coordinate, as claims."""
    claims = []
    for kind, name in _BIN_KINDS.items():
        k = g[g["bin_kind"] == kind]
        if not len(k):
            continue
        mean = k.groupby("bin")["flip_rate"].mean()
        claims.append(
            (
                f"{label}: flip rate (mean over metrics), lowest → highest bin of {name}",
                "no paper number",
                f"{fmt_pct(mean.iloc[0])} → {fmt_pct(mean.iloc[-1])}",
            )
        )
    return claims


def _bins_table(label: str, g: Any, has_bounds: bool, convention: str) -> str:
    """One model's table: a row per bin of each coordinate, a column per metric (its rate,
    the upper end of its interval with ``has_bounds``, its decided triplets, its verdict)."""
    metrics = list(dict.fromkeys(g["metric"]))
    body = []
    for kind in dict.fromkeys(g["bin_kind"]):
        k = g[g["bin_kind"] == kind]
        for b in sorted(dict.fromkeys(k["bin"])):
            cell = k[k["bin"] == b]
            first = cell.iloc[0]
            by_metric = {r["metric"]: r for r in cell.to_dict("records")}
            body.append(
                (
                    _BIN_KINDS.get(kind, kind),
                    f"{fmt_num(first['bin_low'])} – {fmt_num(first['bin_high'])}",
                    *(_rate_n(by_metric[m]) if m in by_metric else NA for m in metrics),
                )
            )
    return table(
        f"{label}: flip rate by bin (decided triplets in brackets"
        + (
            "; ≤ the upper end of its 95% Clopper-Pearson interval over them; ✓ safe: "
            "that bound below the threshold; ≈ edge: that bound within rounding of "
            "the threshold, safe or not by rounding)"
            if has_bounds
            else ")"
        ),
        convention,
        ("binned by", "bin range", *metrics),
        body,
    )


def _heatmaps(label: str, g: Any, grid: Any, convention: str) -> str:
    """One model's figure of the ``grid``'s cells (``""`` when it has none)."""
    cells = grid[
        (grid["model"] == g["model"].iloc[0]) & (grid["revision"] == g["revision"].iloc[0])
    ]
    if not len(cells):
        return ""
    plotted = cells.assign(model=label)
    return figure_or_note(
        lambda: draw({"safety_grid": plotted}),
        alt=f"Heatmaps per row metric of the keep vs drop flip rate of {label} "
        "over sink-share and sink-mass-gap bins",
        caption=f"{label}: flip rate over sink share × sink-mass gap; grey "
        "cells hold no decided triplet.",
        convention=convention,
    )


def _rate_n(row: Mapping[str, Any]) -> str:
    rate = row["flip_rate"]
    n = row.get("n_decided", row["n_triplets"] - row["n_ties"])
    if is_missing(rate):
        return f"{NA} ({n})"
    if row.get("safe_edge") is True or row.get("safe_edge") == 1:
        mark = " ≈ edge"
    else:
        mark = " ✓ safe" if row.get("safe") is True or row.get("safe") == 1 else ""
    bound = (
        f" ≤ {fmt_pct(row['flip_rate_high'])}" if not is_missing(row.get("flip_rate_high")) else ""
    )
    return f"{fmt_pct(rate)}{bound} ({fmt_count(n)}){mark}"
