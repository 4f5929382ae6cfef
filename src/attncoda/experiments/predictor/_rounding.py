r"""How far float32 rounding can move the predictor's features, so that the support check and
every threshold of a verdict hold within it (docs/design.md, "Verdicts and ratios within
rounding").

Each feature is computed, in float64, from statistics that a float32 computation produced:
a head's mean sink mass ``m_h`` (a mean of non-negative float32 row sink masses), and the
summed squares ``S`` and ``T`` of the Aitchison split. Each such input stands for any value
within one rounding of it, ``x (1 + delta)``, ``|delta| <= u = 2**-24``. To first order a
feature ``f`` then moves by at most ``u sum_i |x_i df/dx_i|`` (the unit roundoff times the
magnitudes summed):

- ``mean_sink_mass = mean_h m_h``: ``u * mean_sink_mass``;
- ``std_sink_mass = sigma = sqrt(mean_h (m_h - m)^2)``: ``df/dm_h = (m_h - m) / (H sigma)``
  (the mean's terms cancel), so the sum is ``u mean_h m_h |m_h - m| / sigma``, at most
  ``u sqrt(mean_h m_h^2) = u sqrt(m^2 + sigma^2)`` by Cauchy-Schwarz, and at most ``u`` for a
  training model whose mean is not stored (sink masses are at most 1);
- ``mean_sink_share = S / T`` (``S``, ``T`` non-negative): ``2 u * mean_sink_share``.

A training feature at the edge of the training range carries its own such error. So a
value lies inside ``[lo, hi]`` when it is within ``error(value) + error(edge)`` of it: the
same model computed on another device, which moves every input by a rounding, is then
never outside the range a copy of it sets. The bound covers the rounding of the inputs, not
a different forward: a bfloat16 forward moves the statistics by more (docs/design.md,
"Capture").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

__all__ = ["edge_error", "feature_errors", "outside_range"]


def feature_errors(features: Mapping[str, float]) -> dict[str, float]:
    """The float32 rounding bound of each of a model's features (their units).

    Parameters
    ----------
    features : mapping
        ``mean_sink_mass``, ``std_sink_mass``, ``mean_sink_share`` (other names are bounded
        by one rounding of their own magnitude, ``u |x|``).

    Returns
    -------
    dict
        Per feature, a non-negative bound (``inf`` where a feature is not finite).
    """
    u = FLOAT32_UNIT_ROUNDOFF
    mean = abs(float(features.get("mean_sink_mass", math.nan)))
    errors = {}
    for name, raw in features.items():
        value = abs(float(raw))
        if name == "std_sink_mass":
            spread = math.hypot(mean, value) if math.isfinite(mean) else 1.0
            errors[name] = u * min(1.0, spread) if math.isfinite(value) else math.inf
        elif name == "mean_sink_share":
            errors[name] = 2 * u * value
        else:
            errors[name] = u * value
    return {k: (v if math.isfinite(v) else math.inf) for k, v in errors.items()}


def edge_error(name: str, edge: float) -> float:
    """The float32 rounding bound of a training model's feature ``name`` equal to ``edge``,
    known by its value alone (``std_sink_mass``: ``u``, the bound over any sink masses)."""
    u = FLOAT32_UNIT_ROUNDOFF
    if name == "std_sink_mass":
        return u
    if name == "mean_sink_share":
        return 2 * u * abs(edge)
    return u * abs(edge)


def outside_range(
    names: Sequence[str],
    values: Sequence[float],
    ranges: Sequence[tuple[float, float]],
    errors: Mapping[str, float],
) -> list[str]:
    """Why each feature lies outside its training range beyond both ends' rounding, as the
    predictor's abstention states it; ``[]`` when every one is inside.

    A value ``v`` of a feature with rounding bound ``e`` is inside ``[lo, hi]`` when
    ``lo - (e + e_lo) <= v <= hi + (e + e_hi)``, ``e_lo`` and ``e_hi`` the ends' own bounds
    (:func:`edge_error`).
    """
    reasons = []
    for name, value, (lo, hi) in zip(names, values, ranges, strict=True):
        error = errors[name]
        low, high = lo - (error + edge_error(name, lo)), hi + (error + edge_error(name, hi))
        if not low <= value <= high:
            reasons.append(
                f"feature {name}={value:.6g} is outside the training range [{lo:.6g}, {hi:.6g}]"
            )
    return reasons
