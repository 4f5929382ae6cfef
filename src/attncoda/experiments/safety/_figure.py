"""The figure of the safety map: one heatmap per metric of the keep vs drop flip rate over
sink-share bins (rows) and sink-mass-gap bins (columns), drawn on the Agg canvas.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.safety._bins import GRID_KEYS
from attncoda.experiments.view import need_columns, new_agg_figure, save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["draw", "plot_safety", "safety_figure"]

CONVENTIONS_LABEL = "keep vs drop"


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``safety_grid`` table (one model)."""
    return safety_figure(tables["safety_grid"])


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
    model, chosen = _drawn(grid, metrics)
    import matplotlib as mpl

    cmap = mpl.colormaps["magma_r"].with_extremes(bad="#d9d9d9")
    finite = grid["flip_rate"].to_numpy(float)
    vmax = max(0.05, float(np.nanmax(finite, initial=0.0)))
    cols = min(len(chosen), 3)
    rows_n = -(-len(chosen) // cols)
    fig = new_agg_figure(figsize=(4.3 * cols + 0.8, 3.9 * rows_n + 0.6))
    axes = np.atleast_1d(fig.subplots(rows_n, cols, squeeze=False)).ravel()
    image = None
    for ax, metric in zip(axes, chosen, strict=False):
        g = grid[grid["metric"] == metric]
        rate, count = _cells(g)
        masked = np.ma.masked_invalid(rate)
        image = ax.imshow(masked, origin="lower", cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
        _label_cells(ax, rate, count, cmap, vmax)
        _label_bins(ax, g, rate.shape)
        ax.set_title(metric)
    for ax in axes[len(chosen) :]:
        ax.set_axis_off()
    if image is not None:
        label = f"flip rate ({CONVENTIONS_LABEL})"
        fig.colorbar(image, ax=axes[: len(chosen)].tolist(), label=label, shrink=0.8)
    fig.suptitle(f"Flip rate {CONVENTIONS_LABEL} by sink share of d_A² and sink-mass gap — {model}")
    return fig


def _drawn(grid: pd.DataFrame, metrics: Sequence[str] | None) -> tuple[str, list[str]]:
    """The grid's one model and the metrics drawn (all in ``grid`` by default), checked."""
    need_columns(grid, (*GRID_KEYS, "n_triplets", "flip_rate"), "the safety grid")
    models = list(dict.fromkeys(grid["model"]))
    if len(models) != 1:
        raise AttncodaError(f"the safety grid must hold one model; got {models}")
    chosen = list(dict.fromkeys(grid["metric"])) if metrics is None else list(metrics)
    for m in chosen:
        if m not in set(grid["metric"]):
            raise AttncodaError(f"the safety grid has no metric {m!r}")
    return models[0], chosen


def _cells(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """One metric's flip rate (NaN where the grid lists none) and triplet count per cell,
    shape (share bin, gap bin)."""
    n_s, n_g = int(g["sink_share_bin"].max()) + 1, int(g["sink_gap_bin"].max()) + 1
    rate = np.full((n_s, n_g), np.nan)
    count = np.zeros((n_s, n_g), dtype=int)
    for r in g.itertuples():
        rate[r.sink_share_bin, r.sink_gap_bin] = r.flip_rate
        count[r.sink_share_bin, r.sink_gap_bin] = r.n_triplets
    return rate, count


def _label_cells(ax: Any, rate: np.ndarray, count: np.ndarray, cmap: Any, vmax: float) -> None:
    """Each cell's flip rate written on it (``n=0`` empty, ``n/a`` nothing decided), in
    white where the cell's colour is dark (by its luminance)."""
    n_s, n_g = rate.shape
    for i in range(n_s):
        for j in range(n_g):
            text = (
                "n=0"
                if count[i, j] == 0
                else ("n/a" if math.isnan(rate[i, j]) else f"{rate[i, j]:.2f}")
            )
            red, green, blue, _ = cmap(min(rate[i, j], vmax) / vmax)
            dark = not math.isnan(rate[i, j]) and 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
            color = "white" if dark else "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)


def _label_bins(ax: Any, g: pd.DataFrame, shape: tuple[int, int]) -> None:
    """The bins' ranges as ticks: ``shape[0]`` of sink share up, ``shape[1]`` of sink-mass
    gap across."""
    share = g.drop_duplicates("sink_share_bin").sort_values("sink_share_bin")
    gap = g.drop_duplicates("sink_gap_bin").sort_values("sink_gap_bin")
    ax.set_yticks(range(shape[0]), _ranges(share, "sink_share"), fontsize=7)
    ax.set_xticks(range(shape[1]), _ranges(gap, "sink_gap"), fontsize=7, rotation=30)
    ax.set_xlabel("sink-mass gap |s_B − s_C|")
    ax.set_ylabel("sink share of d_A² (Aitchison)")


def _ranges(bins: pd.DataFrame, kind: str) -> list[str]:
    """Each bin's range of the coordinate ``kind``: ``0.12–0.34``."""
    low, high = bins[f"{kind}_low"], bins[f"{kind}_high"]
    return [f"{a:.2g}–{b:.2g}" for a, b in zip(low, high, strict=True)]


def plot_safety(
    grid: pd.DataFrame, path: str | os.PathLike[str], metrics: Sequence[str] | None = None
) -> Path:
    """:func:`safety_figure` saved as PNG at ``path``; returns the path."""
    return save_png(safety_figure(grid, metrics), path)
