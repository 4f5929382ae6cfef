"""Fitting the flip-rate predictor: least squares on standardised sink features, its CV+
interval over runs, its constant baseline and its joint support (docs/design.md, "The
experiments", predictor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda._version import __version__
from attncoda.experiments.contract import setting
from attncoda.experiments.predictor._cvplus import cv_plus_ranks, fit_cv_plus
from attncoda.experiments.predictor._identity import TrainingIdentity, training_runs
from attncoda.experiments.predictor._model import DEFAULT_ALPHA, FEATURES, Baseline, Predictor
from attncoda.experiments.predictor._protocol import Protocol
from attncoda.experiments.predictor._rounding import TrainingRounding, feature_errors, row_rounding
from attncoda.experiments.predictor._support import fit_support
from attncoda.training.identity import recipe_key

__all__ = ["FitSettings", "fit_predictor"]


@dataclass(frozen=True)
class FitSettings:
    """Settings of ``attncoda predictor fit`` (a tool beside the experiment's ``apply``)."""

    alpha: float = setting(
        DEFAULT_ALPHA,
        "miscoverage of the CV+ interval over runs (the jackknife+ guarantee is 1 - 2 alpha); "
        "needs at least 1/alpha - 1 models",
        above=0.0,
        at_most=0.5,
    )
    overwrite: bool = setting(False, "replace the predictor file if it exists")


def fit_predictor(
    rows: Sequence[Mapping[str, Any]],
    *,
    features: Sequence[str] = FEATURES,
    target: str = "mean",
    alpha: float = DEFAULT_ALPHA,
) -> Predictor:
    """Fit the flip-rate predictor and its constant baseline on several models.

    Parameters
    ----------
    rows : sequence of mapping
        One per training model: ``{"model": str, "features": {name: float},
        "flip_rates": {metric: float}}`` (see :func:`predictor_row`), and optionally
        ``"identity"`` (``{"weights_sha256", "weights_sketch", "recipe"}``,
        :func:`attncoda.training.identity.model_identity`), which the predictor records to
        recognise its training models by content, and ``"protocol"`` (what its rows read:
        :func:`~attncoda.experiments.predictor._protocol.protocol_of`), and ``"rounding"``
        (what :func:`predictor_row` states of its features' and flip rates' float32
        rounding), which the predictor records of its training values
        (:class:`~attncoda.experiments.predictor._rounding.TrainingRounding`: a row that
        states none, a hand-made one, gets one rounding of each feature by its value and
        exact rates). Every row must hold the same metrics. The run of each model
        (:func:`~attncoda.experiments.predictor._identity.training_runs`: its name
        ``series@stepN``, or its ``train-tiny`` recipe) is the unit the interval leaves out.
    features : sequence of str
        Which features to regress on.
    target : str
        ``"mean"`` (the flip rate averaged over the metrics) or a metric name.
    alpha : float
        Miscoverage level of the CV+ interval, strictly between 0 and 0.5; the
        jackknife+ guarantee is ``1 - 2 alpha`` (:mod:`~attncoda.experiments.predictor.
        _cvplus` states CV+'s). The ends are the ``floor(alpha (n + 1))``-th and
        ``ceil((1 - alpha)(n + 1))``-th of ``n`` values, so ``n`` must be at least
        ``1 / alpha - 1`` (9 models for 0.1).

    Returns
    -------
    Predictor
        Its ``protocol`` is the rows' (``None`` when no row records one: such a predictor
        gives no verdict and cannot be frozen).

    Raises
    ------
    AttncodaError
        Fewer than 3 training runs, too few models for ``alpha``, features that are
        constant or collinear over the training models, malformed rows, or rows read with
        different protocols.
    """
    features = _checked(rows, features, alpha)
    models, x, y, metrics = _training_table(rows, features, target)
    runs = _runs(rows, models)
    protocol = _protocol(rows, metrics)
    support = fit_support(x, features)
    interval = fit_cv_plus(x, y, runs, alpha=alpha, fit=_fit_linear)
    coef, intercept, residual_std = _linear(x, y)
    constant = fit_cv_plus(x[:, :0], y, runs, alpha=alpha, fit=_fit_mean)
    return Predictor(
        target=target,
        metrics=metrics,
        features=features,
        coefficients=tuple(float(c) for c in coef),
        intercept=intercept,
        training_range=tuple(
            (float(lo), float(hi)) for lo, hi in zip(x.min(0), x.max(0), strict=True)
        ),
        support=support,
        residual_std=residual_std,
        interval=interval,
        baseline=Baseline(float(y.mean()), constant),
        training_models=models,
        version=__version__,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        identities=tuple(
            TrainingIdentity(
                str(row["model"]),
                _identity(row).get("weights_sha256"),
                recipe_key(_identity(row).get("recipe")),
                _sketch(_identity(row).get("weights_sketch")),
            )
            for row in rows
            if isinstance(row.get("identity"), Mapping)
        ),
        protocol=protocol,
        rounding=training_rounding(rows, features, target, x),
    )


def _checked(rows: Any, features: Sequence[str], alpha: Any) -> tuple[str, ...]:
    """The features, checked with the number of rows and ``alpha`` (enough rows for it)."""
    features = tuple(features)
    if not features or len(set(features)) != len(features):
        raise AttncodaError(f"features must be distinct names, at least one; got {features!r}")
    if isinstance(rows, (str, Mapping)) or not isinstance(rows, Sequence) or len(rows) < 3:
        n = len(rows) if isinstance(rows, Sequence) and not isinstance(rows, str) else rows
        raise AttncodaError(
            f"a predictor needs at least 3 training models (each run is left out in turn to "
            f"size the interval); got {n!r}"
        )
    ok = isinstance(alpha, (int, float)) and not isinstance(alpha, bool)
    if not (ok and 0 < alpha < 0.5):
        raise AttncodaError(f"alpha must lie strictly between 0 and 0.5; got {alpha!r}")
    cv_plus_ranks(len(rows), alpha)
    return features


def _runs(rows: Sequence[Mapping[str, Any]], models: tuple[str, ...]) -> tuple[str, ...]:
    """The run of each training model (the unit the interval leaves out), at least 3."""
    runs = training_runs(models, [_identity(row).get("recipe") for row in rows])
    if len(set(runs)) < 3:
        raise AttncodaError(
            f"a predictor needs at least 3 training runs (each is left out in turn to size "
            f"the interval); got {len(set(runs))}: {', '.join(dict.fromkeys(runs))}"
        )
    return runs


def _protocol(rows: Sequence[Mapping[str, Any]], metrics: tuple[str, ...]) -> Protocol | None:
    """The rows' protocol (:meth:`Protocol.of_rows`), its metrics those of the flip rates."""
    protocol = Protocol.of_rows(rows)
    if protocol is not None and sorted(protocol.metrics) != sorted(metrics):
        raise AttncodaError(
            f"the rows' protocol names the metrics {list(protocol.metrics)}, their flip rates "
            f"{list(metrics)}: give rows whose flip rates are the protocol's"
        )
    return protocol


def _linear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, float | None]:
    """The least-squares fit on every training model: per-raw-unit coefficients, intercept,
    and the residuals' standard deviation (``None`` without a degree of freedom left)."""
    coef, intercept, rank = _least_squares(x, y)
    residuals = y - (intercept + x @ coef)
    dof = len(y) - rank - 1
    return coef, intercept, float(np.sqrt(residuals @ residuals / dof)) if dof > 0 else None


def training_rounding(
    rows: Sequence[Mapping[str, Any]], features: tuple[str, ...], target: str, x: np.ndarray
) -> TrainingRounding:
    """The rounding of the training values (:class:`~attncoda.experiments.predictor.
    _rounding.TrainingRounding`) that ``rows`` state (:func:`~attncoda.experiments.
    predictor._rounding.row_rounding`): at each end of each feature's range, the largest
    bound of the models at that end; each feature's largest; each target's.

    Parameters
    ----------
    rows : sequence of mapping
        The training rows, in the order of ``x``.
    features : tuple of str
    target : str
    x : ndarray, shape (n, p)
        Their features, as fitted.
    """
    errors, targets = [], []
    for row, values in zip(rows, x, strict=True):
        stated, rate = row_rounding(row, features, target)
        if stated is None:
            stated = feature_errors(dict(zip(features, values.tolist(), strict=True)))
        errors.append([stated[f] for f in features])
        targets.append(rate)
    e = np.asarray(errors, dtype=np.float64).reshape(x.shape)
    ends = tuple(
        (
            float(e[x[:, j] == x[:, j].min(), j].max()),
            float(e[x[:, j] == x[:, j].max(), j].max()),
        )
        for j in range(x.shape[1])
    )
    return TrainingRounding(
        targets=tuple(float(t) for t in targets),
        ends=ends,
        largest=tuple(float(v) for v in e.max(axis=0)),
    )


def _identity(row: Mapping[str, Any]) -> Mapping[str, Any]:
    found = row.get("identity")
    return found if isinstance(found, Mapping) else {}


def _sketch(value: Any) -> tuple[float, ...] | None:
    return None if value is None else tuple(float(v) for v in value)


def _fit_linear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    coef, intercept, _ = _least_squares(x, y)
    return coef, intercept


def _fit_mean(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """The constant baseline's fit: no coefficients, the mean of ``y``."""
    return np.zeros(0), float(y.mean())


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
