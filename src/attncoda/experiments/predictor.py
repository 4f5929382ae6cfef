"""Predictor: a model-level forecast of the keep / drop flip rate from sink statistics,
frozen to a file before it meets new models (docs/design.md, "The experiments").

Features of a model (all from :class:`~attncoda.experiments.inputs.HeadRows`):

- ``mean_sink_mass`` — mean over heads of the head's mean sink mass ``s``;
- ``std_sink_mass`` — standard deviation (``ddof=0``) of the head sink masses across heads:
  verdicts flip when heads differ in sink mass, not when all share one;
- ``mean_sink_share`` — the share of all pairwise squared Aitchison distances that is the
  sink term, ``sum_{A<B} S(A, B) / sum_{A<B} T(A, B)`` (see
  :func:`attncoda.experiments.safety.mean_squared_split`).

The target is, by default, the model's flip rate averaged over the metrics measured (one
number per model: with a handful of training models a per-metric fit would have as many
parameters as points); a single metric can be chosen instead. The fit is ordinary least
squares on standardised features, minimum-norm when there are fewer models than parameters.

The prediction interval comes from **leave-one-out residuals**, never from a width set by
hand: each training model is left out in turn, the others are refitted, and ``e_i`` is the
left-out model's measured rate minus the refit's prediction. The half-width is the
``k``-th smallest ``|e_i|`` with ``k = ceil((n + 1) * coverage)`` (the jackknife interval;
for exchangeable models it covers a new model's rate about ``coverage`` of the time, and at
least ``2 * coverage - 1`` by the jackknife+ bound of Barber et al. 2021). The interval is
``point ± half_width``, clipped to ``[0, 1]``. A model whose features fall outside the
training range gets an abstention that names the feature, never an extrapolation.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from attncoda import __version__
from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Experiment, Inputs, Tables
from attncoda.experiments.flips import FlipsResult
from attncoda.experiments.inputs import HeadRows
from attncoda.experiments.safety import SquaredSplit, mean_squared_split
from attncoda.models.spec import NO_REVISION
from attncoda.store import atomic_write_json, read_json

__all__ = [
    "EXPERIMENT",
    "FEATURES",
    "Prediction",
    "Predictor",
    "Settings",
    "apply_predictor",
    "fit_predictor",
    "predictor_row",
    "shipped_predictor",
    "sink_features",
    "verdict",
]

FEATURES = ("mean_sink_mass", "std_sink_mass", "mean_sink_share")
FILE_KIND = "attncoda.flip_rate_predictor"
FILE_FORMAT = 2
VERDICTS = ("confirmed", "abstained", "failed")
#: Default share of new models the interval aims to cover (see the module docstring).
DEFAULT_COVERAGE = 0.8


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
    head_rows: HeadRows, flips_result: FlipsResult, squares: SquaredSplit | None = None
) -> dict[str, Any]:
    """A training (or test) row: ``{"model", "features", "flip_rates"}`` for one model."""
    if flips_result.model != head_rows.model:
        raise AttncodaError(
            f"flips_result is for model {flips_result.model!r}, not {head_rows.model!r}"
        )
    table = flips_result.table
    rates = zip(table["metric"], table["flip_rate"], strict=True)
    return {
        "model": head_rows.model,
        "features": sink_features(head_rows, squares),
        "flip_rates": {str(m): float(r) for m, r in rates},
    }


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


@dataclass(frozen=True)
class Predictor:
    """A frozen linear predictor of the keep vs drop flip rate.

    ``flip rate = intercept + sum_i coefficients[i] * features[i]``, with the interval
    ``± half_width``. Build it with :func:`fit_predictor`; store it with :meth:`to_json`
    before applying it to models it has not seen.

    Attributes
    ----------
    target : str
        ``"mean"`` (the flip rate averaged over ``metrics``) or one metric.
    metrics : tuple of str
        The metrics whose flip rates the training rows held.
    features : tuple of str
        Feature names, in the order of ``coefficients``.
    coefficients : tuple of float
        Per unit of each raw feature.
    intercept : float
    training_range : tuple of (float, float)
        ``(min, max)`` of each feature over the training models.
    residual_std : float or None
        ``sqrt(RSS / (n - rank - 1))`` of the full fit; ``None`` when it interpolates.
        Reported only: the interval does not use it.
    half_width : float
        Half the width of the prediction interval: the ``ceil((n + 1) * coverage)``-th
        smallest absolute leave-one-out residual.
    loo_residuals : tuple of float
        Leave-one-out residual (measured minus predicted flip rate) of each training model,
        in the order of ``training_models``.
    coverage : float
        The share of new models the interval aims to cover.
    training_models : tuple of str
    version : str
        ``attncoda.__version__`` at fit time.
    created : str
        ISO-8601 UTC time of the fit.
    """

    target: str
    metrics: tuple[str, ...]
    features: tuple[str, ...]
    coefficients: tuple[float, ...]
    intercept: float
    training_range: tuple[tuple[float, float], ...]
    residual_std: float | None
    half_width: float
    training_models: tuple[str, ...]
    version: str
    created: str
    loo_residuals: tuple[float, ...] = ()
    coverage: float = DEFAULT_COVERAGE

    def apply(self, features: Mapping[str, float]) -> Prediction:
        """Predict the flip rate of a model from its features, or abstain.

        Parameters
        ----------
        features : mapping
            At least every name in ``self.features`` (e.g. from :func:`sink_features`).

        Returns
        -------
        Prediction
            An interval in ``[0, 1]``, or an abstention naming each feature outside the
            training range (or not finite).
        """
        missing = [f for f in self.features if f not in features]
        if missing:
            raise AttncodaError(
                f"features lack {missing[0]!r}; this predictor uses {', '.join(self.features)}"
            )
        values = [float(features[f]) for f in self.features]
        reasons = []
        for name, value, (lo, hi) in zip(self.features, values, self.training_range, strict=True):
            if not math.isfinite(value):
                reasons.append(f"feature {name}={value} is not finite")
            elif not lo <= value <= hi:
                reasons.append(
                    f"feature {name}={value:.6g} is outside the training range [{lo:.6g}, {hi:.6g}]"
                )
        if reasons:
            return Prediction(abstained=True, reason="; ".join(reasons))
        point = self.intercept + sum(c * v for c, v in zip(self.coefficients, values, strict=True))
        return Prediction(
            abstained=False,
            point=point,
            low=max(0.0, point - self.half_width),
            high=min(1.0, point + self.half_width),
        )

    def to_json(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Write the predictor to a JSON file, atomically.

        A frozen predictor is not rewritten by accident: an existing file is an error
        unless ``overwrite=True``.
        """
        target = Path(path)
        if target.exists() and not overwrite:
            raise AttncodaError(
                f"{str(target)!r} already exists: a frozen predictor is not overwritten; "
                "choose a new path or pass overwrite=True"
            )
        return atomic_write_json(
            target,
            {
                "kind": FILE_KIND,
                "format": FILE_FORMAT,
                "target": self.target,
                "metrics": list(self.metrics),
                "features": list(self.features),
                "coefficients": list(self.coefficients),
                "intercept": self.intercept,
                "training_range": {
                    f: list(r) for f, r in zip(self.features, self.training_range, strict=True)
                },
                "residual_std": self.residual_std,
                "interval_half_width": self.half_width,
                "interval": "leave-one-out: the ceil((n+1)*coverage)-th smallest |residual|",
                "coverage": self.coverage,
                "loo_residuals": list(self.loo_residuals),
                "training_models": list(self.training_models),
                "attncoda_version": self.version,
                "created": self.created,
            },
        )

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Predictor:
        """Read a predictor written by :meth:`to_json`; it predicts exactly as before."""
        data = read_json(path)
        where = f"invalid predictor file {str(path)!r}"
        if not isinstance(data, dict):
            raise AttncodaError(f"{where}: expected a JSON object; got {type(data).__name__}")
        for key in (
            "kind",
            "format",
            "target",
            "metrics",
            "features",
            "coefficients",
            "intercept",
            "training_range",
            "residual_std",
            "interval_half_width",
            "coverage",
            "loo_residuals",
            "training_models",
            "attncoda_version",
            "created",
        ):
            if key not in data and not (
                key in ("coverage", "loo_residuals") and data.get("format") == 1
            ):
                raise AttncodaError(f"{where}: missing key {key!r}")
        if data["kind"] == FILE_KIND and data["format"] == 1:
            raise AttncodaError(
                f"{where}: format 1 (an interval floor set by hand) is no longer read; "
                "refit it with 'attncoda predictor fit' (leave-one-out interval)"
            )
        if data["kind"] != FILE_KIND or data["format"] != FILE_FORMAT:
            raise AttncodaError(
                f"{where}: key 'kind'/'format' must be {FILE_KIND!r}/{FILE_FORMAT}; "
                f"got {data['kind']!r}/{data['format']!r}"
            )
        features = _strings(data, "features", where)
        n = len(features)
        coefficients = _numbers(data, "coefficients", where, n)
        ranges = data["training_range"]
        if not isinstance(ranges, dict) or set(ranges) != set(features):
            raise AttncodaError(
                f"{where}: key 'training_range' must map each feature to [min, max]; got {ranges!r}"
            )
        training_range = tuple(
            _numbers(ranges, f, f"{where} (training_range)", 2) for f in features
        )
        if any(lo > hi for lo, hi in training_range):
            raise AttncodaError(f"{where}: key 'training_range' has min > max: {ranges!r}")
        residual = data["residual_std"]
        if residual is not None:
            residual = _number(data, "residual_std", where)
        half_width = _number(data, "interval_half_width", where)
        if half_width < 0:
            raise AttncodaError(
                f"{where}: key 'interval_half_width' must be at least 0; got {half_width!r}"
            )
        coverage = _number(data, "coverage", where)
        if not 0 < coverage < 1:
            raise AttncodaError(
                f"{where}: key 'coverage' must lie strictly between 0 and 1; got {coverage!r}"
            )
        training_models = _strings(data, "training_models", where)
        loo = _numbers(data, "loo_residuals", where, len(training_models))
        for key in ("target", "attncoda_version", "created"):
            if not isinstance(data[key], str):
                raise AttncodaError(f"{where}: key {key!r} must be a string; got {data[key]!r}")
        return cls(
            target=data["target"],
            metrics=_strings(data, "metrics", where),
            features=features,
            coefficients=coefficients,
            intercept=_number(data, "intercept", where),
            training_range=tuple((lo, hi) for lo, hi in training_range),
            residual_std=residual,
            half_width=half_width,
            training_models=training_models,
            version=data["attncoda_version"],
            created=data["created"],
            loo_residuals=loo,
            coverage=coverage,
        )


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AttncodaError(f"{where}: key {key!r} must be a finite number; got {value!r}")
    return float(value)


def _numbers(data: Mapping[str, Any], key: str, where: str, n: int) -> tuple[float, ...]:
    value = data[key]
    ok = (
        isinstance(value, list)
        and len(value) == n
        and all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
            for v in value
        )
    )
    if not ok:
        raise AttncodaError(
            f"{where}: key {key!r} must be a list of {n} finite numbers; got {value!r}"
        )
    return tuple(float(v) for v in value)


def _strings(data: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = data[key]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise AttncodaError(
            f"{where}: key {key!r} must be a non-empty list of strings; got {value!r}"
        )
    return tuple(value)


def fit_predictor(
    rows: Sequence[Mapping[str, Any]],
    *,
    features: Sequence[str] = FEATURES,
    target: str = "mean",
    coverage: float = DEFAULT_COVERAGE,
) -> Predictor:
    """Fit the flip-rate predictor on several models.

    Parameters
    ----------
    rows : sequence of mapping
        One per training model: ``{"model": str, "features": {name: float},
        "flip_rates": {metric: float}}`` (see :func:`predictor_row`). Every row must hold
        the same metrics.
    features : sequence of str
        Which features to regress on.
    target : str
        ``"mean"`` (the flip rate averaged over the metrics) or a metric name.
    coverage : float
        Share of new models the interval aims to cover, strictly between 0 and 1; the
        half-width is the ``ceil((n + 1) * coverage)``-th smallest absolute leave-one-out
        residual, so ``n`` must be at least ``coverage / (1 - coverage)`` (4 models for 0.8).

    Returns
    -------
    Predictor

    Raises
    ------
    AttncodaError
        Fewer than 3 training models, too few for ``coverage``, or malformed rows.
    """
    features = tuple(features)
    if not features or len(set(features)) != len(features):
        raise AttncodaError(f"features must be distinct names, at least one; got {features!r}")
    if isinstance(rows, (str, Mapping)) or not isinstance(rows, Sequence) or len(rows) < 3:
        n = len(rows) if isinstance(rows, Sequence) and not isinstance(rows, str) else rows
        raise AttncodaError(
            f"a predictor needs at least 3 training models (each is left out in turn to size "
            f"the interval); got {n!r}"
        )
    ok = isinstance(coverage, (int, float)) and not isinstance(coverage, bool)
    if not (ok and 0 < coverage < 1):
        raise AttncodaError(f"coverage must lie strictly between 0 and 1; got {coverage!r}")
    k = math.ceil((len(rows) + 1) * coverage)
    if k > len(rows):
        least = next(n for n in range(3, 10**6) if math.ceil((n + 1) * coverage) <= n)
        raise AttncodaError(
            f"coverage={coverage} needs at least {least} training models; got {len(rows)}: "
            "add models or lower coverage"
        )
    models, x, y, metrics = _training_table(rows, features, target)
    coef, intercept, rank = _least_squares(x, y)
    residuals = y - (intercept + x @ coef)
    dof = len(y) - rank - 1
    residual_std = float(np.sqrt(residuals @ residuals / dof)) if dof > 0 else None
    loo = []
    for i in range(len(y)):
        others = np.arange(len(y)) != i
        c, b, _ = _least_squares(x[others], y[others])
        loo.append(float(y[i] - (b + x[i] @ c)))
    half_width = float(np.sort(np.abs(loo))[k - 1])
    return Predictor(
        target=target,
        metrics=metrics,
        features=features,
        coefficients=tuple(float(c) for c in coef),
        intercept=intercept,
        training_range=tuple(
            (float(lo), float(hi)) for lo, hi in zip(x.min(0), x.max(0), strict=True)
        ),
        residual_std=residual_std,
        half_width=float(half_width),
        training_models=models,
        version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        loo_residuals=tuple(loo),
        coverage=float(coverage),
    )


def _least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, int]:
    """OLS on standardised features (minimum-norm): per-raw-unit coefficients, intercept, rank."""
    mu, sd = x.mean(axis=0), x.std(axis=0)
    scale = np.where(sd > 0, sd, 1.0)
    z = np.where(sd > 0, (x - mu) / scale, 0.0)  # a constant feature gets coefficient 0
    beta, _, rank, _ = np.linalg.lstsq(z, y - y.mean(), rcond=None)
    coef = beta / scale
    return coef, float(y.mean() - coef @ mu), int(rank)


def _training_table(
    rows: Sequence[Mapping[str, Any]], features: tuple[str, ...], target: str
) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, tuple[str, ...]]:
    models, x, y = [], [], []
    metrics: tuple[str, ...] | None = None
    for i, row in enumerate(rows):
        for key in ("model", "features", "flip_rates"):
            if not isinstance(row, Mapping) or key not in row:
                raise AttncodaError(f"training row {i} lacks the key {key!r}")
        model, feats, rates = row["model"], row["features"], row["flip_rates"]
        if not isinstance(model, str):
            raise AttncodaError(f"training row {i}: 'model' must be a string; got {model!r}")
        for key, value in (("features", feats), ("flip_rates", rates)):
            if not isinstance(value, Mapping) or not value:
                raise AttncodaError(
                    f"training row {i} ({model!r}): {key!r} must be a non-empty mapping; "
                    f"got {value!r}"
                )
        if model in models:
            raise AttncodaError(f"model {model!r} appears twice among the training rows")
        if metrics is None:
            metrics = tuple(rates)
            if target != "mean" and target not in metrics:
                raise AttncodaError(
                    f"target must be 'mean' or one of the metrics {', '.join(metrics)}; "
                    f"got {target!r}"
                )
        elif set(rates) != set(metrics):
            raise AttncodaError(
                f"model {model!r} has flip rates for {sorted(rates)}, the first model for "
                f"{sorted(metrics)}: every training row needs the same metrics"
            )
        for f in features:
            if f not in feats:
                raise AttncodaError(f"model {model!r} lacks the feature {f!r}")
            if not math.isfinite(float(feats[f])):
                raise AttncodaError(f"model {model!r} has feature {f}={feats[f]!r}: not finite")
        values = [float(rates[m]) for m in metrics]
        bad = [m for m, v in zip(metrics, values, strict=True) if not math.isfinite(v)]
        if bad:
            raise AttncodaError(
                f"model {model!r} has flip rate {rates[bad[0]]!r} for {bad[0]!r}: not finite"
            )
        models.append(model)
        x.append([float(feats[f]) for f in features])
        y.append(np.mean(values) if target == "mean" else float(rates[target]))
    return tuple(models), np.asarray(x), np.asarray(y, dtype=np.float64), metrics or ()


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


def shipped_predictor() -> Path:
    """The frozen predictor shipped with attncoda (see ``experiments/data/PROVENANCE.md``)."""
    from importlib.resources import files

    return Path(str(files("attncoda.experiments") / "data" / "flip_predictor.json"))


def apply_predictor(
    predictor: Predictor | str | os.PathLike[str], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Apply a frozen predictor to measured models: prediction, measurement and verdict.

    Parameters
    ----------
    predictor : Predictor, path-like or ``"shipped"``
        A predictor, a predictor file, or ``"shipped"`` for the one shipped with attncoda.
    rows : sequence of mapping
        One per model, from :func:`predictor_row`.

    Returns
    -------
    list of dict
        Per row: ``model``, ``features``, ``prediction`` (a :class:`Prediction`),
        ``measured`` (the flip rate of the predictor's target: the mean over the row's
        metrics, or one metric) and ``verdict`` (:func:`verdict`).
    """
    if not isinstance(predictor, Predictor):
        predictor = Predictor.from_json(
            shipped_predictor() if str(predictor) == "shipped" else predictor
        )
    outcomes = []
    for row in rows:
        prediction = predictor.apply(row["features"])
        rates = row["flip_rates"]
        measured = (
            float(np.mean(list(rates.values())))
            if predictor.target == "mean"
            else float(rates[predictor.target])
        )
        outcomes.append(
            {
                "model": row["model"],
                "features": row["features"],
                "prediction": prediction,
                "measured": measured,
                "verdict": verdict(prediction, measured),
            }
        )
    return outcomes


@dataclass(frozen=True)
class Settings:
    """Settings of the predictor experiment."""

    predictor: str = field(
        default="shipped",
        metadata={"help": "frozen predictor file to apply ('shipped': the one shipped)"},
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The frozen predictor applied to the unit's model: one row of sink features, the
    prediction (or abstention), the measured flip rate of its flips unit and the verdict.

    ``in_training_set`` says whether the predictor was fitted on this model: a training
    model named ``model`` or ``"model revision"`` (a checkpoint of a series).
    """
    import pandas as pd

    path = shipped_predictor() if settings.predictor == "shipped" else settings.predictor
    predictor = Predictor.from_json(path)
    rows = inputs.need("rows")
    flips_result = FlipsResult.from_tables(inputs.model, inputs.tables_of("flips"))
    (outcome,) = apply_predictor(predictor, [predictor_row(rows, flips_result)])
    model, revision = inputs.model, inputs.revision
    label = model if revision == NO_REVISION else f"{model} {revision}"
    p = outcome["prediction"]
    record = {
        **{f"feature_{k}": float(v) for k, v in outcome["features"].items()},
        "abstained": bool(p.abstained),
        "reason": p.reason,
        "predicted": p.point,
        "predicted_low": p.low,
        "predicted_high": p.high,
        "measured": outcome["measured"],
        "verdict": outcome["verdict"],
        "in_training_set": any(label == t or model == t for t in predictor.training_models),
    }
    frame = pd.DataFrame([record])
    for column in ("predicted", "predicted_low", "predicted_high"):
        frame[column] = frame[column].astype("float64")
    return Tables(frames={"predictor": frame})


EXPERIMENT = Experiment(
    name="predictor",
    needs=("rows",),
    after=("flips",),
    settings=Settings,
    run=run,
    tables=("predictor",),
)
