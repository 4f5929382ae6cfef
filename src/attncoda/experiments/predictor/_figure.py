"""The figure of the predictor experiment: the frozen predictor's interval and the constant
baseline's beside the measured flip rate, one row per model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.view import groups, new_figure

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["draw", "predictor_figure"]


def draw(tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The experiment's figure from its ``predictor`` table (every model of it)."""
    return predictor_figure(tables["predictor"])


def predictor_figure(table: pd.DataFrame) -> Figure:
    """Per model: the predictor's interval (blue bar) and point (dot), the constant
    baseline's (grey bar and diamond, just below) and the measured rate (red cross).

    Parameters
    ----------
    table : pandas.DataFrame
        The ``predictor`` table of a run: ``model``, ``revision``, ``abstained``,
        ``predicted``, ``predicted_low``, ``predicted_high``, ``measured``, ``verdict``, and
        ``baseline_predicted``, ``baseline_predicted_low``, ``baseline_predicted_high`` (a
        table made before the baseline was stored lacks them: no baseline is drawn). The
        rates are keep vs drop flip rates (the predictor's target), fractions.

    Returns
    -------
    matplotlib.figure.Figure
        One row per model, labelled with its verdict and the baseline's when it tests the
        predictor (a held-out model read on protocol; "on the edge" after a verdict its row
        states to be decided within rounding), else with why it does not (a training
        model, a checkpoint of a training run, a row read off protocol:
        :func:`attncoda.experiments.predictor.standing`); an abstention shows no predictor
        interval.
    """
    columns = ("model", "revision", "abstained", "predicted", "predicted_low", "predicted_high")
    missing = [c for c in (*columns, "measured", "verdict") if c not in table.columns]
    if missing:
        raise AttncodaError(f"the predictor table lacks the column {missing[0]!r}")
    if len(table) == 0:
        raise AttncodaError("the predictor table has no rows to plot")
    baseline = "baseline_predicted" in table.columns
    rows = [(label, r) for label, g in groups(table) for r in g.to_dict("records")]
    fig = new_figure(figsize=(8.0, 1.2 + 0.55 * len(rows)))
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    for yi, (_, r) in zip(y, rows, strict=True):
        if not bool(r["abstained"]):
            _interval(ax, r, "", yi + 0.12, "#2e86c1", "o")
        if baseline and not _missing(r.get("baseline_predicted")):
            _interval(ax, r, "baseline_", yi - 0.12, "#7f8c8d", "D")
        ax.plot([float(r["measured"])], [yi], "x", color="#c0392b", ms=8, mew=2)
    ax.set_yticks(y, [f"{label}: {_said(r)}" for label, r in rows], fontsize=8)
    from matplotlib.ticker import PercentFormatter

    ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("flip rate, keep vs drop (mean over the row metrics)")
    ax.set_title("Predictor (blue), constant baseline (grey), measured (red ×)", fontsize=10)
    ax.grid(alpha=0.3, axis="x")
    return fig


def _interval(ax: Any, r: dict, prefix: str, yi: float, color: str, marker: str) -> None:
    """One interval bar and its point, of the predictor (``prefix`` "") or the baseline."""
    low, high = float(r[f"{prefix}predicted_low"]), float(r[f"{prefix}predicted_high"])
    ax.plot([low, high], [yi, yi], color=color, lw=4, alpha=0.5, solid_capstyle="butt")
    ax.plot([float(r[f"{prefix}predicted"])], [yi], marker, color=color, ms=5)


def _missing(value: Any) -> bool:
    return value is None or value != value


def _said(r: dict) -> str:
    from attncoda.experiments.predictor._verdict import standing, verdict_text

    counted, said = standing(r)
    if counted:
        mine = verdict_text(r["verdict"], r.get("verdict_edge"))
        base = r.get("baseline_verdict")
        if _missing(base):
            return mine
        return f"{mine} (baseline {verdict_text(base, r.get('baseline_edge'))})"
    if said.startswith(("off protocol", "read before")):
        return "off protocol (no test)"
    return f"{said.partition(':')[0]} (no test)"
