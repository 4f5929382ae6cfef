"""The frozen predictor file: the JSON object a fitted predictor is written as, and its
checked reading (docs/design.md, "The experiments", predictor)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._cvplus import (
    INTERVAL_METHOD,
    CVPlus,
    LeftOutFit,
    cv_plus_ranks,
)
from attncoda.experiments.predictor._identity import identities_from_file, identities_to_file
from attncoda.experiments.predictor._protocol import Protocol
from attncoda.experiments.predictor._rounding import TrainingRounding
from attncoda.experiments.predictor._support import Support

__all__ = ["FILE_FORMAT", "FILE_KIND", "fields_from_file", "to_file"]

FILE_KIND = "attncoda.flip_rate_predictor"
#: 5: the CV+ interval over runs with its left-out fits, the constant baseline, the joint
#: support, the weights sketches, the protocol as read (one reading per corpus), and the
#: float32 rounding of the training models' own values (``rounding``: each target, each
#: range end, each feature at most), which the edges of the verdicts are stated by.
FILE_FORMAT = 5
_KEYS = (
    "kind",
    "format",
    "target",
    "metrics",
    "features",
    "coefficients",
    "intercept",
    "training_range",
    "support",
    "residual_std",
    "interval",
    "baseline",
    "training_models",
    "training_identity",
    "protocol",
    "rounding",
    "attncoda_version",
    "created",
)
#: What the file's ``rounding`` states, in words.
ROUNDING_RULE = (
    "float32 rounding of each training model's target (its flip rates' rate_rounding) and "
    "features (row statistics over the rows' keys), at each range end and at most"
)
_OLD = {
    1: "format 1 (an interval floor set by hand) is no longer read",
    2: "format 2 records no protocol, so no verdict of it could be checked against its fit",
    3: "format 3 (a leave-one-out interval that kept a left-out checkpoint's sister "
    "checkpoints in the fit, abstention feature by feature, the protocol as asked, not as "
    "read) is no longer read",
    4: "format 4 states no rounding of its training models' rates and features, so a "
    "verdict at its baseline's end, which is a training model's rate, would be decided by "
    "the last bit",
}


def to_file(predictor: Any) -> dict[str, Any]:
    """The JSON object of a :class:`~attncoda.experiments.predictor.Predictor`'s frozen file
    (:func:`fields_from_file` reads it back). A predictor without a protocol is refused:
    no verdict of it could be checked against how it was fitted."""
    if predictor.protocol is None:
        raise AttncodaError(
            "this predictor records no protocol, so it cannot be frozen: fit it on rows that "
            "record theirs (attncoda.run.fit.predictor_rows, or 'attncoda predictor fit')"
        )
    support, interval, baseline = predictor.support, predictor.interval, predictor.baseline
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
        "support": {
            "rule": "leverage of [1, standardised features] above the largest training one",
            "mean": list(support.mean),
            "scale": list(support.scale),
            "gram_inverse": [list(row) for row in support.gram_inverse],
            "max_leverage": support.max_leverage,
        },
        "residual_std": predictor.residual_std,
        "interval": {
            "method": INTERVAL_METHOD,
            "alpha": interval.alpha,
            "runs": list(interval.runs),
            "residuals": list(interval.residuals),
            "left_out_fits": [
                {"run": f.run, "coefficients": list(f.coefficients), "intercept": f.intercept}
                for f in interval.fits
            ],
        },
        "baseline": {
            "value": baseline.value,
            "residuals": list(baseline.interval.residuals),
            "left_out_means": {f.run: f.intercept for f in baseline.interval.fits},
        },
        "training_models": list(predictor.training_models),
        "training_identity": identities_to_file(predictor.identities),
        "protocol": predictor.protocol.to_dict(),
        "rounding": _rounding_to_file(predictor),
        "attncoda_version": predictor.version,
        "created": predictor.created,
    }


def fields_from_file(data: Any, where: str) -> dict[str, Any]:
    """The :class:`~attncoda.experiments.predictor.Predictor` fields of a file's JSON object,
    each checked; an error starts with ``where``. The baseline is ``(value, CVPlus)``."""
    if not isinstance(data, dict):
        raise AttncodaError(f"{where}: expected a JSON object; got {type(data).__name__}")
    if data.get("kind") == FILE_KIND and data.get("format") in _OLD:
        raise AttncodaError(
            f"{where}: {_OLD[data['format']]}; refit it with 'attncoda predictor fit' "
            "(CV+ interval over runs)"
        )
    for key in _KEYS:
        if key not in data:
            raise AttncodaError(f"{where}: missing key {key!r}")
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
    training_models = _strings(data, "training_models", where)
    interval = _interval(data["interval"], n, training_models, f"{where}: key 'interval'")
    baseline = _baseline(data["baseline"], interval, f"{where}: key 'baseline'")
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
        support=_support(data["support"], n, f"{where}: key 'support'"),
        residual_std=residual,
        interval=interval,
        baseline=baseline,
        training_models=training_models,
        version=data["attncoda_version"],
        created=data["created"],
        identities=identities_from_file(data["training_identity"], training_models, where),
        protocol=Protocol.from_dict(data["protocol"], f"{where}: key 'protocol'"),
        rounding=_rounding(data["rounding"], features, training_models, f"{where}: key 'rounding'"),
    )


def _rounding_to_file(predictor: Any) -> dict[str, Any]:
    """The ``rounding`` object of a file: the predictor's :class:`TrainingRounding` (by
    value, :meth:`TrainingRounding.by_value`, where it states none)."""
    rounding = predictor.rounding or TrainingRounding.by_value(
        predictor.features, predictor.training_range, len(predictor.training_models)
    )
    return {
        "rule": ROUNDING_RULE,
        "targets": list(rounding.targets),
        "range": {
            f: list(pair) for f, pair in zip(predictor.features, rounding.ends, strict=True)
        },
        "largest": dict(zip(predictor.features, rounding.largest, strict=True)),
    }


def _rounding(
    value: Any, features: tuple[str, ...], models: tuple[str, ...], where: str
) -> TrainingRounding:
    value = _object(value, ("targets", "range", "largest"), where)
    targets = _numbers(value, "targets", where, len(models))
    ends, largest = value["range"], value["largest"]
    if not isinstance(ends, Mapping) or set(ends) != set(features):
        raise AttncodaError(
            f"{where}: range must map each feature to the rounding of its [min, max] ends; "
            f"got {ends!r}"
        )
    if not isinstance(largest, Mapping) or set(largest) != set(features):
        raise AttncodaError(
            f"{where}: largest must map each feature to its largest training rounding; "
            f"got {largest!r}"
        )
    pairs = tuple(_numbers(ends, f, f"{where} (range)", 2) for f in features)
    most = tuple(_number(largest, f, f"{where} (largest)") for f in features)
    if any(v < 0 for v in (*targets, *most, *(e for pair in pairs for e in pair))):
        raise AttncodaError(f"{where}: every rounding must be non-negative; got {dict(value)!r}")
    return TrainingRounding(
        targets=targets, ends=tuple((lo, hi) for lo, hi in pairs), largest=most
    )


def _object(value: Any, keys: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not set(keys) <= set(value):
        raise AttncodaError(f"{where} must be an object with {', '.join(keys)}; got {value!r}")
    return value


def _support(value: Any, n: int, where: str) -> Support:
    value = _object(value, ("mean", "scale", "gram_inverse", "max_leverage"), where)
    inverse = value["gram_inverse"]
    if not isinstance(inverse, list) or len(inverse) != n + 1:
        raise AttncodaError(f"{where}: gram_inverse must be {n + 1} rows of {n + 1} numbers")
    rows = tuple(_numbers({"row": r}, "row", f"{where} (gram_inverse)", n + 1) for r in inverse)
    scale = _numbers(value, "scale", where, n)
    if any(s <= 0 for s in scale):
        raise AttncodaError(f"{where}: scale must be positive; got {list(scale)}")
    top = _number(value, "max_leverage", where)
    if not 0 < top <= 1 + 1e-9:
        raise AttncodaError(f"{where}: max_leverage must lie in (0, 1]; got {top!r}")
    return Support(_numbers(value, "mean", where, n), scale, rows, top)


def _interval(value: Any, n: int, models: tuple[str, ...], where: str) -> CVPlus:
    value = _object(value, ("alpha", "runs", "residuals", "left_out_fits"), where)
    alpha = _number(value, "alpha", where)
    if not 0 < alpha < 0.5:
        raise AttncodaError(f"{where}: alpha must lie strictly between 0 and 0.5; got {alpha!r}")
    runs = _strings(value, "runs", where)
    if len(runs) != len(models):
        raise AttncodaError(
            f"{where}: runs must name the run of each of the {len(models)} training models; "
            f"got {len(runs)}"
        )
    try:
        cv_plus_ranks(len(runs), alpha)
    except AttncodaError as err:
        raise AttncodaError(f"{where}: {err}") from None
    residuals = _numbers(value, "residuals", where, len(models))
    fits = value["left_out_fits"]
    if not isinstance(fits, list) or [
        f.get("run") if isinstance(f, Mapping) else None for f in fits
    ] != list(dict.fromkeys(runs)):
        raise AttncodaError(
            f"{where}: left_out_fits must be one {{run, coefficients, intercept}} per run, in "
            f"the order of runs ({', '.join(dict.fromkeys(runs))})"
        )
    found = tuple(
        LeftOutFit(
            f["run"],
            _numbers(f, "coefficients", f"{where} (fit without {f['run']!r})", n),
            _number(f, "intercept", f"{where} (fit without {f['run']!r})"),
        )
        for f in fits
    )
    return CVPlus(alpha, runs, residuals, found)


def _baseline(value: Any, interval: CVPlus, where: str) -> tuple[float, CVPlus]:
    value = _object(value, ("value", "residuals", "left_out_means"), where)
    residuals = _numbers(value, "residuals", where, len(interval.runs))
    means = value["left_out_means"]
    order = [f.run for f in interval.fits]
    if not isinstance(means, Mapping) or set(means) != set(order):
        raise AttncodaError(
            f"{where}: left_out_means must map each run ({', '.join(order)}) to the mean "
            f"without it; got {means!r}"
        )
    fits = tuple(LeftOutFit(r, (), _number(means, r, f"{where} (left_out_means)")) for r in order)
    cv = CVPlus(interval.alpha, interval.runs, residuals, fits)
    return _number(value, "value", where), cv


def _number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AttncodaError(f"{where}: key {key!r} must be a finite number; got {value!r}")
    return float(value)


def _numbers(data: Mapping[str, Any], key: str, where: str, n: int) -> tuple[float, ...]:
    value: Any = data.get(key)
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
