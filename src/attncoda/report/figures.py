"""Every figure of a run, drawn one way: from the experiment's stored tables.

:func:`figure` is what the report (and a result object of the Python API) calls: the name
of an experiment and its tables by name, as a run folder stores them (``DIR/tables``;
the per-model figures take the rows of one model). Each experiment's module here draws
it: :mod:`~attncoda.report.figures_profile`, :mod:`~attncoda.report.figures_flips` (flips
and safety), :mod:`~attncoda.report.figures_cluster`,
:mod:`~attncoda.report.figures_predictor` and :mod:`~attncoda.report.figures_training`
(collapse and prune).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attncoda._errors import AttncodaError
from attncoda.report.labels import one_model

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["FIGURE_TABLES", "figure"]

#: The tables each experiment's figure is drawn from.
FIGURE_TABLES = {
    "profile": ("profile_heads",),
    "flips": ("flips",),
    "cluster": ("cluster", "cluster_summary"),
    "safety": ("safety_grid",),
    "predictor": ("predictor",),
    "collapse": ("collapse",),
    "prune": ("prune",),
}


def figure(name: str, tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The figure of experiment ``name`` drawn from its ``tables``.

    Parameters
    ----------
    name : str
        An experiment (:data:`attncoda.experiments.contract.EXPERIMENTS`).
    tables : mapping of str to pandas.DataFrame
        Its tables by name (:data:`FIGURE_TABLES` says which are read). Flips and predictor
        draw every model of their table; the others draw one model (and revision).
    sink : str
        The run's sink spec, named in the titles of profile and collapse.

    Returns
    -------
    matplotlib.figure.Figure
        Outside pyplot's state (nothing to close).

    Raises
    ------
    AttncodaError
        An unknown experiment, a table missing or lacking a column, or several models where
        the figure draws one.
    """
    if name not in FIGURE_TABLES:
        raise AttncodaError(f"no figure of {name!r}: use one of {', '.join(FIGURE_TABLES)}")
    absent = [t for t in FIGURE_TABLES[name] if t not in tables]
    if absent:
        raise AttncodaError(f"the figure of {name} needs the {absent[0]} table")
    if name == "profile":
        from attncoda.report.figures_profile import profile_figure

        heads = tables["profile_heads"]
        return profile_figure(heads, model=one_model(heads, "profile_heads"), sink=sink)
    if name == "flips":
        from attncoda.report.figures_flips import flip_rate_figure

        return flip_rate_figure(tables["flips"])
    if name == "cluster":
        from attncoda.report.figures_cluster import cluster_figure_from_tables

        return cluster_figure_from_tables(tables["cluster"], tables["cluster_summary"])
    if name == "safety":
        from attncoda.report.figures_flips import safety_figure

        return safety_figure(tables["safety_grid"])
    if name == "predictor":
        from attncoda.report.figures_predictor import predictor_figure

        return predictor_figure(tables["predictor"])
    from attncoda.report.figures_training import collapse_split_figure, prune_curve_figure

    if name == "collapse":
        table = tables["collapse"]
        return collapse_split_figure(table, model=one_model(table, "collapse"), sink=sink)
    table = tables["prune"]
    return prune_curve_figure(table, model=one_model(table, "prune"))
