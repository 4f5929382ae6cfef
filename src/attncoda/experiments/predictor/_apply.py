"""The frozen predictor applied to a model: its sink features, its row of what was read
and measured, and the prediction, abstention and verdicts of each row against the fitted
file (docs/design.md, "The experiments"; the module docstring of
:mod:`attncoda.experiments.predictor._experiment` says what each is)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    HeadRows,
)
from attncoda.experiments.flips import FlipsResult
from attncoda.experiments.predictor._model import Predictor
from attncoda.experiments.predictor._protocol import OFF_PROTOCOL
from attncoda.experiments.predictor._rounding import feature_rounding, row_rounding
from attncoda.experiments.predictor._verdict import (
    verdict_columns,
)
from attncoda.experiments.safety import SquaredSplit, mean_squared_split

__all__ = [
    "apply_predictor",
    "check_predictor_file",
    "predictor_row",
    "shipped_predictor",
    "sink_features",
]


def sink_features(head_rows: HeadRows, squares: SquaredSplit | None = None) -> dict[str, float]:
    """The model-level sink statistics the predictor uses.

    Parameters
    ----------
    head_rows : HeadRows
        Recorded rows of every head (``sink_mass`` gives the head sink masses).
    squares : SquaredSplit, optional
        :func:`~attncoda.experiments.safety.mean_squared_split` of ``head_rows`` if already
        computed.

    Returns
    -------
    dict
        ``mean_sink_mass``, ``std_sink_mass`` (probabilities) and ``mean_sink_share``
        (a share in ``[0, 1]``), as Python floats.
    """
    mass = np.asarray(head_rows.sink_mass, dtype=np.float64)
    squares = mean_squared_split(head_rows) if squares is None else squares
    return {
        "mean_sink_mass": float(mass.mean()),
        "std_sink_mass": float(mass.std()),
        "mean_sink_share": squares.sink_share,
    }


def predictor_row(
    head_rows: HeadRows,
    flips_result: FlipsResult,
    squares: SquaredSplit | None = None,
    *,
    protocol: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A training (or test) row: ``{"model", "features", "flip_rates", "rounding"}`` for
    one model, ``"identity"`` (weights hash and ``train-tiny`` recipe) when the rows carry
    one, and ``"protocol"`` (how the rows were read: :func:`~attncoda.experiments.predictor.
    _protocol.protocol_of`) when given.

    ``rounding`` states how far float32 rounding can move what the row holds:
    ``{"features": {name: bound}}`` (:func:`~attncoda.experiments.predictor._rounding.
    feature_rounding`, from the rows) and ``{"flip_rates": {metric: rate_rounding}}`` (the
    flips table's, the rate's fragile triplets; docs/design.md, "Verdicts and ratios within
    rounding"); a flips table without ``rate_rounding`` states none for the rates."""
    if flips_result.model != head_rows.model:
        raise AttncodaError(
            f"flips_result is for model {flips_result.model!r}, not {head_rows.model!r}"
        )
    table = flips_result.table
    rates = zip(table["metric"], table["flip_rate"], strict=True)
    squares = mean_squared_split(head_rows) if squares is None else squares
    rounding: dict[str, Any] = {"features": feature_rounding(head_rows, squares)}
    if "rate_rounding" in table.columns:
        stated = zip(table["metric"], table["rate_rounding"], strict=True)
        rounding["flip_rates"] = {str(m): float(r) for m, r in stated}
    row: dict[str, Any] = {
        "model": head_rows.model,
        "features": sink_features(head_rows, squares),
        "flip_rates": {str(m): float(r) for m, r in rates},
        "rounding": rounding,
    }
    if head_rows.identity is not None:
        row["identity"] = dict(head_rows.identity)
    if protocol is not None:
        row["protocol"] = dict(protocol)
    return row


def shipped_predictor() -> Path:
    """The frozen predictor shipped with attncoda (see ``experiments/data/PROVENANCE.md``)."""
    from importlib.resources import files

    return Path(str(files("attncoda.experiments") / "data" / "flip_predictor.json"))


def apply_predictor(
    predictor: Predictor | str | os.PathLike[str], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Apply a frozen predictor and its baseline to measured models: predictions,
    measurement, scores and verdicts side by side.

    Parameters
    ----------
    predictor : Predictor, path-like or ``"shipped"``
        A predictor, a predictor file, or ``"shipped"`` for the one shipped with attncoda.
    rows : sequence of mapping
        One per model, from :func:`predictor_row`.

    Returns
    -------
    list of dict
        Per row: ``model``, ``features``, ``prediction`` and ``baseline`` (each a
        :class:`Prediction`), ``measured`` (the flip rate of the predictor's target: the
        mean over the row's metrics, or one metric) and ``measured_rounding`` (how far
        rounding moves it: the row's stated rate roundings, averaged alike; 0 where it
        states none); the predictor's ``predicted``, ``predicted_low``, ``predicted_high``,
        ``width``, ``abs_error``, ``interval_score`` and ``verdict``, and the baseline's,
        prefixed ``baseline_``, then ``predicted_rounding``, ``interval_score_rounding``,
        ``verdict_edge`` and the baseline's ``baseline_rounding``,
        ``baseline_interval_score_rounding``, ``baseline_edge``
        (:func:`~attncoda.experiments.predictor._verdict.verdict_columns`; both verdicts
        ``"off protocol: no test"``, and not on an edge, for a row whose ``protocol`` is not
        the predictor's, or that records none); ``abstain_edge`` (the abstention decided
        within rounding: :attr:`Prediction.edge`); ``off_protocol`` (how its protocol
        differs, ``[]`` when on protocol), ``matched`` (``None`` for a model the predictor
        has not seen, else ``(training model, how)``: :meth:`Predictor.training_match` on
        the row's name and ``identity``), ``relation`` (:meth:`Predictor.relation`) and
        ``counted``: whether the verdicts test the predictor (held out and on protocol). A
        model matched by its weights is never subject to abstention (:meth:`Predictor.apply`).
    """
    if not isinstance(predictor, Predictor):
        predictor = Predictor.from_json(
            shipped_predictor() if str(predictor) == "shipped" else predictor
        )
    outcomes = []
    for row in rows:
        matched = predictor.training_match([row["model"]], row.get("identity"))
        how = "" if matched is None else matched[1]
        errors, measured_rounding = row_rounding(row, predictor.features, predictor.target)
        prediction = predictor.apply(row["features"], matched_by=how, errors=errors)
        baseline = predictor.apply_baseline()
        rates = row["flip_rates"]
        measured = (
            float(np.mean(list(rates.values())))
            if predictor.target == "mean"
            else float(rates[predictor.target])
        )
        off = predictor.off_protocol(row.get("protocol"))
        relation = predictor.relation([row["model"]], row.get("identity"))
        scored = verdict_columns(prediction, baseline, measured, predictor.alpha, measured_rounding)
        if off:  # decided by the protocol, exactly
            scored |= {"verdict": OFF_PROTOCOL, "baseline_verdict": OFF_PROTOCOL}
            scored |= {"verdict_edge": False, "baseline_edge": False}
        outcomes.append(
            {
                "model": row["model"],
                "features": row["features"],
                "prediction": prediction,
                "baseline": baseline,
                "measured": measured,
                "measured_rounding": measured_rounding,
                "abstain_edge": prediction.edge,
                **scored,
                "off_protocol": off,
                "matched": matched,
                "relation": relation,
                "counted": relation.held_out and not off,
            }
        )
    return outcomes


def check_predictor_file(predictor: str) -> None:
    """Refuse a predictor setting that is neither ``"shipped"`` nor a file that
    :meth:`Predictor.from_json` reads (its error names what is wrong)."""
    if predictor == "shipped":
        return
    if not Path(predictor).is_file():
        raise AttncodaError(
            f"predictor file {predictor!r} does not exist: give a file written by "
            f"'attncoda predictor fit', or 'shipped'"
        )
    Predictor.from_json(predictor)
