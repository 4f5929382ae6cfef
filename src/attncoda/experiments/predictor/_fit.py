"""Fitting the flip-rate predictor: least squares on standardised sink features, and its
interval from leave-one-out residuals (docs/design.md, "The experiments", predictor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from attncoda import __version__
from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._identity import TrainingIdentity
from attncoda.experiments.predictor._model import DEFAULT_COVERAGE, FEATURES, Predictor
from attncoda.experiments.predictor._protocol import Protocol
from attncoda.training.identity import recipe_key

__all__ = ["fit_predictor"]


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
        "flip_rates": {metric: float}}`` (see :func:`predictor_row`), and optionally
        ``"identity"`` (``{"weights_sha256", "recipe"}``,
        :func:`attncoda.training.identity.model_identity`), which the predictor records to
        recognise its training models by content, and ``"protocol"`` (how its rows were
        read: :func:`~attncoda.experiments.predictor._protocol.protocol_of`), which must be
        the same for every row. Every row must hold the same metrics.
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
        Its ``protocol`` is the rows' (``None`` when no row records one: such a predictor
        gives no verdict and cannot be frozen).

    Raises
    ------
    AttncodaError
        Fewer than 3 training models, too few for ``coverage``, malformed rows, or rows
        read with different protocols.
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
    protocol = _protocol(rows, metrics)
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
        identities=tuple(
            TrainingIdentity(
                str(row["model"]),
                row["identity"].get("weights_sha256"),
                recipe_key(row["identity"].get("recipe")),
            )
            for row in rows
            if isinstance(row.get("identity"), Mapping)
        ),
        protocol=protocol,
    )


def _protocol(rows: Sequence[Mapping[str, Any]], metrics: tuple[str, ...]) -> Protocol | None:
    """The one protocol every training row records (``None`` when none records one)."""
    found = [row.get("protocol") for row in rows]
    if all(p is None for p in found):
        return None
    first = Protocol.from_dict(found[0], f"training row 0 ({rows[0]['model']!r})")
    for row, value in zip(rows, found, strict=True):
        differs = first.differences(value)
        if differs:
            raise AttncodaError(
                f"model {row['model']!r} was read with another protocol than "
                f"{rows[0]['model']!r} ({'; '.join(differs)}): fit on rows read one way"
            )
    if sorted(first.metrics) != sorted(metrics):
        raise AttncodaError(
            f"the rows' protocol names the metrics {list(first.metrics)}, their flip rates "
            f"{list(metrics)}: give rows whose flip rates are the protocol's"
        )
    return first


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
