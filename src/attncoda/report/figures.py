"""Every figure of a run, drawn one way: by its experiment, from the stored tables.

:func:`figure` is what the report's notebook view and a result object of the Python API
call: the name of an experiment and its tables by name, as a run folder stores them
(``DIR/tables``). The experiment's :class:`~attncoda.experiments.contract.View` says which
tables its figure reads and draws it (each package's ``_figure`` module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import EXPERIMENTS, experiment

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["figure", "figure_tables"]


def figure_tables(name: str) -> tuple[str, ...]:
    """The tables the figure of experiment ``name`` is drawn from.

    Raises
    ------
    AttncodaError
        ``name`` is no experiment, or one without a figure.
    """
    if name not in EXPERIMENTS:
        raise AttncodaError(f"no figure of {name!r}: use one of {', '.join(EXPERIMENTS)}")
    view = experiment(name).view
    if view is None:
        raise AttncodaError(f"the experiment {name!r} declares no figure")
    return view.figure_tables


def figure(name: str, tables: Mapping[str, pd.DataFrame], *, sink: str = "first") -> Figure:
    """The figure of experiment ``name`` drawn from its ``tables``.

    Parameters
    ----------
    name : str
        An experiment (:data:`attncoda.experiments.contract.EXPERIMENTS`).
    tables : mapping of str to pandas.DataFrame
        Its tables by name (:func:`figure_tables` says which are read). Flips and predictor
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
    needs = figure_tables(name)
    absent = [t for t in needs if t not in tables]
    if absent:
        raise AttncodaError(f"the figure of {name} needs the {absent[0]} table")
    view = experiment(name).view
    assert view is not None  # figure_tables refused an experiment without one
    return view.figure(tables, sink=sink)
