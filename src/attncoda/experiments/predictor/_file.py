"""The frozen predictor file: the JSON object a fitted predictor is written as, and its
checked reading (docs/design.md, "The experiments", predictor)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._identity import identities_from_file, identities_to_file
from attncoda.experiments.predictor._protocol import Protocol

__all__ = ["FILE_FORMAT", "FILE_KIND", "fields_from_file", "to_file"]

FILE_KIND = "attncoda.flip_rate_predictor"
#: 3: the file records the protocol its training rows were read with (``protocol``).
FILE_FORMAT = 3


def to_file(predictor: Any) -> dict[str, Any]:
    """The JSON object of a :class:`~attncoda.experiments.predictor.Predictor`'s frozen file
    (:func:`fields_from_file` reads it back). A predictor without a protocol is refused:
    no verdict of it could be checked against how it was fitted."""
    if predictor.protocol is None:
        raise AttncodaError(
            "this predictor records no protocol, so it cannot be frozen: fit it on rows that "
            "record theirs (attncoda.run.fit.predictor_rows, or 'attncoda predictor fit')"
        )
    return {
        "kind": FILE_KIND,
        "format": FILE_FORMAT,
        "target": predictor.target,
        "metrics": list(predictor.metrics),
        "features": list(predictor.features),
        "coefficients": list(predictor.coefficients),
        "intercept": predictor.intercept,
        "training_range": {
            f: list(r) for f, r in zip(predictor.features, predictor.training_range, strict=True)
        },
        "residual_std": predictor.residual_std,
        "interval_half_width": predictor.half_width,
        "interval": "leave-one-out: the ceil((n+1)*coverage)-th smallest |residual|",
        "coverage": predictor.coverage,
        "loo_residuals": list(predictor.loo_residuals),
        "training_models": list(predictor.training_models),
        "training_identity": identities_to_file(predictor.identities),
        "protocol": predictor.protocol.to_dict(),
        "attncoda_version": predictor.version,
        "created": predictor.created,
    }


def fields_from_file(data: Any, where: str) -> dict[str, Any]:
    """The :class:`~attncoda.experiments.predictor.Predictor` fields of a file's JSON object,
    each checked; an error starts with ``where``."""
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
        "protocol",
    ):
        if key not in data and not (
            key in ("coverage", "loo_residuals", "protocol") and data.get("format") in (1, 2)
        ):
            raise AttncodaError(f"{where}: missing key {key!r}")
    if data["kind"] == FILE_KIND and data["format"] == 1:
        raise AttncodaError(
            f"{where}: format 1 (an interval floor set by hand) is no longer read; "
            "refit it with 'attncoda predictor fit' (leave-one-out interval)"
        )
    if data["kind"] == FILE_KIND and data["format"] == 2:
        raise AttncodaError(
            f"{where}: format 2 records no protocol (windows, window length, seed, metrics), "
            "so no verdict of it could be checked against its fit; refit it with "
            "'attncoda predictor fit'"
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
    training_range = tuple(_numbers(ranges, f, f"{where} (training_range)", 2) for f in features)
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
    return dict(
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
        identities=identities_from_file(data.get("training_identity", {}), training_models, where),
        protocol=Protocol.from_dict(data["protocol"], f"{where}: key 'protocol'"),
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
