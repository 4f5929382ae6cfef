"""The verdict of a prediction on a measured model, and the scores that compare it with the
baseline's (docs/design.md, "The experiments", predictor).

A count of confirmations alone rewards wide intervals: every verdict is shown with the
interval's width, the point's absolute error and the interval score of Gneiting and
Raftery (2007, "Strictly proper scoring rules, prediction, and estimation", JASA 102(477),
eq. 43), for the predictor and the constant baseline side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._protocol import OFF_PROTOCOL

__all__ = [
    "standing",
    "EDGE",
    "ROUNDING_COLUMNS",
    "SCORE_COLUMNS",
    "VERDICTS",
    "Prediction",
    "interval_score",
    "interval_score_rounding",
    "verdict",
    "verdict_columns",
    "verdict_edge",
    "verdict_text",
]

VERDICTS = ("confirmed", "abstained", "failed")
#: The columns :func:`verdict_columns` gives for each of the predictor and the baseline
#: (the baseline's prefixed ``baseline_``).
SCORE_COLUMNS = (
    "predicted",
    "predicted_low",
    "predicted_high",
    "width",
    "abs_error",
    "interval_score",
    "verdict",
)
#: The columns :func:`verdict_columns` gives after the scores, for the predictor and the
#: baseline: the rounding of the point and the ends, of the interval score, and whether the
#: verdict is on its edge.
ROUNDING_COLUMNS = {
    "": ("predicted_rounding", "interval_score_rounding", "verdict_edge"),
    "baseline_": ("baseline_rounding", "baseline_interval_score_rounding", "baseline_edge"),
}
#: How a report and a summary say a verdict on its edge: after the verdict, and counted apart.
EDGE = "on the edge"


@dataclass(frozen=True)
class Prediction:
    """A predicted flip rate, or an abstention.

    Attributes
    ----------
    abstained : bool
        True when the model is outside what the predictor was fitted on.
    reason : str
        Why it abstained ("" otherwise).
    point, low, high : float or None
        The predicted flip rate and its interval (``None`` when abstaining).
    rounding : float
        How far float32 rounding can move each end (flip-rate units): the features'
        rounding through the fit, which moves the point as far (:meth:`Predictor.apply`;
        stated for an abstention too, where the features are finite), or for the constant
        baseline that of the training models' measured rates its ends are made of
        (:meth:`Baseline.apply`). :func:`verdict` takes a measured rate within it of an end
        as inside.
    edge : bool
        Whether the abstention, or its absence, was decided within rounding of a threshold
        (a feature near its widened range end, the leverage near its widened threshold):
        another device may decide it the other way.
    """

    abstained: bool
    reason: str = ""
    point: float | None = None
    low: float | None = None
    high: float | None = None
    rounding: float = 0.0
    edge: bool = False


def _finite(measured: Any) -> float:
    if (
        isinstance(measured, bool)
        or not isinstance(measured, (int, float, np.floating))
        or not (math.isfinite(measured))
    ):
        raise AttncodaError(f"measured flip rate must be a finite number; got {measured!r}")
    return float(measured)


def verdict(prediction: Prediction, measured: float) -> str:
    """``"confirmed"`` (measured inside the interval, or within the prediction's float32
    ``rounding`` of an end), ``"failed"`` or ``"abstained"``. Whether that comparison is
    decided within rounding is :func:`verdict_edge`'s.

    Parameters
    ----------
    prediction : Prediction
        From :meth:`Predictor.apply` or :meth:`Predictor.apply_baseline`.
    measured : float
        The flip rate measured on the model (the same target: the mean over metrics by
        default).
    """
    measured = _finite(measured)
    if prediction.abstained or prediction.low is None or prediction.high is None:
        return "abstained"
    slack = prediction.rounding
    inside = prediction.low - slack <= measured <= prediction.high + slack
    return "confirmed" if inside else "failed"


def interval_score(low: float, high: float, measured: float, alpha: float) -> float:
    """The interval score of Gneiting and Raftery (2007, eq. 43) of a central
    ``(1 - alpha)`` interval ``[low, high]`` for the value ``measured``.

    .. math::

        S = (u - l) + \\frac{2}{\\alpha}(l - y)\\,[y < l] + \\frac{2}{\\alpha}(y - u)\\,[y > u]

    Parameters
    ----------
    low, high : float
        The interval's ends (a flip rate, fractions).
    measured : float
        The measured value ``y``.
    alpha : float
        The interval's miscoverage level, in ``(0, 1)``.

    Returns
    -------
    float
        In the units of the rates; lower is better: the width, plus ``2 / alpha`` times the
        distance by which the interval misses ``y``.
    """
    y = _finite(measured)
    if not 0 < alpha < 1:
        raise AttncodaError(f"alpha must lie strictly between 0 and 1; got {alpha!r}")
    if not low <= high:
        raise AttncodaError(f"the interval [{low!r}, {high!r}] has low > high: give low <= high")
    return (
        (high - low)
        + (2 / alpha) * (low - y) * (y < low)
        + (2 / alpha) * (y - high) * (y > high)
    )


def verdict_edge(prediction: Prediction, measured: float, measured_rounding: float = 0.0) -> bool:
    """Whether :func:`verdict` of ``measured`` is decided within rounding of its threshold.

    The verdict compares ``measured`` with each end widened by the prediction's
    ``rounding`` ``r`` (``low - r``, ``high + r``). It is on its edge when ``measured`` lies
    within ``measured_rounding + 2 r`` of either widened end, on either side: another device
    moves the measured rate by up to its rounding (a bound between two devices: the rate's
    fragile triplets), and computes the end within ``r`` of its exact value, as this one
    did (for the baseline, whose ends are training models' measured rates, ``r`` is their
    rounding). An end clipped to 0 (or 1) is no edge: its widened
    threshold lies at or below 0 on every device, and a rate never below it. An abstention, or a
    prediction whose abstention rules were decided on their edge (:attr:`Prediction.edge`),
    is on its edge when those rules were.

    Parameters
    ----------
    prediction : Prediction
    measured : float
        The measured flip rate.
    measured_rounding : float
        How far rounding can move it (flip-rate units, non-negative).
    """
    measured = _finite(measured)
    if prediction.abstained or prediction.low is None or prediction.high is None:
        return prediction.edge
    r = prediction.rounding
    band = abs(float(measured_rounding)) + 2 * r
    # an end at 0 (or 1) moves to at most r above it, its widened threshold to at most 0:
    # a rate, never below 0, cannot fall below it
    near_low = prediction.low > 0 and abs(measured - (prediction.low - r)) <= band
    near_high = prediction.high < 1 and abs(measured - (prediction.high + r)) <= band
    return prediction.edge or near_low or near_high


def interval_score_rounding(rounding: float, measured_rounding: float, alpha: float) -> float:
    """How far :func:`interval_score` can differ between two devices, each of which computes
    each end within ``rounding`` of its exact value (so ``d = 2 rounding`` apart) and whose
    measured rates differ by at most ``measured_rounding`` (``m``): ``(2 / alpha)(d + m)``.

    The score is piecewise linear in ``(l, u, y)``: inside the interval it is ``u - l``,
    which moves by at most ``2 d``; below it ``(u - l) + (2/alpha)(l - y)``, whose slopes are
    ``2/alpha - 1`` in ``l``, 1 in ``u`` and ``2/alpha`` in ``y``, so it moves by at most
    ``(2/alpha)(d + m)``; above it alike. The score is continuous, so the largest of these,
    ``(2/alpha)(d + m)`` (``2/alpha > 2``), bounds every move.
    """
    return (2 / alpha) * (2 * abs(float(rounding)) + abs(float(measured_rounding)))


def verdict_columns(
    prediction: Prediction,
    baseline: Prediction,
    measured: float,
    alpha: float,
    measured_rounding: float = 0.0,
) -> dict[str, Any]:
    """The predictor's and the baseline's verdicts and scores side by side, with what
    rounding leaves open.

    Parameters
    ----------
    prediction, baseline : Prediction
        :meth:`Predictor.apply` and :meth:`Predictor.apply_baseline` of one model.
    measured : float
        Its measured flip rate (the predictor's target).
    alpha : float
        The intervals' miscoverage level (:attr:`Predictor.alpha`).
    measured_rounding : float
        How far rounding can move ``measured`` (its flips' ``rate_rounding``; 0: exact).

    Returns
    -------
    dict
        For the predictor, then the baseline (prefixed ``baseline_``), the keys of
        :data:`SCORE_COLUMNS`: ``predicted``, ``predicted_low``, ``predicted_high`` (the
        point and the interval, ``None`` when abstaining), ``width`` (``high - low``),
        ``abs_error`` (``|measured - point|``), ``interval_score``
        (:func:`interval_score`), each in flip-rate units, ``None`` when abstaining; and
        ``verdict`` (:func:`verdict`). Then :data:`ROUNDING_COLUMNS`: ``predicted_rounding``
        and ``baseline_rounding`` (:attr:`Prediction.rounding`), ``interval_score_rounding``
        and ``baseline_interval_score_rounding`` (:func:`interval_score_rounding`), and
        ``verdict_edge`` and ``baseline_edge`` (:func:`verdict_edge`).
    """
    out: dict[str, Any] = {}
    for prefix, p in (("", prediction), ("baseline_", baseline)):
        given = not p.abstained and None not in (p.point, p.low, p.high)
        low, high, point = p.low or 0.0, p.high or 0.0, p.point or 0.0
        out |= {
            f"{prefix}predicted": p.point if given else None,
            f"{prefix}predicted_low": p.low if given else None,
            f"{prefix}predicted_high": p.high if given else None,
            f"{prefix}width": high - low if given else None,
            f"{prefix}abs_error": abs(measured - point) if given else None,
            f"{prefix}interval_score": (
                interval_score(low, high, measured, alpha) if given else None
            ),
            f"{prefix}verdict": verdict(p, measured),
        }
    for prefix, p in (("", prediction), ("baseline_", baseline)):
        rounding, score, edge = ROUNDING_COLUMNS[prefix]
        out |= {
            rounding: float(p.rounding),
            score: interval_score_rounding(p.rounding, measured_rounding, alpha),
            edge: verdict_edge(p, measured, measured_rounding),
        }
    return out


def verdict_text(value: Any, edge: Any) -> str:
    """A verdict as a report or a summary says it: ``"confirmed (on the edge)"`` where its
    row states it is decided within rounding (:data:`EDGE`), else the verdict itself."""
    text = str(value)
    on_edge = edge is not None and edge == edge and bool(edge)
    return f"{text} ({EDGE})" if on_edge and not text.startswith("off protocol") else text


def standing(record: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a row of a ``predictor`` table tests the predictor, and why not if not.

    Parameters
    ----------
    record : mapping
        One row of the table :func:`run` writes (``counted``, ``relation``,
        ``matched_training_model``, ``matched_by``, ``run_training_models``,
        ``off_protocol``). A row of an older table that lacks ``counted`` is not counted.

    Returns
    -------
    (bool, str)
        ``(True, "held out")`` for a held-out model read on protocol; else ``False`` and
        what it is: ``"training model: M (recipe)"``, ``"interpolated: a checkpoint of the
        run of M1, M2"``, ``"same run: ..."``, ``"off protocol: no test (...)"`` or
        ``"read before protocols were recorded: no test"``.
    """

    def text(key: str) -> str:
        value = record.get(key)
        return "" if value is None or value != value else str(value)

    if "counted" not in record or "relation" not in record:
        return False, "read before protocols were recorded: no test"
    relation = text("relation")
    if relation == "training":
        said = f"training model: {text('matched_training_model')} ({text('matched_by')})"
    elif relation in ("interpolated", "same run"):
        said = f"{relation}: a checkpoint of the run of {text('run_training_models')}"
    else:
        said = "held out"
    if text("off_protocol"):
        said = f"{OFF_PROTOCOL} ({text('off_protocol')}); {said}"
    return bool(record["counted"]), said
