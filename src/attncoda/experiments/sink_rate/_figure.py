"""The figure of the sink rate: the rate per key position, one bar per model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from attncoda.experiments.view import groups, need_columns, new_agg_figure

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["draw", "sink_rate_figure"]


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``sink_rate`` table (every model of it)."""
    return sink_rate_figure(tables["sink_rate"])


def sink_rate_figure(table: pd.DataFrame) -> Figure:
    """Bar chart of the sink rate (percent of (window, layer, head) triples whose score
    exceeds ε) per key position, one bar per model.

    Parameters
    ----------
    table : pandas.DataFrame
        The ``sink_rate`` table (``model``, ``revision``, ``position``, ``epsilon``,
        ``sink_rate``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    need_columns(table, ("model", "revision", "position", "epsilon", "sink_rate"), "sink_rate")
    positions = sorted({int(p) for p in table["position"]})
    models = groups(table)
    width = 0.8 / max(len(models), 1)
    fig = new_agg_figure(figsize=(max(6.0, 1.2 * len(positions) * len(models) + 2), 4.2))
    ax = fig.subplots()
    x = np.arange(len(positions))
    for i, (label, rows) in enumerate(models):
        by_position = dict(zip(rows["position"].astype(int), rows["sink_rate"], strict=True))
        rates = np.array([by_position.get(p, np.nan) for p in positions], dtype=float)
        ax.bar(x + (i - (len(models) - 1) / 2) * width, np.nan_to_num(rates), width, label=label)
    epsilons = sorted({float(e) for e in table["epsilon"]})
    ax.set_xticks(x, [str(p) for p in positions])
    ax.set_xlabel("key position (0: the first token the model reads)")
    ax.set_ylabel("sink rate, % of (window, layer, head)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title(
        "Sink rate (Gu et al. 2025): score = mean attention a key receives from the queries "
        f"that see it > ε = {', '.join(f'{e:g}' for e in epsilons)}",
        fontsize=10,
    )
    return fig
