"""Figures of the flips and safety-map experiments (keep vs drop).

- :func:`flip_rate_figure` — flip rate per metric with its bootstrap 95% interval over
  documents where there are enough documents for one, one bar group per metric and one bar
  per model.
- :func:`safety_figure` — one heatmap per metric of the flip rate over sink-share bins
  (rows) and sink-mass-gap bins (columns).

Every figure names the two conventions it compares in its title and colour or axis labels.
Figures are :class:`matplotlib.figure.Figure` objects drawn on the Agg canvas (no pyplot
state); :func:`attncoda.report.figures.save_png` writes one to PNG atomically.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.report.canvas import save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "CONVENTIONS_LABEL",
    "flip_rate_figure",
    "plot_flip_rates",
    "plot_safety",
    "safety_figure",
]

CONVENTIONS_LABEL = "keep vs drop"


def _new_figure(**kwargs: Any) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def _need(df: pd.DataFrame, columns: tuple[str, ...], what: str) -> None:
    missing = [c for c in columns if c not in getattr(df, "columns", ())]
    if missing:
        raise AttncodaError(f"{what} lacks the column {missing[0]!r}")
    if len(df) == 0:
        raise AttncodaError(f"{what} has no rows to plot")


def flip_rate_figure(table: pd.DataFrame) -> Figure:
    """Bar chart of the keep vs drop flip rate per metric, with bootstrap CI whiskers.

    A bar without an interval (too few documents: ``ci_low``, ``ci_high`` NaN) has no whisker
    and says "no CI" above it.

    Parameters
    ----------
    table : pandas.DataFrame
        ``FlipsResult.table`` (one or several models concatenated): columns ``model,
        metric, flip_rate, ci_low, ci_high``.

    Returns
    -------
    matplotlib.figure.Figure
        Titled "Flip rate of head-similarity verdicts, keep vs drop".
    """
    _need(table, ("model", "metric", "flip_rate", "ci_low", "ci_high"), "the flips table")
    models = list(dict.fromkeys(table["model"]))
    metrics = list(dict.fromkeys(table["metric"]))
    fig = _new_figure(figsize=(1.6 + 1.3 * len(metrics) * max(1, len(models) / 2), 4.2))
    ax = fig.add_subplot()
    width = 0.8 / len(models)
    for i, model in enumerate(models):
        rows = table[table["model"] == model].set_index("metric")
        x = np.arange(len(metrics)) + (i - (len(models) - 1) / 2) * width
        rate = np.array([_get(rows, m, "flip_rate") for m in metrics])
        low = np.array([_get(rows, m, "ci_low") for m in metrics])
        high = np.array([_get(rows, m, "ci_high") for m in metrics])
        shown = np.nan_to_num(rate)
        err = np.clip(np.nan_to_num(np.stack([rate - low, high - rate])), 0.0, None)
        ax.bar(x, shown, width * 0.92, yerr=err, capsize=3, label=model, alpha=0.85)
        tops = np.fmax(np.nan_to_num(rate), np.nan_to_num(high))  # label above the whisker
        for xi, r, lo, top in zip(x, rate, low, tops, strict=True):
            label = "n/a" if math.isnan(r) else f"{r:.1%}"
            label += "\nno CI" if math.isnan(lo) and not math.isnan(r) else ""
            ax.annotate(
                label,
                (xi, top),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=8,
            )
    ax.set_xticks(np.arange(len(metrics)), metrics)
    ax.set_ylabel(f"flip rate ({CONVENTIONS_LABEL}); whiskers: bootstrap 95% CI over documents")
    ax.set_xlabel("row metric")
    tallest = np.fmax(table["ci_high"].to_numpy(float), table["flip_rate"].to_numpy(float))
    ax.set_ylim(0, max(0.05, float(np.nanmax(tallest, initial=0)) * 1.2))
    ax.set_title(
        f"Flip rate of head-similarity verdicts, {CONVENTIONS_LABEL}\n" + ", ".join(models)
    )
    if len(models) > 1:
        ax.legend(title="model", fontsize=8)
    return fig


def _get(rows: pd.DataFrame, metric: str, column: str) -> float:
    return float(rows.loc[metric, column]) if metric in rows.index else math.nan


def safety_figure(grid: pd.DataFrame, metrics: Sequence[str] | None = None) -> Figure:
    """Heatmaps of the keep vs drop flip rate over sink share × sink-mass gap, per metric.

    Parameters
    ----------
    grid : pandas.DataFrame
        ``SafetyResult.grid`` of one model.
    metrics : sequence of str, optional
        Which metrics to draw (default: all in ``grid``), one panel each.

    Returns
    -------
    matplotlib.figure.Figure
        Suptitle "Flip rate keep vs drop by sink share of d_A² and sink-mass gap — model";
        empty cells (no decided triplet) are grey.
    """
    _need(
        grid,
        (
            "model",
            "metric",
            "sink_share_bin",
            "sink_share_low",
            "sink_share_high",
            "sink_gap_bin",
            "sink_gap_low",
            "sink_gap_high",
            "n_triplets",
            "flip_rate",
        ),
        "the safety grid",
    )
    models = list(dict.fromkeys(grid["model"]))
    if len(models) != 1:
        raise AttncodaError(f"the safety grid must hold one model; got {models}")
    chosen = list(dict.fromkeys(grid["metric"])) if metrics is None else list(metrics)
    for m in chosen:
        if m not in set(grid["metric"]):
            raise AttncodaError(f"the safety grid has no metric {m!r}")
    import matplotlib as mpl

    cmap = mpl.colormaps["magma_r"].with_extremes(bad="#d9d9d9")
    finite = grid["flip_rate"].to_numpy(float)
    vmax = max(0.05, float(np.nanmax(finite, initial=0.0)))
    cols = min(len(chosen), 3)
    rows_n = -(-len(chosen) // cols)
    fig = _new_figure(figsize=(4.3 * cols + 0.8, 3.9 * rows_n + 0.6))
    axes = np.atleast_1d(fig.subplots(rows_n, cols, squeeze=False)).ravel()
    image = None
    for ax, metric in zip(axes, chosen, strict=False):
        g = grid[grid["metric"] == metric]
        n_s, n_g = int(g["sink_share_bin"].max()) + 1, int(g["sink_gap_bin"].max()) + 1
        rate = np.full((n_s, n_g), np.nan)
        count = np.zeros((n_s, n_g), dtype=int)
        for r in g.itertuples():
            rate[r.sink_share_bin, r.sink_gap_bin] = r.flip_rate
            count[r.sink_share_bin, r.sink_gap_bin] = r.n_triplets
        image = ax.imshow(
            np.ma.masked_invalid(rate),
            origin="lower",
            cmap=cmap,
            vmin=0.0,
            vmax=vmax,
            aspect="auto",
        )
        for i in range(n_s):
            for j in range(n_g):
                text = (
                    "n=0"
                    if count[i, j] == 0
                    else ("n/a" if math.isnan(rate[i, j]) else f"{rate[i, j]:.2f}")
                )
                # White text where the cell's colour is dark (by its luminance).
                red, green, blue, _ = cmap(min(rate[i, j], vmax) / vmax)
                dark = (
                    not math.isnan(rate[i, j]) and 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
                )
                ax.text(
                    j,
                    i,
                    text,
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
        share = g.drop_duplicates("sink_share_bin").sort_values("sink_share_bin")
        gap = g.drop_duplicates("sink_gap_bin").sort_values("sink_gap_bin")
        ax.set_yticks(
            range(n_s),
            [
                f"{a:.2g}–{b:.2g}"
                for a, b in zip(share["sink_share_low"], share["sink_share_high"], strict=True)
            ],
            fontsize=7,
        )
        ax.set_xticks(
            range(n_g),
            [
                f"{a:.2g}–{b:.2g}"
                for a, b in zip(gap["sink_gap_low"], gap["sink_gap_high"], strict=True)
            ],
            fontsize=7,
            rotation=30,
        )
        ax.set_xlabel("sink-mass gap |s_B − s_C|")
        ax.set_ylabel("sink share of d_A² (Aitchison)")
        ax.set_title(metric)
    for ax in axes[len(chosen) :]:
        ax.set_axis_off()
    if image is not None:
        label = f"flip rate ({CONVENTIONS_LABEL})"
        fig.colorbar(image, ax=axes[: len(chosen)].tolist(), label=label, shrink=0.8)
    fig.suptitle(
        f"Flip rate {CONVENTIONS_LABEL} by sink share of d_A² and sink-mass gap — {models[0]}"
    )
    return fig


def plot_flip_rates(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """:func:`flip_rate_figure` saved as PNG at ``path``; returns the path."""
    return save_png(flip_rate_figure(table), path)


def plot_safety(
    grid: pd.DataFrame, path: str | os.PathLike[str], metrics: Sequence[str] | None = None
) -> Path:
    """:func:`safety_figure` saved as PNG at ``path``; returns the path."""
    return save_png(safety_figure(grid, metrics), path)
