"""The frozen flip-rate predictor: a linear prediction or an abstention outside its training
range (docs/design.md, "The experiments", predictor). Its file is :mod:`._file`, how a model is
matched to a training model :mod:`._identity`, the verdict on a measured model :mod:`._verdict`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._file import fields_from_file, to_file
from attncoda.experiments.predictor._identity import (
    Relation,
    TrainingIdentity,
    relation_to_training,
    training_match,
)
from attncoda.experiments.predictor._protocol import Protocol
from attncoda.experiments.predictor._verdict import Prediction
from attncoda.store import read_json

__all__ = ["DEFAULT_COVERAGE", "FEATURES", "Predictor"]

FEATURES = ("mean_sink_mass", "std_sink_mass", "mean_sink_share")
#: Default share of new models the interval aims to cover.
DEFAULT_COVERAGE = 0.8


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
    protocol : Protocol or None
        How the training rows were read and measured (windows, window length, corpus, sink,
        seed, metrics, tie tolerance): a verdict is given only on a row read the same way.
        A frozen file always records it; ``None`` only for a predictor built by hand.
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
    protocol: Protocol | None = None

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
        return training_match(self.identities, self.training_models, names, identity)

    def relation(self, names: Sequence[str], identity: Mapping[str, Any] | None = None) -> Relation:
        """How a model stands to the training models: one of them, a checkpoint of a run
        that gave them (interpolated or same run), or held out
        (:func:`~attncoda.experiments.predictor._identity.relation_to_training`; the
        arguments as for :meth:`training_match`). Only a held-out model tests the predictor.
        """
        return relation_to_training(self.identities, self.training_models, names, identity)

    def off_protocol(self, read: Mapping[str, Any] | None) -> list[str]:
        """How the protocol a row was read with (its ``protocol``) differs from the fit's;
        ``[]`` when it is the same. A predictor without a protocol takes no row."""
        if self.protocol is None:
            return ["the predictor records no protocol"]
        return self.protocol.differences(read)

    def apply(self, features: Mapping[str, float]) -> Prediction:
        """Predict the flip rate of a model from its features, or abstain.

        Parameters
        ----------
        features : mapping
            At least every name in ``self.features`` (e.g. from :func:`sink_features`).

        Returns
        -------
        Prediction
            The linear prediction and its interval ``linear ± half_width``, each clipped to
            ``[0, 1]`` (a flip rate; a linear value below 0 predicts 0), or an abstention
            naming each feature outside the training range (or not finite). The half-width
            comes from the unclipped leave-one-out residuals; for a measured rate in
            ``[0, 1]`` clipping only shrinks a residual, so the interval stays conservative.
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
        linear = self.intercept + sum(c * v for c, v in zip(self.coefficients, values, strict=True))
        return Prediction(
            abstained=False,
            point=_rate(linear),
            low=_rate(linear - self.half_width),
            high=_rate(linear + self.half_width),
        )

    def to_dict(self) -> dict[str, Any]:
        """The predictor as the JSON object of its frozen file (:meth:`from_json` reads it
        back; it predicts exactly as before). Writing the file is the caller's."""
        return to_file(self)

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> Predictor:
        """Read a frozen predictor file (the JSON object of :meth:`to_dict`)."""
        return cls.from_dict(read_json(path), where=f"invalid predictor file {str(path)!r}")

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "invalid predictor") -> Predictor:
        """The predictor of :meth:`to_dict`'s object; an error starts with ``where``."""

        return cls(**fields_from_file(data, where))


def _rate(value: float) -> float:
    """``value`` clipped to ``[0, 1]``: a flip rate."""
    return min(1.0, max(0.0, value))
