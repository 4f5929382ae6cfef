"""The head-clustering figure: Clark et al.'s MDS embedding under the four variants.

One panel per variant (:data:`attncoda.experiments.cluster.VARIANTS`), heads at their MDS
coordinates coloured by head sink mass on one shared scale, each panel titled with its
variant and the Spearman correlation of its axis 1 with sink mass, drawn from the
``cluster`` and ``cluster_summary`` tables of a run folder
(:func:`cluster_figure_from_tables`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.experiments.cluster._distances import VARIANT_TITLES, VARIANTS
from attncoda.store.runs import NO_REVISION

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["cluster_figure_from_tables", "draw"]


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``cluster`` and ``cluster_summary`` tables."""
    return cluster_figure_from_tables(tables["cluster"], tables["cluster_summary"])


def _panel_title(variant: str, rho: float | None, best: float | None) -> str:
    stat = "undefined" if rho is None else f"{rho:+.2f}"
    if best is not None:
        stat += f"\nlargest |ρ| over directions = {best:.2f}"
    return f"{VARIANT_TITLES[variant]}\nSpearman ρ(axis 1, sink mass) = {stat}"


def _optional(value: Any) -> float | None:
    """A stored statistic, ``None`` where the table holds a missing value (NaN / NA)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def cluster_figure_from_tables(table: pd.DataFrame, summary: pd.DataFrame) -> Figure:
    """The four-panel clustering figure of one model, from a run folder's tables.

    Parameters
    ----------
    table : pandas.DataFrame
        The ``cluster`` rows of one model (and revision): ``sink_mass``, ``x_<variant>``,
        ``y_<variant>`` for every variant of :data:`~attncoda.experiments.cluster.VARIANTS`.
    summary : pandas.DataFrame
        The ``cluster_summary`` rows of the same model: ``variant``,
        ``spearman_axis1_vs_sink_mass``, ``max_abs_spearman_any_direction``, ``degenerate``.

    Returns
    -------
    matplotlib.figure.Figure
        A 2×2 grid, one panel per variant; heads coloured by sink mass on one scale.

    Raises
    ------
    AttncodaError
        A table lacks a column or a variant, or holds more than one model.
    """
    columns = ["sink_mass", *(f"{a}_{v}" for v in VARIANTS for a in ("x", "y"))]
    for name, frame, needed in (
        ("cluster", table, columns),
        (
            "cluster_summary",
            summary,
            ["variant", "spearman_axis1_vs_sink_mass", "max_abs_spearman_any_direction"],
        ),
    ):
        missing = [c for c in needed if c not in frame.columns]
        if missing:
            raise AttncodaError(f"the {name} table lacks the column {missing[0]!r}")
    if len(table) == 0:
        raise AttncodaError("the cluster table has no rows to plot")
    models = list(dict.fromkeys(table["model"])) if "model" in table.columns else ["?"]
    if len(models) != 1:
        raise AttncodaError(f"the cluster table must hold one model; got {models}")
    by_variant = {str(r["variant"]): r for r in summary.to_dict("records")}
    absent = [v for v in VARIANTS if v not in by_variant]
    if absent:
        raise AttncodaError(f"the cluster_summary table has no variant {absent[0]!r}")
    label = str(models[0])
    if "revision" in table.columns:
        revision = str(table["revision"].iloc[0])
        if revision != NO_REVISION:
            label = f"{label}@{revision}"
    return _draw(
        table,
        rho={v: _optional(by_variant[v]["spearman_axis1_vs_sink_mass"]) for v in VARIANTS},
        best={v: _optional(by_variant[v]["max_abs_spearman_any_direction"]) for v in VARIANTS},
        degenerate={v for v in VARIANTS if bool(by_variant[v].get("degenerate", False))},
        model=label,
    )


def _draw(
    table: pd.DataFrame,
    *,
    rho: Mapping[str, float | None],
    best: Mapping[str, float | None],
    degenerate: set[str],
    model: str,
) -> Figure:
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    sink_mass = table["sink_mass"].to_numpy()
    low, high = float(sink_mass.min()), float(sink_mass.max())
    if high <= low:  # one sink mass for every head: widen so the colour scale exists
        low, high = low - 0.5, high + 0.5
    norm = Normalize(vmin=low, vmax=high)

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
        ax.set_title(_panel_title(variant, rho[variant], best[variant]), fontsize=10)
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
    fig.suptitle(f"Head clustering (Clark et al. 2019) of {model}\n{units}")
    return fig
