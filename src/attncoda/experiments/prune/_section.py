"""The report section of prune: the perplexity ratio of heads pruned by each channel, each
ratio with its paired bootstrap interval over the evaluation windows where there are
enough windows for one, and the method and n of that interval; a ratio whose chosen heads
lie within rounding of their cut says so (another machine may prune other heads).

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import Any

from attncoda.experiments.contract import MIN_BOOTSTRAP_N
from attncoda.experiments.prune._figure import CHANNEL_LABELS, draw
from attncoda.experiments.view import (
    NA,
    Context,
    figure_or_note,
    fmt_count,
    fmt_interval,
    fmt_num,
    fmt_ratio,
    groups,
    interval_method,
    paper_vs_measured,
    table,
)

__all__ = ["prune_section"]


def prune_section(ctx: Context) -> str:
    """Per model: the worst and the best perplexity ratio over channels and orders, each with
    its paired bootstrap interval over the evaluation windows (or why it has none)."""
    prune = ctx.tables.prune
    convention = (
        "ranking channels — full entropy H(p) = keep sink, content entropy H(q) = drop sink; "
        f"sink mass and sink balance need no convention; sink = {ctx.sink}"
    )
    claims, body, figures = [], [], []
    for label, g in groups(prune):
        curves = g[g["k"] > 0]
        if not len(curves):
            claims.append((f"Perplexity ratio, {label}", "more than 100×", "no pruned rows"))
            continue
        claims += _claims(label, curves)
        body += _lines(label, g, curves)
        figures.append(
            figure_or_note(
                lambda g=g: draw({"prune": g}),
                alt=f"Perplexity ratio against the number of heads pruned for {label}, one line "
                "per ranking channel and order, log scale",
                caption=f"{label}: perplexity ratio to the unpruned model on held-out text; "
                "bands: the paired bootstrap 95% interval over the evaluation windows (none "
                f"below {MIN_BOOTSTRAP_N} windows).",
                convention=convention,
            )
        )
    return (
        paper_vs_measured(convention, claims)
        + table(
            "Pruning heads ranked by each channel: the worst ratio and the ratio at the largest "
            "k, per model, each with its 95% interval in brackets: a paired percentile bootstrap "
            "over the evaluation windows (the pruned and the unpruned model resampled on the "
            f"same windows), given only from {MIN_BOOTSTRAP_N} windows up (with fewer, the note "
            "says so)",
            convention,
            _COLUMNS,
            body,
        )
        + "".join(figures)
    )


_COLUMNS = (
    "model", "channel", "order", "ablation", "unpruned perplexity", "worst ratio", "at k",
    "ratio at largest k", "interval method and n",
)  # fmt: skip


def _claims(label: str, curves: Any) -> list[tuple[str, str, str]]:
    """One model's worst perplexity ratio over its pruned rows ``curves``, and the best at
    its largest k, as claims."""
    k_max = int(curves["k"].max())
    worst = curves.loc[curves["ratio"].astype(float).idxmax()]
    at_max = curves[curves["k"] == k_max]
    best = at_max.loc[at_max["ratio"].astype(float).idxmin()]
    return [
        (
            f"Worst perplexity ratio when pruning by a channel, {label}",
            "more than 100× (pruning by the wrong channel)",
            f"{_ratio(worst)} ({_line(worst, CHANNEL_LABELS)}, k = {int(worst['k'])})",
        ),
        (
            f"Best channel at the largest k = {k_max}, {label}",
            "—",
            f"{_ratio(best)} ({_line(best, CHANNEL_LABELS)})",
        ),
    ]


def _lines(label: str, g: Any, curves: Any) -> list[tuple[str, ...]]:
    """One model's table rows (its rows ``g``, the pruned ones ``curves``): per channel,
    order and ablation, the unpruned perplexity, the worst ratio and its k, and the ratio
    at the largest k with its interval's method and n."""
    base = g[g["k"] == 0]
    baseline = fmt_num(base["perplexity"].iloc[0], 2) if len(base) else NA
    if len(base) and "n_windows" in base:
        baseline += f" ({fmt_count(base['n_windows'].iloc[0])} windows)"
    body: list[tuple[str, ...]] = []
    for key, line in curves.groupby(["channel", "order", "ablation"], sort=False):
        top = line.loc[line["ratio"].astype(float).idxmax()]
        last = line[line["k"] == line["k"].max()].iloc[0]
        body.append(
            (
                label,
                CHANNEL_LABELS.get(str(key[0]), str(key[0])),
                f"{key[1]} first",
                str(key[2]),
                baseline,
                _ratio(top),
                str(int(top["k"])),
                f"{_ratio(last)}, k = {int(last['k'])}",
                interval_method(last.to_dict(), "n_windows", "windows"),
            )
        )
    return body


def _ratio(row: Any) -> str:
    """``3.21× (2.90× – 3.60×)``: a ratio and its interval, or the note why it has none;
    with the chosen heads' edge where they lie within rounding of their cut."""
    if "ratio_ci_low" not in row:  # a table written before ratios had intervals
        return fmt_ratio(row["ratio"]) + _edge(row)
    interval = fmt_interval(row, "ratio_ci_low", "ratio_ci_high", fmt_ratio)
    return f"{fmt_ratio(row['ratio'])} ({interval}){_edge(row)}"


def _edge(row: Any) -> str:
    """``; heads on the edge: 3 within rounding of the cut`` for a row whose chosen heads
    may be others on another machine (``""`` otherwise, and for a table written before)."""
    if "heads_edge" not in row or not bool(row["heads_edge"]):
        return ""
    return (
        f"; heads on the edge: {fmt_count(row['n_fragile_heads'])} within rounding of the "
        "cut, another machine may prune others"
    )


def _line(row: Any, labels: dict[str, str]) -> str:
    channel = labels.get(str(row["channel"]), str(row["channel"]))
    return f"{channel}, {row['order']} first, {row['ablation']}"
