"""Figures of ``attncoda collapse`` (entropy over training) and ``attncoda prune`` (curves)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.report.canvas import new_figure, save_png
from attncoda.report.labels import is_missing

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["collapse_figure", "collapse_split_figure", "prune_curve_figure", "prune_figure"]

_SINK_COLOUR = "#c0392b"
_CONTENT_COLOUR = "#2e86c1"
#: How the legend names each ranking channel: the two entropies are the convention question.
CHANNEL_LABELS = {
    "sink_mass": "sink mass s",
    "sink_balance": "sink balance b",
    "content_entropy": "content entropy H(q) (= drop-sink convention)",
    "full_entropy": "full entropy H(p) (= keep-sink convention)",
    "random": "random",
    "gradient": "gradient importance (Michel et al. 2019)",
}


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
    d_sink = rows["delta_sink"].to_numpy(np.float64)
    d_content = rows["delta_content"].to_numpy(np.float64)
    d_total = rows["delta_entropy"].to_numpy(np.float64)
    labels = [f"{a}→{b}" for a, b in zip(rows["pair_from"], rows["pair_to"], strict=True)]
    x = np.arange(len(rows))
    fig = new_figure(figsize=(max(9.0, 0.45 * len(x) + 6.0), 4.6), layout=None)
    left, right = fig.subplots(1, 2)
    pos_bottom = np.zeros(len(x))
    neg_bottom = np.zeros(len(x))
    for values, colour, name in (
        (d_sink, _SINK_COLOUR, "sink part ΔH_sink"),
        (d_content, _CONTENT_COLOUR, "content part ΔH_content"),
    ):
        bottom = np.where(values >= 0, pos_bottom, neg_bottom)
        left.bar(x, values, bottom=bottom, color=colour, width=0.75, label=name)
        pos_bottom = pos_bottom + np.where(values >= 0, values, 0.0)
        neg_bottom = neg_bottom + np.where(values < 0, values, 0.0)
    left.plot(x, d_total, "k_", markersize=14, mew=2, label="ΔH (total)")
    left.axhline(0.0, color="0.4", lw=0.8)
    step = max(1, len(x) // 20)
    left.set_xticks(x[::step])
    left.set_xticklabels(labels[::step], rotation=60, ha="right", fontsize=8)
    left.set_xlabel("checkpoint pair (training steps)")
    left.set_ylabel("mean ΔH per row, nats")
    left.set_title("per consecutive pair", fontsize=10)
    left.legend(fontsize=8)
    steps = np.concatenate([[rows["pair_from"].iloc[0]], rows["pair_to"].to_numpy()])
    cum = {
        "ΔH (total)": np.concatenate([[0.0], np.cumsum(d_total)]),
        "sink parts": np.concatenate([[0.0], np.cumsum(d_sink)]),
        "content parts": np.concatenate([[0.0], np.cumsum(d_content)]),
    }
    colours = ("k", _SINK_COLOUR, _CONTENT_COLOUR)
    for (name, values), colour in zip(cum.items(), colours, strict=True):
        right.plot(steps, values, marker="o", ms=3, color=colour, label=name)
    if "delta_sink_sink_first" in rows:  # the orderings' range of the sink part
        bounds = [
            np.concatenate([[0.0], np.cumsum(rows[name].to_numpy(np.float64))])
            for name in ("delta_sink_sink_first", "delta_sink_content_first")
        ]
        right.fill_between(
            steps,
            np.minimum(*bounds),
            np.maximum(*bounds),
            color=_SINK_COLOUR,
            alpha=0.2,
            lw=0,
            label="sink parts, range over the orderings",
        )
    right.set_xscale("symlog", linthresh=1.0)
    right.axhline(0.0, color="0.4", lw=0.8)
    right.set_xlabel("training step")
    right.set_ylabel("cumulative ΔH since the first checkpoint, nats")
    right.set_title("cumulative over training", fontsize=10)
    right.legend(fontsize=8)
    fig.suptitle(
        f"{model}: entropy change of attention rows split into sink and content parts "
        f"(sink = {sink}).\nA two-factor Shapley attribution (sink + content = ΔH for every "
        "row, head, layer and the model; no keep/drop convention)" + _share_line(table),
        fontsize=10,
    )
    fig.tight_layout()
    return fig


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


def prune_figure(table: pd.DataFrame, path: str | os.PathLike[str], *, model: str) -> Path:
    """Perplexity ratio against heads pruned: one line per channel and order, one panel per
    ablation, log y; a band around each line is the ratio's paired bootstrap 95% interval
    over the evaluation windows, where the table gives one (none below 10 windows).

    Parameters
    ----------
    table : pandas.DataFrame
        :attr:`attncoda.experiments.prune.PruneResult.table` (the baseline row, ``k = 0``,
        starts every line at ratio 1).
    path : path-like
        PNG, written atomically.
    model : str
        Named in the title.
    """
    return save_png(prune_curve_figure(table, model=model), path)


def prune_curve_figure(table: pd.DataFrame, *, model: str) -> Figure:
    """The figure of :func:`prune_figure` (a :class:`matplotlib.figure.Figure`), unsaved."""
    curves = table[table["k"] > 0]
    if curves.empty:
        raise AttncodaError("the prune table has no pruned rows (k > 0) to plot")
    ablations = list(dict.fromkeys(curves["ablation"]))
    channels = list(dict.fromkeys(curves["channel"]))
    width = max(6.2 * len(ablations), 11.0)
    fig = new_figure(figsize=(width, 5.0), layout=None)
    axes = fig.subplots(1, len(ablations), squeeze=False, sharey=True)
    ks = sorted({0, *curves["k"].astype(int).tolist()})
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    for ax, ablation in zip(axes[0], ablations, strict=True):
        part = curves[curves["ablation"] == ablation]
        for index, channel in enumerate(channels):
            for order, style in (("high", "-"), ("low", "--")):
                line = part[(part["channel"] == channel) & (part["order"] == order)]
                if line.empty:
                    continue
                line = line.sort_values("k")
                xs = np.concatenate([[0], line["k"].to_numpy()])
                ratio = np.concatenate([[1.0], line["ratio"].to_numpy(np.float64)])
                label = f"{CHANNEL_LABELS.get(channel, channel)}, {order} first"
                ax.plot(xs, ratio, style, marker="o", ms=3, color=cmap(index % 10), label=label)
                if "ratio_ci_low" in line:  # the paired bootstrap interval, where there is one
                    low = line["ratio_ci_low"].to_numpy(np.float64)
                    high = line["ratio_ci_high"].to_numpy(np.float64)
                    ks_line = line["k"].to_numpy(np.float64)
                    ax.fill_between(ks_line, low, high, color=cmap(index % 10), alpha=0.15, lw=0)
        ax.set_yscale("log")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlim(0, ks[-1] * 1.15)
        ax.set_xticks(ks)
        ax.set_xticklabels([str(k) for k in ks], fontsize=8)
        ax.minorticks_off()
        ax.axhline(1.0, color="0.4", lw=0.8)
        ax.set_xlabel("heads pruned, k")
        ax.set_title(f"ablation = {ablation}", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("perplexity ratio to unpruned (held-out)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle(
        f"{model}: pruning heads ranked by each channel (solid: highest first, dashed: lowest "
        "first).\nfull entropy = keep-sink convention, content entropy = drop-sink convention: "
        "which one ranks heads safely is the convention question.",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.06 + 0.025 * ((len(labels) + 1) // 2), 1, 1))
    return fig
