"""The figure of prune: the perplexity ratio against heads pruned, per channel and order."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.view import new_figure, one_model, save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["CHANNEL_LABELS", "draw", "prune_curve_figure", "prune_figure"]

#: How the legend names each ranking channel: the two entropies are the convention question.
CHANNEL_LABELS = {
    "sink_mass": "sink mass s",
    "sink_balance": "sink balance b",
    "content_entropy": "content entropy H(q) (= drop-sink convention)",
    "full_entropy": "full entropy H(p) (= keep-sink convention)",
    "random": "random",
    "gradient": "gradient importance (Michel et al. 2019)",
}


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``prune`` table (one model)."""
    table = tables["prune"]
    return prune_curve_figure(table, model=one_model(table, "prune"))


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
