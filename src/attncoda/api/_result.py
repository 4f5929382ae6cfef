"""What an experiment function returns: :class:`Result`, its tables and its figure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["Result"]


@dataclass(frozen=True)
class Result:
    """What an experiment function returns.

    Attributes
    ----------
    experiment : str
        The experiment's name (``"flips"``).
    tables : dict of str to pandas.DataFrame
        Its tables by name, every model's rows together, ``family`` first.
    summary : dict of str to dict
        Each unit's JSON summary by model (``name@revision`` for a revision), as its unit
        recorded it (cluster's artifact, prune's baseline; empty for some); for an experiment
        over a checkpoint series, ``{"series": ...}``, the combined summary.
    path : pathlib.Path or None
        The run folder the tables were stored in, when ``out`` was given.
    sink : str
        The sink spec the tables were made with.
    failed : dict of str to str
        The units that failed, ``{"experiment/model@revision": "ExceptionType: message"}``;
        their models have no rows in :attr:`tables` (empty when every unit finished). A run
        keeps going past a failed unit; a function raises only when no unit finished.
    """

    experiment: str
    tables: Mapping[str, pd.DataFrame]
    summary: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    path: Path | None = None
    sink: str = "first"
    failed: Mapping[str, str] = field(default_factory=dict)

    @property
    def table(self) -> pd.DataFrame:
        """The experiment's first table (``flips`` for flips, ``profile_heads`` for profile)."""
        return next(iter(self.tables.values()))

    def figure(self, model: str | None = None) -> Figure:
        """The experiment's figure, drawn from :attr:`tables` by the report's own code.

        Flips and predictor draw every model; the others draw one, so a result of several
        models needs ``model`` (one of the tables' ``model`` values).
        """
        from attncoda.report.figures import figure

        tables = self.tables
        if model is not None:
            known = sorted({str(m) for f in tables.values() for m in f.get("model", [])})
            if model not in known:
                raise AttncodaError(f"no model {model!r} in this result: use one of {known}")
            tables = {
                k: f[f["model"] == model] if "model" in f.columns else f for k, f in tables.items()
            }
        return figure(self.experiment, tables, sink=self.sink)

    def _repr_html_(self) -> str:
        from attncoda.report.notebook import result_html

        return result_html(self)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {len(v)} rows" for k, v in self.tables.items())
        where = f", path={str(self.path)!r}" if self.path else ""
        failed = f", {len(self.failed)} unit(s) failed" if self.failed else ""
        return f"Result({self.experiment!r}, {shapes}{where}{failed})"
