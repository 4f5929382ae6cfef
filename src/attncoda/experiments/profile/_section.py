"""The report section of profile: sink mass and the exact entropy split, per model.

It reads the run folder's tables only (:class:`attncoda.experiments.view.Context`), and
captions every table and figure with its convention.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["profile_section"]


def _majority(g: pd.DataFrame) -> int:
    """How many of one model's heads put more than half their mass on the sink."""
    return int((g["sink_mass"] > 0.5).sum())


def _claims(heads: pd.DataFrame, convention: str) -> str:
    """The paper-vs-measured block: each model's mean sink mass and its majority-sink heads."""
    claims = [
        f"{label}: mean {fmt_pct(g['sink_mass'].mean())}, {_majority(g)} of {len(g)} heads "
        "above 50%"
        for label, g in groups(heads)
    ]
    return paper_vs_measured(
        convention,
        [
            (
                "Sink mass of an attention row (share on the sink token)",
                "most of a row's mass sits on one sink token",
                "; ".join(claims),
            )
        ],
    )


def _model_row(label: str, g: pd.DataFrame) -> tuple[str, ...]:
    """One model's row of the means table: shape, sink mass (%), H(p) and its parts (nats)."""
    sink_part = g["binary_term"] + g["within_sink_term"]
    return (
        label,
        f"{int(g['layer'].max()) + 1} × {int(g['head'].max()) + 1}",
        fmt_pct(g["sink_mass"].mean()),
        fmt_pct(g["sink_mass"].max()),
        f"{_majority(g)} of {len(g)}",
        fmt_nats(g["entropy"].mean()),
        fmt_nats(sink_part.mean()),
        fmt_nats(g["content_term"].mean()),
        fmt_nats(g["content_entropy"].mean()),
    )


def _means_table(heads: pd.DataFrame, convention: str) -> str:
    """The table of per-model means over heads, with the note that the parts add up."""
    return table(
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
        [_model_row(label, g) for label, g in groups(heads)],
    ) + note("H(p) = sink part + content part exactly, head by head and on the means.")


def _heatmaps(ctx: Context, convention: str) -> str:
    """One heatmap figure per model (sink mass, H(p) and its two parts by layer and head)."""
    return "".join(
        figure_or_note(
            lambda g=g: draw({"profile_heads": g}, sink=ctx.sink),
            alt=f"Layer by head heatmaps of sink mass, H(p), its sink part and its content "
            f"part for {label}",
            caption=f"{label}: per-head means over rows with content.",
            convention=convention,
        )
        for label, g in groups(ctx.tables.profile_heads)
    )


def profile_section(ctx: Context) -> str:
    """Per model: mean sink mass, H(p) and its exact parts (nats), and the heatmap figure."""
    convention = (
        "none — exact sink/content split (entropy identity H(p) = h(s) + s·H(p_S/s) + "
        f"(1−s)·H(q)), sink = {ctx.sink}"
    )
    heads = ctx.tables.profile_heads
    return _claims(heads, convention) + _means_table(heads, convention) + _heatmaps(ctx, convention)
