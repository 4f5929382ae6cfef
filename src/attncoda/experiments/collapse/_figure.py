"""The figures of collapse: entropy over training, split into its sink and content parts."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.view import is_missing, new_figure, one_model, save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["collapse_figure", "collapse_split_figure", "draw"]

_SINK_COLOUR = "#c0392b"
_CONTENT_COLOUR = "#2e86c1"


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``collapse`` table (one series)."""
    table = tables["collapse"]
    return collapse_split_figure(table, model=one_model(table, "collapse"), sink=sink)


def _model_pairs(table: pd.DataFrame) -> pd.DataFrame:
    rows = table[(table["level"] == "model") & (table["pair_kind"] == "consecutive")]
    if rows.empty:
        raise AttncodaError("the collapse table has no model-level consecutive pairs to plot")
    return rows.sort_values("pair_from")


def collapse_figure(
    table: pd.DataFrame, path: str | os.PathLike[str], *, model: str, sink: str = "first"
) -> Path:
    """Stacked sink and content contributions to the entropy change, pair by pair.

    Left: for each consecutive checkpoint pair, the model-level mean ``dH`` (black marker)
    and its two-factor Shapley attribution, ``dH_sink`` (red) and ``dH_content`` (blue),
    stacked (positive parts above zero, negative parts below). Right: the cumulative sums
    over training, so the black line is ``H(step) - H(first step)``; the red band spans the
    cumulative sink parts of the two one-sided orderings (sink first, content first), which
    bound the Shapley part. The title gives the first-to-last Shapley share and its range.

    Parameters
    ----------
    table : pandas.DataFrame
        :attr:`attncoda.experiments.collapse.CollapseResult.table`.
    path : path-like
        PNG, written atomically.
    model, sink : str
        Named in the title.
    """
    return save_png(collapse_split_figure(table, model=model, sink=sink), path)


def collapse_split_figure(table: pd.DataFrame, *, model: str, sink: str = "first") -> Figure:
    """The figure of :func:`collapse_figure` (a :class:`matplotlib.figure.Figure`), unsaved."""
    rows = _model_pairs(table)
    fig = new_figure(figsize=(max(9.0, 0.45 * len(rows) + 6.0), 4.6), layout=None)
    left, right = fig.subplots(1, 2)
    _draw_pairs(left, rows)
    _draw_cumulative(right, rows)
    fig.suptitle(
        f"{model}: entropy change of attention rows split into sink and content parts "
        f"(sink = {sink}).\nA two-factor Shapley attribution (sink + content = ΔH for every "
        "row, head, layer and the model; no keep/drop convention)" + _share_line(table),
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _draw_pairs(ax: Axes, rows: pd.DataFrame) -> None:
    """The left panel: per consecutive pair, ``dH_sink`` and ``dH_content`` (nats) stacked
    away from zero by sign, and ``dH`` as a black marker."""
    d_sink = rows["delta_sink"].to_numpy(np.float64)
    d_content = rows["delta_content"].to_numpy(np.float64)
    labels = [f"{a}→{b}" for a, b in zip(rows["pair_from"], rows["pair_to"], strict=True)]
    x = np.arange(len(rows))
    pos_bottom = np.zeros(len(x))
    neg_bottom = np.zeros(len(x))
    for values, colour, name in (
        (d_sink, _SINK_COLOUR, "sink part ΔH_sink"),
        (d_content, _CONTENT_COLOUR, "content part ΔH_content"),
    ):
        bottom = np.where(values >= 0, pos_bottom, neg_bottom)
        ax.bar(x, values, bottom=bottom, color=colour, width=0.75, label=name)
        pos_bottom = pos_bottom + np.where(values >= 0, values, 0.0)
        neg_bottom = neg_bottom + np.where(values < 0, values, 0.0)
    ax.plot(
        x,
        rows["delta_entropy"].to_numpy(np.float64),
        "k_",
        markersize=14,
        mew=2,
        label="ΔH (total)",
    )
    ax.axhline(0.0, color="0.4", lw=0.8)
    step = max(1, len(x) // 20)
    ax.set_xticks(x[::step])
    ax.set_xticklabels(labels[::step], rotation=60, ha="right", fontsize=8)
    ax.set_xlabel("checkpoint pair (training steps)")
    ax.set_ylabel("mean ΔH per row, nats")
    ax.set_title("per consecutive pair", fontsize=10)
    ax.legend(fontsize=8)


def _draw_cumulative(ax: Axes, rows: pd.DataFrame) -> None:
    """The right panel: ``dH`` and its two parts summed over training (nats) against the
    step, with the band of the sink parts' range over the two one-sided orderings."""
    steps = np.concatenate([[rows["pair_from"].iloc[0]], rows["pair_to"].to_numpy()])
    cum = {
        name: np.concatenate([[0.0], np.cumsum(rows[column].to_numpy(np.float64))])
        for name, column in (
            ("ΔH (total)", "delta_entropy"),
            ("sink parts", "delta_sink"),
            ("content parts", "delta_content"),
        )
    }
    colours = ("k", _SINK_COLOUR, _CONTENT_COLOUR)
    for (name, values), colour in zip(cum.items(), colours, strict=True):
        ax.plot(steps, values, marker="o", ms=3, color=colour, label=name)
    if "delta_sink_sink_first" in rows:  # the orderings' range of the sink part
        bounds = [
            np.concatenate([[0.0], np.cumsum(rows[name].to_numpy(np.float64))])
            for name in ("delta_sink_sink_first", "delta_sink_content_first")
        ]
        ax.fill_between(
            steps,
            np.minimum(*bounds),
            np.maximum(*bounds),
            color=_SINK_COLOUR,
            alpha=0.2,
            lw=0,
            label="sink parts, range over the orderings",
        )
    ax.set_xscale("symlog", linthresh=1.0)
    ax.axhline(0.0, color="0.4", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel("cumulative ΔH since the first checkpoint, nats")
    ax.set_title("cumulative over training", fontsize=10)
    ax.legend(fontsize=8)


def _share_line(table: pd.DataFrame) -> str:
    """The title's end: the first-to-last Shapley share and its range over the orderings
    (``first → last: sink share 79.4% (Shapley), 75.0–83.9% over ...``), or ``"."``."""
    whole = table[(table["level"] == "model") & (table["pair_kind"] == "first_last")]
    if whole.empty or "sink_share_low" not in whole:
        return "."
    r = whole.iloc[0]
    if any(is_missing(r[c]) for c in ("sink_share", "sink_share_low", "sink_share_high")):
        return "."
    return (
        f";\nfirst → last: sink share {float(r['sink_share']):.1%} (Shapley), "
        f"{float(r['sink_share_low']):.1%}–{float(r['sink_share_high']):.1%} over the two "
        "one-sided orderings."
    )
