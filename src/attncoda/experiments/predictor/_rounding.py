r"""How far float32 rounding can move the predictor's features, so that the support check and
every threshold of a verdict hold within it, and each verdict decided within it says so
(docs/design.md, "Verdicts and ratios within rounding").

Each feature is computed, in float64, from statistics that a float32 computation produced.
A quantity ``f`` of inputs ``x_i``, each within ``e_i`` of its value, moves to first order by
at most ``sum_i |df/dx_i| e_i``:

- a head's mean sink mass ``m_h`` is a mean of float32 row statistics over rows of at most
  ``n`` keys (:func:`~attncoda.experiments.contract.row_statistic_rounding`, the rule
  ``attncoda compare`` holds the profile's head means to): within
  ``d_h = u (n + 2) (m_h + log n)``, ``u = 2**-24``;
- ``mean_sink_mass = mean_h m_h``: ``mean_h d_h = u (n + 2) (m + log n)``;
- ``std_sink_mass = sigma = sqrt(mean_h (m_h - m)^2)``: ``df/dm_h = (m_h - m) / (H sigma)``
  (the mean's terms cancel), so the move is at most ``sum_h |m_h - m| d_h / (H sigma) <=
  sqrt(mean_h d_h^2)`` (Cauchy-Schwarz) ``= u (n + 2) sqrt((m + log n)^2 + sigma^2)``;
- ``mean_sink_share = S / T``, ``S`` and ``T`` the sums over pairs of heads of the mean
  squared sink term and squared Aitchison distance (:func:`~attncoda.experiments.safety.
  mean_squared_split`): :func:`share_rounding`, from the rows' log-probabilities.

A training feature at the edge of the training range carries its own such bound (the
predictor file states it, :class:`TrainingRounding`). A value lies inside ``[lo, hi]`` when it
is within ``error(value) + error(edge)`` of it (:func:`outside_range`), and that decision is
on its *edge* when the value lies within ``2 error(value) + error(edge)`` of the widened end,
on either side (:func:`range_edges`): two devices, each within ``error(value)`` of the exact
value, may then decide it either way. The bound covers the rounding of the inputs, not a
different forward: a bfloat16 forward moves the statistics by more (docs/design.md,
"Capture").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import FLOAT32_UNIT_ROUNDOFF

if TYPE_CHECKING:
    from attncoda.experiments.contract import HeadRows
    from attncoda.experiments.safety import SquaredSplit

__all__ = [
    "TrainingRounding",
    "edge_error",
    "feature_errors",
    "feature_rounding",
    "outside_range",
    "range_edges",
    "row_rounding",
    "rows_keys",
    "share_rounding",
    "within_edge",
]


@dataclass(frozen=True)
class TrainingRounding:
    """The float32 rounding the training models' own values carry, as the predictor file
    states it: the ends of the training ranges and of the baseline's interval are such
    values, measured on one machine.

    Attributes
    ----------
    targets : tuple of float, shape (n,)
        The rounding of each training model's target (its flip rate: the mean over the
        metrics of each rate's ``rate_rounding``, or the one metric's), in the order of the
        training models; flip-rate units. 0 for a row that states none (a hand-made row).
    ends : tuple of (float, float), shape (p,)
        Per feature, the rounding of the training value at the low and the high end of its
        range (the largest, where several models share the end); the feature's units.
    largest : tuple of float, shape (p,)
        Per feature, the largest rounding a training value carries (the joint support's
        share, :meth:`~attncoda.experiments.predictor._support.Support.rounding`).
    """

    targets: tuple[float, ...]
    ends: tuple[tuple[float, float], ...]
    largest: tuple[float, ...]

    @classmethod
    def by_value(
        cls, names: Sequence[str], ranges: Sequence[tuple[float, float]], n_models: int
    ) -> TrainingRounding:
        """The floor of a predictor whose training values state no rounding: each end by its
        value alone (:func:`edge_error`), the largest the larger end's, targets exact."""
        ends = tuple(
            (edge_error(n, lo), edge_error(n, hi))
            for n, (lo, hi) in zip(names, ranges, strict=True)
        )
        return cls((0.0,) * n_models, ends, tuple(max(pair) for pair in ends))


def feature_errors(features: Mapping[str, float], n_keys: float | None = None) -> dict[str, float]:
    """The float32 rounding bound of each of a model's features, known by their values
    (their units).

    Parameters
    ----------
    features : mapping
        ``mean_sink_mass``, ``std_sink_mass``, ``mean_sink_share`` (other names are bounded
        like ``mean_sink_mass``, by their own magnitude).
    n_keys : float, optional
        The most keys a row of the model sees (its windows' length). With it, the head means
        are row statistics over ``n`` keys (module docstring): ``mean_sink_mass`` within
        ``u (n + 2) (m + log n)``, ``std_sink_mass`` within ``u (n + 2) sqrt((m + log n)^2 +
        sigma^2)``, ``mean_sink_share`` within ``2 u (n + 2)`` of itself (``S`` and ``T``
        each within ``u (n + 2)`` of themselves: a bound by value alone, for a row whose rows
        are not at hand; :func:`feature_rounding` bounds it from the rows). Without it, one
        rounding of each head's statistic: ``u m``, ``u sqrt(m^2 + sigma^2)`` and ``2 u``
        of the share (the floor of a row that states no rounding, such as a hand-made one).

    Returns
    -------
    dict
        Per feature, a non-negative bound (``inf`` where a feature is not finite).
    """
    u = FLOAT32_UNIT_ROUNDOFF
    if n_keys is None:
        length, log_n = 1.0, 0.0
    else:
        n = max(float(n_keys), 1.0)
        length, log_n = n + 2.0, math.log(n)
    mean = abs(float(features.get("mean_sink_mass", math.nan)))
    errors = {}
    for name, raw in features.items():
        value = abs(float(raw))
        if name == "std_sink_mass":
            if math.isfinite(mean):
                spread = math.hypot(mean + log_n, value)
            else:  # a training model whose mean is not stated: sink masses are at most 1
                spread = 1.0 + log_n
            errors[name] = u * length * spread if math.isfinite(value) else math.inf
        elif name == "mean_sink_share":
            errors[name] = 2 * u * length * value
        else:
            errors[name] = u * length * (value + log_n)
    return {k: (v if math.isfinite(v) else math.inf) for k, v in errors.items()}


def rows_keys(head_rows: HeadRows) -> int:
    """The most keys a recorded row of ``head_rows`` can see: the longest document's padded
    length (the windows' length)."""
    return max(int(np.asarray(doc.key_mask).shape[-1]) for doc in head_rows.docs)


def share_rounding(head_rows: HeadRows, squares: SquaredSplit) -> float:
    r"""How far float32 rounding of the rows' log-probabilities can move ``mean_sink_share
    = S / T`` (:class:`~attncoda.experiments.safety.SquaredSplit`), to first order.

    A float32 log-probability ``z_k = (s_k - max) - (lse - max)`` of a row of ``n`` keys
    carries, besides an error common to the row's keys (the normaliser's, which both the
    centred log-ratios and the sink balance cancel), at most ``u (|s_k - max| + |z_k|) <=
    u (2 |z_k| + log n)`` (the two subtractions' roundings). Through the sink balance
    ``b = sqrt(k m / (k + m)) (mean_S z - mean_C z)`` a row's ``b`` moves by at most
    ``beta = u sqrt(k m / (k + m)) (mean_S w + mean_C w)``, ``w_k = 2 |z_k| + log n``; its
    centred log-ratios, a projection of ``z``, by at most ``gamma = u ||w||`` (Euclidean
    norm). A squared difference ``(b_A - b_B)^2`` then moves by at most
    ``2 |b_A - b_B| (beta_A + beta_B)``, and summed over rows and pairs, by Cauchy-Schwarz,
    ``S`` (a mean over ``R`` rows) by at most ``dS = 2 sqrt(S) sqrt(B / R)`` with
    ``B = sum_rows sum_{A<B} (beta_A + beta_B)^2 = sum_rows [(H - 2) sum_A beta_A^2 +
    (sum_A beta_A)^2]``; ``T`` alike with ``gamma``. The share moves by at most
    ``(dS + share dT) / T``.

    Parameters
    ----------
    head_rows : HeadRows
        The rows the share was computed from.
    squares : SquaredSplit
        :func:`~attncoda.experiments.safety.mean_squared_split` of ``head_rows``.

    Returns
    -------
    float
        A non-negative bound (the share's units); 0 where ``T`` is 0 (the share is then 0).
    """
    u = FLOAT32_UNIT_ROUNDOFF
    n_heads = head_rows.n_layers * head_rows.n_heads
    moves = {"beta": 0.0, "gamma": 0.0}
    for doc in head_rows.docs:
        mask, is_sink, used = doc.split_rows()
        k = len(doc.sink)
        if not used.any():
            continue
        mask = mask[used]
        n_keys = mask.sum(axis=1)
        content = mask & ~is_sink
        m = content.sum(axis=1)
        z = np.abs(np.asarray(doc.logp, dtype=np.float64)[:, used, :])
        w = np.where(mask[None], 2 * z + np.log(n_keys)[None, :, None], 0.0)
        beta = np.sqrt(k * m / (k + m)) * (
            (w * is_sink).sum(axis=2) / k + (w * content).sum(axis=2) / m
        )  # (head, row)
        gamma = np.sqrt((w * w).sum(axis=2))
        for name, v in (("beta", u * beta), ("gamma", u * gamma)):
            moves[name] += float(((n_heads - 2) * (v * v).sum(0) + v.sum(0) ** 2).sum())
    total, sink = float(squares.total.sum()) / 2, float(squares.sink.sum()) / 2
    if not total > 0:
        return 0.0
    rows = max(squares.n_rows, 1)
    d_sink = 2 * math.sqrt(max(sink, 0.0)) * math.sqrt(moves["beta"] / rows)
    d_total = 2 * math.sqrt(total) * math.sqrt(moves["gamma"] / rows)
    return (d_sink + (sink / total) * d_total) / total


def feature_rounding(head_rows: HeadRows, squares: SquaredSplit) -> dict[str, float]:
    """The float32 rounding bound of each of :func:`~attncoda.experiments.predictor.
    sink_features`, from the rows they were computed from (module docstring): the head
    means as row statistics over the rows' keys, the share by :func:`share_rounding`.

    Returns
    -------
    dict
        ``mean_sink_mass``, ``std_sink_mass``, ``mean_sink_share``: non-negative floats.
    """
    u = FLOAT32_UNIT_ROUNDOFF
    n = max(float(rows_keys(head_rows)), 1.0)
    mass = np.asarray(head_rows.sink_mass, dtype=np.float64)
    heads = u * (n + 2) * (np.abs(mass) + math.log(n))  # each head mean's bound d_h
    return {
        "mean_sink_mass": float(heads.mean()),
        "std_sink_mass": float(np.sqrt(np.mean(heads * heads))),
        "mean_sink_share": share_rounding(head_rows, squares),
    }


def row_rounding(
    row: Mapping[str, object], features: Sequence[str], target: str
) -> tuple[dict[str, float] | None, float]:
    """What a predictor row states of its rounding (:func:`~attncoda.experiments.predictor.
    predictor_row`'s ``rounding``: ``{"features": {name: bound}, "flip_rates": {metric:
    rate_rounding}}``).

    Parameters
    ----------
    row : mapping
        A predictor row; one without ``rounding`` (a hand-made row) states none.
    features : sequence of str
        The features whose bounds are read.
    target : str
        ``"mean"`` (the target is the mean of the row's flip rates, so its rounding is the
        mean of their roundings: each moves by at most its own) or one metric.

    Returns
    -------
    (dict or None, float)
        Each feature's bound (``None`` when the row states none), and the target's (0 when
        the row states none: its rates are taken as exact).

    Raises
    ------
    AttncodaError
        A ``rounding`` that lacks a feature or a metric of the row, or holds a bound that is
        not a non-negative number.
    """
    stated = row.get("rounding")
    if stated is None:
        return None, 0.0
    model = row.get("model")
    if not isinstance(stated, Mapping):
        raise AttncodaError(
            f"row {model!r}: 'rounding' must be an object with 'features' and 'flip_rates'; "
            f"got {stated!r}"
        )
    rates = row.get("flip_rates")
    metrics = list(rates) if isinstance(rates, Mapping) else []
    found: dict[str, dict[str, float]] = {}
    for key, names in (("features", list(features)), ("flip_rates", metrics)):
        given = stated.get(key)
        values = {n: given.get(n) if isinstance(given, Mapping) else None for n in names}
        bad = [
            n
            for n, v in values.items()
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0
        ]
        if bad:
            raise AttncodaError(
                f"row {model!r}: 'rounding' must give {key} {bad[0]!r} a non-negative bound; "
                f"got {values[bad[0]]!r}"
            )
        found[key] = {n: float(v) for n, v in values.items()}  # type: ignore[arg-type]
    rate = found["flip_rates"]
    if target == "mean":
        target_rounding = float(np.mean(list(rate.values()))) if rate else 0.0
    else:
        target_rounding = rate.get(target, 0.0)
    return found["features"], target_rounding


def edge_error(name: str, edge: float) -> float:
    """The float32 rounding bound of a training model's feature ``name`` equal to ``edge``,
    known by its value alone (one rounding; ``std_sink_mass``: ``u``, the bound over any
    sink masses): the floor of a predictor that states no rounding of its training values."""
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
    ends: Sequence[tuple[float, float]] | None = None,
) -> list[str]:
    """Why each feature lies outside its training range beyond both ends' rounding, as the
    predictor's abstention states it; ``[]`` when every one is inside.

    A value ``v`` of a feature with rounding bound ``e`` is inside ``[lo, hi]`` when
    ``lo - (e + e_lo) <= v <= hi + (e + e_hi)``, ``e_lo`` and ``e_hi`` the ends' own bounds
    (``ends``, per feature; by default :func:`edge_error` of each end).
    """
    reasons = []
    for name, value, (lo, hi), (e_lo, e_hi) in zip(
        names, values, ranges, _ends(names, ranges, ends), strict=True
    ):
        error = errors[name]
        low, high = lo - (error + e_lo), hi + (error + e_hi)
        if not low <= value <= high:
            reasons.append(
                f"feature {name}={value:.6g} is outside the training range [{lo:.6g}, {hi:.6g}]"
            )
    return reasons


def range_edges(
    names: Sequence[str],
    values: Sequence[float],
    ranges: Sequence[tuple[float, float]],
    errors: Mapping[str, float],
    ends: Sequence[tuple[float, float]] | None = None,
) -> list[str]:
    """The features whose range test (:func:`outside_range`) is decided within rounding:
    the value lies within twice its own bound plus the end's (``2 e + e_end``) of a widened
    end, ``lo - (e + e_lo)`` or ``hi + (e + e_hi)``, on either side. Two devices, each within
    ``e`` of the exact value (the end measured once, within ``e_end``), may then decide it
    either way."""
    found = []
    for name, value, (lo, hi), (e_lo, e_hi) in zip(
        names, values, ranges, _ends(names, ranges, ends), strict=True
    ):
        error = errors[name]
        low, high = lo - (error + e_lo), hi + (error + e_hi)
        if within_edge(value, low, 2 * error + e_lo) or within_edge(value, high, 2 * error + e_hi):
            found.append(name)
    return found


def within_edge(value: float, threshold: float, rounding: float) -> bool:
    """Whether ``|value - threshold| <= rounding``: a comparison of ``value`` with
    ``threshold`` that rounding may decide either way."""
    return abs(value - threshold) <= rounding


def _ends(
    names: Sequence[str],
    ranges: Sequence[tuple[float, float]],
    ends: Sequence[tuple[float, float]] | None,
) -> list[tuple[float, float]]:
    if ends is not None:
        return [(float(a), float(b)) for a, b in ends]
    return [
        (edge_error(n, lo), edge_error(n, hi)) for n, (lo, hi) in zip(names, ranges, strict=True)
    ]
