"""The result of flips for one model and its tables (docs/design.md, "The experiments"):
:class:`FlipsResult`, as :func:`attncoda.experiments.flips.flips` returns it and a flips
unit stores it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Tables, without_run_columns

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["BY_LAYER_COLUMNS", "TABLE_COLUMNS", "FlipsResult"]

TABLE_COLUMNS = (
    "model", "metric", "n_heads", "n_docs", "n_triplets", "n_ties", "flips", "flip_rate",
    "ci_low", "ci_high", "ci_method", "n_boot", "ci_note", "n_fragile", "rate_rounding",
    "ci_rounding",
)  # fmt: skip
BY_LAYER_COLUMNS = (
    "model", "metric", "layer", "n_triplets", "n_ties", "flips", "flip_rate", "n_fragile",
    "rate_rounding",
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class FlipsResult:
    """Flip rates of one model, keep vs drop, per metric.

    Attributes
    ----------
    model : str
        The model spec.
    table : pandas.DataFrame
        One row per metric, columns :data:`TABLE_COLUMNS`: ``model, metric, n_heads,
        n_docs, n_triplets, n_ties, flips, flip_rate, ci_low, ci_high, ci_method, n_boot,
        ci_note``. ``flip_rate = flips / (n_triplets - n_ties)`` (NaN only when every
        triplet is a tie). With at least ``MIN_BOOTSTRAP_N`` (10) documents, ``ci_low,
        ci_high`` are the 2.5 and 97.5 percentiles of the flip rates of ``n_boot``
        resamples of the ``n_docs`` documents (``ci_method`` = ``"percentile bootstrap over
        documents"``, ``ci_note`` = ``""``). With fewer there is no interval: ``ci_low,
        ci_high`` are NaN, ``ci_method`` is ``""``, ``n_boot`` is 0 and ``ci_note`` says why
        (``"no interval: 4 documents, fewer than 10"``). Then what float32 rounding of the
        distances leaves open (docs/design.md, "Verdicts and ratios within rounding"):
        ``n_fragile``, the triplets within their rounding of the tie edge (``n_ties`` and
        ``flips`` are each good to that many); ``rate_rounding``, how far ``flip_rate`` can
        move by them; ``ci_rounding``, how far either end of the interval can (each
        resample's rate moved by its own; NaN without an interval).
    by_layer : pandas.DataFrame
        The same counts broken down by the layer of ``A``: ``model, metric, layer,
        n_triplets, n_ties, flips, flip_rate, n_fragile, rate_rounding`` (no CI).
    distances : dict
        ``(metric, convention) -> ndarray (head, head)``: the pooled head distances.
    rounding : dict
        ``(metric, convention) -> ndarray (head, head)``: how far float32 rounding can move
        each pooled distance (:func:`~attncoda.experiments.flips.distance_rounding`, the
        distances' units), what ``n_fragile`` is counted from; empty for a flips unit
        recorded before it was stored.
    bootstrap : dict
        ``metric -> ndarray (n_boot,)``: the flip rate of each bootstrap resample (shape
        ``(0,)`` when there are too few documents for an interval).
    n_docs, n_rows : int
        Documents with a used row, and used rows in all (per head).
    tol : float
        The relative tie tolerance.
    """

    model: str
    table: pd.DataFrame
    by_layer: pd.DataFrame = field(repr=False)
    distances: dict[tuple[str, str], np.ndarray] = field(repr=False)
    bootstrap: dict[str, np.ndarray] = field(repr=False)
    n_docs: int
    n_rows: int
    tol: float
    rounding: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False)

    def to_tables(self) -> Tables:
        """The result as a flips unit's :class:`Tables`: frames ``flips`` and
        ``flips_by_layer``; arrays ``distance:{metric}:{convention}``,
        ``rounding:{metric}:{convention}``, ``bootstrap:{metric}`` and the 0-d ``n_docs``,
        ``n_rows``, ``tol``."""
        arrays: dict[str, np.ndarray] = {
            "n_docs": np.asarray(self.n_docs),
            "n_rows": np.asarray(self.n_rows),
            "tol": np.asarray(self.tol),
        }
        arrays.update({f"distance:{m}:{c}": d for (m, c), d in self.distances.items()})
        arrays.update({f"rounding:{m}:{c}": e for (m, c), e in self.rounding.items()})
        arrays.update({f"bootstrap:{m}": b for m, b in self.bootstrap.items()})
        return Tables(frames={"flips": self.table, "flips_by_layer": self.by_layer}, arrays=arrays)

    @classmethod
    def from_tables(cls, model: str, tables: Tables) -> FlipsResult:
        """The result a flips unit's :class:`Tables` hold (see :meth:`to_tables`).

        Stored frames carry the run's key columns (``revision``, ``family``); they are left
        out, so the frames are the experiment's own. A unit recorded before the distances'
        rounding was stored gives an empty :attr:`rounding`.
        """
        arrays = tables.arrays
        for key in ("n_docs", "n_rows", "tol"):
            if key not in arrays:
                raise AttncodaError(
                    f"the flips tables of {model!r} hold no {key!r} array: rerun flips"
                )
        distances: dict[tuple[str, str], np.ndarray] = {}
        rounding: dict[tuple[str, str], np.ndarray] = {}
        bootstrap = {}
        for key, value in arrays.items():
            kind, _, rest = key.partition(":")
            if kind in ("distance", "rounding"):
                metric, _, convention = rest.partition(":")
                (distances if kind == "distance" else rounding)[(metric, convention)] = value
            elif kind == "bootstrap":
                bootstrap[rest] = value
        return cls(
            model=model,
            table=without_run_columns(tables.frames["flips"]),
            by_layer=without_run_columns(tables.frames["flips_by_layer"]),
            distances=distances,
            bootstrap=bootstrap,
            n_docs=int(arrays["n_docs"]),
            n_rows=int(arrays["n_rows"]),
            tol=float(arrays["tol"]),
            rounding=rounding,
        )
