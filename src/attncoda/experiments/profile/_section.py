"""The report section of profile: sink mass and the exact entropy split, per model.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from attncoda.experiments.profile._figure import draw
from attncoda.experiments.view import (
    Context,
    figure_or_note,
    fmt_nats,
    fmt_pct,
    groups,
    note,
    paper_vs_measured,
    table,
)

__all__ = ["profile_section"]


def profile_section(ctx: Context) -> str:
    """Per model: mean sink mass, H(p) and its exact parts (nats), and the heatmap figure."""
    heads = ctx.tables.profile_heads
    convention = (
        "none — exact sink/content split (entropy identity H(p) = h(s) + s·H(p_S/s) + "
        f"(1−s)·H(q)), sink = {ctx.sink}"
    )
    rows, claims, figures = [], [], []
    for label, g in groups(heads):
        sink_part = g["binary_term"] + g["within_sink_term"]
        major = int((g["sink_mass"] > 0.5).sum())
        rows.append(
            (
                label,
                f"{int(g['layer'].max()) + 1} × {int(g['head'].max()) + 1}",
                fmt_pct(g["sink_mass"].mean()),
                fmt_pct(g["sink_mass"].max()),
                f"{major} of {len(g)}",
                fmt_nats(g["entropy"].mean()),
                fmt_nats(sink_part.mean()),
                fmt_nats(g["content_term"].mean()),
                fmt_nats(g["content_entropy"].mean()),
            )
        )
        claims.append(
            f"{label}: mean {fmt_pct(g['sink_mass'].mean())}, {major} of {len(g)} heads above 50%"
        )
        figures.append(
            figure_or_note(
                lambda g=g: draw({"profile_heads": g}, sink=ctx.sink),
                alt=f"Layer by head heatmaps of sink mass, H(p), its sink part and its content "
                f"part for {label}",
                caption=f"{label}: per-head means over rows with content.",
                convention=convention,
            )
        )
    return (
        paper_vs_measured(
            convention,
            [
                (
                    "Sink mass of an attention row (share on the sink token)",
                    "most of a row's mass sits on one sink token",
                    "; ".join(claims),
                )
            ],
        )
        + table(
            "Per model, means over heads (each head: mean over rows with content); nats",
            convention,
            (
                "model",
                "layers × heads",
                "mean sink mass",
                "max head sink mass",
                "heads with sink mass > 50%",
                "H(p)",
                "sink part h(s) + s·H(p_S/s)",
                "content part (1−s)·H(q)",
                "H(q)",
            ),
            rows,
        )
        + note("H(p) = sink part + content part exactly, head by head and on the means.")
        + "".join(figures)
    )
