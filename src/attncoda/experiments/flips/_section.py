"""The report section of flips: verdicts that change between keep and drop.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attncoda.experiments.contract import MIN_BOOTSTRAP_N
from attncoda.experiments.flips._figure import draw
from attncoda.experiments.view import (
    NA,
    Context,
    esc,
    figure_or_note,
    fmt_count,
    fmt_interval,
    fmt_pct,
    groups,
    interval_method,
    is_missing,
    model_label,
    paper_vs_measured,
    table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["flips_section"]


def _within_rounding(row: dict) -> str:
    """``rate ±x, ends ±y (k at the tie edge)``; not applicable for tables made before the
    columns were (docs/design.md, "Verdicts and ratios within rounding")."""
    k = row.get("n_fragile")
    if is_missing(k):
        return NA
    ends = row.get("ci_rounding")
    ends_text = "" if is_missing(ends) else f", ends ±{fmt_pct(ends, 2)}"
    return f"rate ±{fmt_pct(row['rate_rounding'], 2)}{ends_text} ({fmt_count(k)} at the tie edge)"


def flips_section(ctx: Context) -> str:
    """Flip rates keep vs drop per model and metric, with CIs; the range over all of them."""
    flips = ctx.tables.flips
    convention = f"keep vs drop (sink = {ctx.sink})"
    return (
        _claims(flips, convention)
        + _rate_table(flips, convention)
        + _rate_figure(flips, convention)
        + _by_layer_tables(ctx.optional.flips_by_layer, convention)
    )


def _labels(flips: pd.DataFrame) -> list[str]:
    """Each row's model label (model and revision)."""
    return [model_label(m, r) for m, r in zip(flips["model"], flips["revision"], strict=True)]


def _claims(flips: pd.DataFrame, convention: str) -> str:
    """The paper-vs-measured block: the range of flip rates over every model and metric,
    then each model's range over its metrics."""
    rates = flips["flip_rate"].astype(float)
    finite = rates[rates.notna()]
    n_models, n_metrics = len(dict.fromkeys(_labels(flips))), flips["metric"].nunique()
    overall = (
        f"{fmt_pct(finite.min())}–{fmt_pct(finite.max())} over {n_models} model(s) × "
        f"{n_metrics} metric(s)"
        if len(finite)
        else "no decided triplets"
    )
    claims = [("Verdicts “which head is more similar” that flip", "17–47%", overall)]
    for label, g in groups(flips):
        r = g["flip_rate"].astype(float).dropna()
        if len(r):
            low, high = g.loc[r.idxmin(), "metric"], g.loc[r.idxmax(), "metric"]
            measured = f"{fmt_pct(r.min())} ({low}) – {fmt_pct(r.max())} ({high})"
            claims.append((f"Flip-rate range over metrics, {label}", "—", measured))
    return paper_vs_measured(convention, claims)


def _rate_table(flips: pd.DataFrame, convention: str) -> str:
    """The flip rate per model and metric with its counts, its bootstrap interval and what
    rounding leaves open of both."""
    rows = [
        (
            label,
            r["metric"],
            fmt_count(r["n_heads"]),
            fmt_count(r.get("n_docs")),
            fmt_count(r["n_triplets"]),
            fmt_count(r["n_ties"]),
            fmt_count(r["flips"]),
            fmt_pct(r["flip_rate"]),
            fmt_interval(r, "ci_low", "ci_high"),
            interval_method(r, "n_docs", "documents"),
            _within_rounding(r),
        )
        for label, g in groups(flips)
        for r in g.to_dict("records")
    ]
    return table(
        "Flip rate per model and row metric, with its 95% interval: a percentile bootstrap "
        f"over documents, given only from {MIN_BOOTSTRAP_N} documents up (with fewer, the "
        "note says so). The last column is what float32 rounding of the head distances "
        "leaves open: the triplets within their rounding of the tie edge (a tie on one "
        "device, decided on another), and how far the rate and the interval's ends can "
        "move by them",
        convention,
        (
            "model",
            "metric",
            "heads",
            "documents",
            "triplets",
            "ties",
            "flips",
            "flip rate",
            "95% interval",
            "interval method and n",
            "within rounding",
        ),
        rows,
    )


def _rate_figure(flips: pd.DataFrame, convention: str) -> str:
    """The bar chart of flip rates per metric and model, with their intervals."""
    plotted = flips.assign(model=_labels(flips))
    return figure_or_note(
        lambda: draw({"flips": plotted}),
        alt="Bar chart of the keep vs drop flip rate per row metric and model, with "
        "bootstrap 95% intervals where there are enough documents for one",
        caption="Flip rate of head-similarity verdicts per row metric; whiskers: the "
        f"percentile bootstrap 95% interval over documents (none below {MIN_BOOTSTRAP_N} "
        "documents).",
        convention=convention,
    )


def _by_layer_tables(by_layer: pd.DataFrame | None, convention: str) -> str:
    """Per model, a folded table of the flip rate by layer of the anchor head and metric
    (nothing without the by-layer table)."""
    if by_layer is None:
        return ""
    parts = []
    for label, g in groups(by_layer):
        metrics = list(dict.fromkeys(g["metric"]))
        pivot = g.pivot_table(index="layer", columns="metric", values="flip_rate")
        body = [
            (str(layer), *(fmt_pct(pivot.loc[layer].get(m)) for m in metrics))
            for layer in pivot.index
        ]
        parts.append(
            f"<details><summary>{esc(f'Flip rate by layer — {label}')}</summary>"
            + table(f"Flip rate by layer — {label}", convention, ("layer", *metrics), body)
            + "</details>\n"
        )
    return "".join(parts)
