"""The report section of the sink rate: Gu et al.'s metric per model and key position.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attncoda.experiments.sink_rate._figure import draw
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_count,
    fmt_num,
    fmt_pct,
    groups,
    is_missing,
    paper_vs_measured,
    table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["sink_rate_section"]


def _within_rounding(row: dict, rounding: str) -> str:
    """``±x (k within rounding of ε)``: how far the triples (or windows) whose score lies
    within its float32 rounding of ε can move the rate; not applicable for tables made
    before the columns were (docs/design.md, "Verdicts and ratios within rounding")."""
    k = row.get("n_fragile")
    if is_missing(k) or is_missing(row.get(rounding)):
        return NA
    return f"±{fmt_pct(row[rounding] / 100, 2)} ({fmt_count(k)} within rounding of ε)"


def _claims(rates: pd.DataFrame, convention: str) -> str:
    """The paper-vs-measured block: each model's sink rate (%) at its first key position."""
    first = rates[rates["position"] == rates["position"].min()]
    measured = "; ".join(
        f"{label} {fmt_pct(g['sink_rate'].iloc[0] / 100)} at position {int(g['position'].iloc[0])}"
        for label, g in groups(first)
    )
    return paper_vs_measured(
        convention,
        [
            (
                "Sink rate at the first token (ε = 0.3, windows of 64 tokens)",
                "high in trained language models; it emerges with training (Gu et al. 2025)",
                measured or "n/a",
            )
        ],
    )


def _rate_table(rates: pd.DataFrame, convention: str) -> str:
    """The sink rate (% of triples above ε) per model and key position, with its counts."""
    rows = [
        (
            label,
            str(int(r["position"])),
            fmt_num(r["epsilon"]),
            fmt_pct(r["sink_rate"] / 100),
            fmt_count(r["n_windows"]),
            fmt_count(r["n_heads"]),
            fmt_count(r["n_triples"]),
            _within_rounding(r, "rate_rounding"),
        )
        for label, g in groups(rates)
        for r in g.to_dict("records")
    ]
    return table(
        "Sink rate per model and key position: % of (window, layer, head) triples whose "
        "score exceeds ε; within rounding: the triples whose score lies within its float32 "
        "rounding of ε, u·(n + 2)·(score + log n) with n the keys a row sees (above ε on "
        "one run, not on another), and how far they can move the rate",
        convention,
        ("model", "position", "ε", "sink rate", "windows", "heads", "triples", "within rounding"),
        rows,
    )


def _top_heads_table(heads: pd.DataFrame | None, convention: str) -> str:
    """The five heads per model whose first key position scores highest (mean attention it
    receives), or nothing when the run kept no per-head table."""
    if heads is None:
        return ""
    top = []
    for label, g in groups(heads):
        at = g[g["position"] == g["position"].min()].sort_values("score", ascending=False)
        for r in at.head(5).to_dict("records"):
            top.append(
                (
                    label,
                    f"L{int(r['layer'])}H{int(r['head'])}",
                    str(int(r["position"])),
                    fmt_num(r["score"]),
                    fmt_pct(r["above"] / 100),
                    _within_rounding(r, "above_rounding"),
                )
            )
    return table(
        "The five heads whose first position receives the most attention, per model",
        convention,
        ("model", "head", "position", "mean score", "windows above ε", "within rounding"),
        top,
    )


def sink_rate_section(ctx: Context) -> str:
    """Per model and position: the sink rate with its counts, the heads that are sinks most
    often, and the figure."""
    rates = ctx.tables.sink_rate
    convention = (
        "none — the full row, sink included: Gu et al.'s score is the mean attention a key "
        f"receives from the queries that see it (sink = {ctx.sink}: not used, every key "
        "position is scored)"
    )
    return (
        _claims(rates, convention)
        + _rate_table(rates, convention)
        + _top_heads_table(ctx.optional.sink_rate_heads, convention)
        + figure_or_note(
            lambda: draw({"sink_rate": rates}),
            alt="Bar chart of the sink rate per key position, one bar per model",
            caption="Sink rate per key position: the percentage of (window, layer, head) "
            "triples whose score exceeds ε.",
            convention=convention,
        )
    )
