"""The head-clustering figure: Clark et al.'s MDS embedding under the four variants.

One panel per variant (:data:`attncoda.experiments.cluster.VARIANTS`), heads at their MDS
coordinates coloured by head sink mass on one shared scale, each panel titled with its
variant and the Spearman correlation of its axis 1 with sink mass.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from attncoda.experiments.cluster import VARIANT_TITLES, VARIANTS, ClusterResult
from attncoda.report.figures import save_png

__all__ = ["cluster_figure"]


def _panel_title(result: ClusterResult, variant: str) -> str:
    rho = result.artifact["spearman_axis1_vs_sink_mass"][variant]
    best = result.artifact["max_abs_spearman_any_direction_vs_sink_mass"][variant]
    stat = "undefined" if rho is None else f"{rho:+.2f}"
    if best is not None:
        stat += f"\nlargest |ρ| over directions = {best:.2f}"
    return f"{VARIANT_TITLES[variant]}\nSpearman ρ(axis 1, sink mass) = {stat}"


def _figure(result: ClusterResult) -> Any:
    """Build the 2×2 figure (a :class:`matplotlib.figure.Figure`, no pyplot state)."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    table = result.table
    sink_mass = table["sink_mass"].to_numpy()
    low, high = float(sink_mass.min()), float(sink_mass.max())
    if high <= low:  # one sink mass for every head: widen so the colour scale exists
        low, high = low - 0.5, high + 0.5
    norm = Normalize(vmin=low, vmax=high)
    degenerate = set(result.artifact.get("degenerate_variants", []))

    fig = Figure(figsize=(10, 10), layout="constrained")
    axes = fig.subplots(2, 2)
    for ax, variant in zip(axes.ravel(), VARIANTS, strict=True):
        ax.scatter(
            table[f"x_{variant}"],
            table[f"y_{variant}"],
            c=sink_mass,
            cmap="viridis",
            norm=norm,
            s=28,
            edgecolors="black",
            linewidths=0.3,
        )
        if variant in degenerate:
            ax.text(
                0.5,
                0.1,
                "all distances 0: not embedded",
                transform=ax.transAxes,
                ha="center",
                fontsize=9,
            )
        ax.set_title(_panel_title(result, variant), fontsize=10)
        ax.set_xlabel("MDS axis 1")
        ax.set_ylabel("MDS axis 2")
        # Summed distances reach 1e4-1e5: scientific tick labels keep them from colliding.
        ax.ticklabel_format(style="sci", scilimits=(-3, 3))
    fig.colorbar(
        ScalarMappable(norm=norm, cmap="viridis"),
        ax=axes.ravel().tolist(),
        label="head sink mass",
        shrink=0.8,
    )
    units = "JS in nats, summed over rows and documents; Aitchison terms summed likewise"
    fig.suptitle(f"Head clustering (Clark et al. 2019) of {result.artifact['model']}\n{units}")
    return fig


def cluster_figure(result: ClusterResult, path: str | os.PathLike[str]) -> Path:
    """Write the four-panel clustering figure as a PNG, atomically.

    Parameters
    ----------
    result : ClusterResult
        As returned by :func:`attncoda.experiments.cluster.cluster`.
    path : path
        Where to write the PNG (its folder is created if needed).

    Returns
    -------
    Path
        ``path``.
    """
    return save_png(_figure(result), path)
