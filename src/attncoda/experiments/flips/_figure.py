"""The figure of flips: the keep vs drop flip rate per row metric and model.

:func:`flip_rate_figure` draws one bar group per metric and one bar per model, with the
percentile bootstrap 95% interval over documents where there are enough documents for one.
It names the two conventions it compares in its title and axis labels, and is drawn on the
Agg canvas (no pyplot state).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncoda.experiments.view import need_columns, new_agg_figure, save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["CONVENTIONS_LABEL", "draw", "flip_rate_figure", "plot_flip_rates"]

CONVENTIONS_LABEL = "keep vs drop"


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``flips`` table (every model of it)."""
    return flip_rate_figure(tables["flips"])


def _get(rows: pd.DataFrame, metric: str, column: str) -> float:
    return float(rows.loc[metric, column]) if metric in rows.index else math.nan


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
    need_columns(table, ("model", "metric", "flip_rate", "ci_low", "ci_high"), "the flips table")
    models = list(dict.fromkeys(table["model"]))
    metrics = list(dict.fromkeys(table["metric"]))
    fig = new_agg_figure(figsize=(1.6 + 1.3 * len(metrics) * max(1, len(models) / 2), 4.2))
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


def plot_flip_rates(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """:func:`flip_rate_figure` saved as PNG at ``path``; returns the path."""
    return save_png(flip_rate_figure(table), path)
