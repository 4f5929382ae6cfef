"""The heatmap of ``attncoda profile``: sink mass and the entropy split over layer × head."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from attncoda.experiments.view import new_figure, one_model, save_png

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["PANELS", "draw", "profile_figure", "profile_heatmap"]


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``profile_heads`` table (one model)."""
    heads = tables["profile_heads"]
    return profile_figure(heads, model=one_model(heads, "profile_heads"), sink=sink)


PANELS = (
    ("sink_mass", "sink mass s", "magma"),
    ("entropy", "H(p), nats", "viridis"),
    ("sink_term", "sink part h(s) + s·H(p_S/s), nats", "viridis"),
    ("content_term", "content part (1-s)·H(q), nats", "viridis"),
)


def profile_heatmap(
    heads: pd.DataFrame, path: str | os.PathLike[str], *, model: str, sink: str
) -> Path:
    """Four layer × head heatmaps: sink mass, H(p) and its exact split into sink and content.

    Parameters
    ----------
    heads : pandas.DataFrame
        The head table of :func:`attncoda.experiments.profile.head_summary`.
    path : path-like
        Where the PNG goes (written atomically).
    model, sink : str
        Named in the title, with the fact that entropies need no keep/drop convention.
    """
    return save_png(profile_figure(heads, model=model, sink=sink), path)


def profile_figure(heads: pd.DataFrame, *, model: str, sink: str) -> Figure:
    """The figure of :func:`profile_heatmap` (a :class:`matplotlib.figure.Figure`), unsaved."""
    table = heads.assign(sink_term=heads["binary_term"] + heads["within_sink_term"])
    n_layers = int(table["layer"].max()) + 1
    n_heads = int(table["head"].max()) + 1
    fig = new_figure(figsize=(4.6 * 4, 0.28 * n_layers + 2.2))
    axes = fig.subplots(1, 4, squeeze=False)
    for ax, (column, label, cmap) in zip(axes[0], PANELS, strict=True):
        grid = np.full((n_layers, n_heads), np.nan)
        grid[table["layer"].to_numpy(), table["head"].to_numpy()] = table[column].to_numpy(float)
        image = ax.imshow(grid, aspect="auto", cmap=cmap, origin="upper")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(
        f"{model}: per-head means over rows with content (sink = {sink}); "
        "H(p) = sink part + content part exactly, no keep/drop convention needed",
        fontsize=11,
    )
    return fig
