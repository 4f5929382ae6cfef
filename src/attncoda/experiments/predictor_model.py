"""The frozen flip-rate predictor: its prediction or abstention, its file, and the verdict
on a measured model (docs/design.md, "The experiments", predictor).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.store import read_json
from attncoda.training.identity import recipe_key

__all__ = [
    "DEFAULT_COVERAGE",
    "FEATURES",
    "FILE_FORMAT",
    "FILE_KIND",
    "MATCHES",
    "VERDICTS",
    "Prediction",
    "Predictor",
    "TrainingIdentity",
    "verdict",
]

FEATURES = ("mean_sink_mass", "std_sink_mass", "mean_sink_share")
FILE_KIND = "attncoda.flip_rate_predictor"
FILE_FORMAT = 2
VERDICTS = ("confirmed", "abstained", "failed")
#: Default share of new models the interval aims to cover (see the module docstring).
DEFAULT_COVERAGE = 0.8
#: How a model is matched to a training model, strongest first (:meth:`Predictor.training_match`).
MATCHES = ("weights", "recipe", "name")


@dataclass(frozen=True)
class TrainingIdentity:
    """What identifies one of a predictor's training models by content.

    Attributes
    ----------
    model : str
        The training model's name (one of :attr:`Predictor.training_models`).
    weights_sha256 : str or None
        :func:`attncoda.training.identity.weights_sha256` of it, as loaded by
        :func:`attncoda.load_model` in float32.
    recipe : str or None
        A ``train-tiny`` checkpoint's recipe (:func:`attncoda.training.identity.
        checkpoint_recipe`) as canonical JSON (:func:`~attncoda.training.identity.
        recipe_key`); ``None`` for a pretrained model.
    """

    model: str
    weights_sha256: str | None = None
    recipe: str | None = None


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
    identities : tuple of TrainingIdentity
        What identifies training models by content (empty in a file that records none:
        then a model is matched by name only).
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
    identities: tuple[TrainingIdentity, ...] = ()

    def training_match(
        self, names: Sequence[str], identity: Mapping[str, Any] | None = None
    ) -> tuple[str, str] | None:
        """The training model a model is, and how it was matched; ``None`` when unseen.

        Parameters
        ----------
        names : sequence of str
            The model's names (e.g. ``"train-tiny step2000"`` and ``"train-tiny"``).
        identity : mapping, optional
            :func:`attncoda.training.identity.model_identity` of the model:
            ``weights_sha256`` and ``recipe``.

        Returns
        -------
        (str, str) or None
            ``(training model, how)``, ``how`` in :data:`MATCHES`: equal weights hashes
            first, then equal ``train-tiny`` recipes (task, full config, seed, step: a
            retrained checkpoint whose weights differ in rounding on another CPU or thread
            count), then equal names.
        """
        weights = (identity or {}).get("weights_sha256")
        recipe = recipe_key((identity or {}).get("recipe"))
        for ident in self.identities:
            if weights is not None and ident.weights_sha256 == weights:
                return ident.model, "weights"
        for ident in self.identities:
            if recipe is not None and ident.recipe == recipe:
                return ident.model, "recipe"
        for model in self.training_models:
            if model in names:
                return model, "name"
        return None

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

    def to_dict(self) -> dict[str, Any]:
        """The predictor as the JSON object of its frozen file (:meth:`from_json` reads it
        back; it predicts exactly as before). Writing the file is the caller's."""
        return {
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
            "training_identity": {
                i.model: {
                    "weights_sha256": i.weights_sha256,
                    "recipe": None if i.recipe is None else json.loads(i.recipe),
                }
                for i in self.identities
            },
            "attncoda_version": self.version,
            "created": self.created,
        }

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Predictor:
        """Read a frozen predictor file (the JSON object of :meth:`to_dict`)."""
        return cls.from_dict(read_json(path), where=f"invalid predictor file {str(path)!r}")

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "invalid predictor") -> Predictor:
        """The predictor of :meth:`to_dict`'s object; an error starts with ``where``."""
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
            identities=_identities(data.get("training_identity", {}), training_models, where),
        )


def _identities(
    value: Any, training_models: tuple[str, ...], where: str
) -> tuple[TrainingIdentity, ...]:
    """The ``training_identity`` object of a file (absent in files that record none)."""
    where = f"{where}: key 'training_identity'"
    if not isinstance(value, dict):
        raise AttncodaError(f"{where} must map training models to their identity; got {value!r}")
    found = []
    for model, ident in value.items():
        if model not in training_models:
            raise AttncodaError(f"{where} names {model!r}, which is no training model")
        if not isinstance(ident, dict) or set(ident) != {"weights_sha256", "recipe"}:
            raise AttncodaError(
                f"{where} for {model!r} must hold exactly 'weights_sha256' and 'recipe'; "
                f"got {ident!r}"
            )
        weights, recipe = ident["weights_sha256"], ident["recipe"]
        if weights is not None and not isinstance(weights, str):
            raise AttncodaError(
                f"{where} for {model!r}: weights_sha256 {weights!r} is not a string"
            )
        if recipe is not None and not isinstance(recipe, dict):
            raise AttncodaError(f"{where} for {model!r}: recipe {recipe!r} is not an object")
        found.append(TrainingIdentity(model, weights, recipe_key(recipe)))
    return tuple(found)


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
