"""The verdict of a prediction on a measured model: confirmed, abstained or failed
(docs/design.md, "The experiments", predictor)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attncoda._errors import AttncodaError

__all__ = ["VERDICTS", "Prediction", "verdict"]

VERDICTS = ("confirmed", "abstained", "failed")


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
    """

    abstained: bool
    reason: str = ""
    point: float | None = None
    low: float | None = None
    high: float | None = None


def verdict(prediction: Prediction, measured: float) -> str:
    """``"confirmed"`` (measured inside the interval), ``"failed"`` or ``"abstained"``.

    Parameters
    ----------
    prediction : Prediction
        From :meth:`Predictor.apply`.
    measured : float
        The flip rate measured on the model (the same target: the mean over metrics by
        default).
    """
    if (
        isinstance(measured, bool)
        or not isinstance(measured, (int, float, np.floating))
        or not (math.isfinite(measured))
    ):
        raise AttncodaError(f"measured flip rate must be a finite number; got {measured!r}")
    if prediction.abstained or prediction.low is None or prediction.high is None:
        return "abstained"
    return "confirmed" if prediction.low <= measured <= prediction.high else "failed"
