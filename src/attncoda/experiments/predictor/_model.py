"""The frozen flip-rate predictor and its constant baseline: a linear prediction with a CV+
interval over runs, or an abstention outside the training set's joint support
(docs/design.md, "The experiments", predictor). Its file is :mod:`._file`, its interval
:mod:`._cvplus`, its support :mod:`._support`, how a model is matched to a training model
:mod:`._identity`, the verdict on a measured model :mod:`._verdict`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.predictor._cvplus import INTERVAL_METHOD, CVPlus, cv_plus_ranks
from attncoda.experiments.predictor._file import fields_from_file, to_file
from attncoda.experiments.predictor._identity import (
    BY_WEIGHTS,
    Relation,
    TrainingIdentity,
    relation_to_training,
    training_match,
)
from attncoda.experiments.predictor._protocol import Protocol
from attncoda.experiments.predictor._rounding import (
    TrainingRounding,
    feature_errors,
    outside_range,
    range_edges,
)
from attncoda.experiments.predictor._support import Support
from attncoda.experiments.predictor._verdict import Prediction
from attncoda.store import read_json

__all__ = ["DEFAULT_ALPHA", "FEATURES", "INTERVAL_METHOD", "Baseline", "Predictor"]

FEATURES = ("mean_sink_mass", "std_sink_mass", "mean_sink_share")
#: Default miscoverage level: the paper's jackknife+ guarantee ``1 - 2 alpha`` is then 80%.
DEFAULT_ALPHA = 0.1


@dataclass(frozen=True)
class Baseline:
    """The constant baseline: the mean flip rate of the training models, with the same CV+
    interval over runs as the predictor (each left-out fit is the mean over the other runs'
    models).

    Attributes
    ----------
    value : float
        The mean of the training targets (a flip rate).
    interval : CVPlus
        Its left-out means (fits without coefficients) and residuals.
    """

    value: float
    interval: CVPlus

    def apply(self, targets: Sequence[float] = ()) -> Prediction:
        """The baseline's prediction, the same for every model: its value and CV+
        interval, each clipped to ``[0, 1]``. It never abstains.

        Parameters
        ----------
        targets : sequence of float, shape (n,) or empty
            The rounding of each training model's measured target, in the order of the
            interval's rows (:attr:`TrainingRounding.targets`); empty: exact. The
            prediction's ``rounding`` is how far they move either end (:meth:`rounding`).
        """
        low, high = self.interval.bounds(())
        return Prediction(
            abstained=False,
            point=_rate(self.value),
            low=_rate(low),
            high=_rate(high),
            rounding=self.rounding(targets),
        )

    def rounding(self, targets: Sequence[float] = ()) -> float:
        """How far the training models' measured rates, each within its rounding, move
        either end of the baseline's interval (flip-rate units; 0 for ``targets`` empty):
        what a verdict at an end is decided within.

        An end is an order statistic of ``v_i = mu_i +- |R_i|``, with
        ``mu_i`` the mean of the targets outside row ``i``'s run (moving by at most ``m_i``,
        the mean of their ``e_j``) and ``R_i = y_i - mu_i``: ``v_i`` is ``y_i`` itself where
        the sign of ``R_i`` holds within ``e_i + m_i`` (moving by ``e_i``), else within
        ``e_i + 2 m_i``. An order statistic of values each within ``d_i`` lies between the
        same order statistics of ``v - d`` and ``v + d``; clipping to ``[0, 1]`` moves nothing
        further. The bound is the larger of the two ends'. (The point, the mean of the
        targets, lies within the mean of their roundings of its exact value; it is read from
        the file as it is, so no run moves it, and no verdict is decided at it.)
        """
        e = np.asarray(targets, dtype=np.float64)
        if e.size == 0:
            return 0.0
        runs = np.asarray(self.interval.runs, dtype=object)
        if e.shape != runs.shape:
            raise AttncodaError(
                f"the baseline needs the rounding of each of its {len(runs)} training "
                f"targets; got {e.size}"
            )
        e = np.abs(e)
        mean_of = {f.run: f.intercept for f in self.interval.fits}
        mu = np.array([mean_of[r] for r in runs])
        moved = np.array([e[runs != r].mean() if (runs != r).any() else 0.0 for r in runs])
        residual = np.asarray(self.interval.residuals, dtype=np.float64)
        firm = np.abs(residual) > e + moved
        loose = e + 2 * moved
        upper = np.where(firm & (residual > 0), e, loose)  # v+ = max(y, 2 mu - y)
        lower = np.where(firm & (residual < 0), e, loose)  # v- = min(y, 2 mu - y)
        spread = np.abs(residual)
        low_rank, high_rank = cv_plus_ranks(len(runs), self.interval.alpha)
        low = _moved(mu - spread, lower, low_rank)
        high = _moved(mu + spread, upper, high_rank)
        return max(low, high)


@dataclass(frozen=True)
class Predictor:
    """A frozen linear predictor of the keep vs drop flip rate, and its baseline.

    ``flip rate = intercept + sum_i coefficients[i] * features[i]`` (least squares on
    standardised features, minimum-norm), with a CV+ interval over runs
    (:mod:`~attncoda.experiments.predictor._cvplus`: the paper's coverage guarantee, and
    its hypotheses, are stated there). Build it with :func:`fit_predictor`; store it with
    :meth:`to_dict` before applying it to models it has not seen.

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
    support : Support
        The joint support of the training features (leverage).
    residual_std : float or None
        ``sqrt(RSS / (n - p - 1))`` of the full fit; ``None`` when it interpolates.
        Reported only: the interval does not use it.
    interval : CVPlus
        The CV+ interval over runs: ``alpha``, each training model's run and
        leave-one-run-out residual, and each left-out fit.
    baseline : Baseline
        The constant baseline, fitted the same way.
    training_models : tuple of str
    identities : tuple of TrainingIdentity
        What identifies training models by content (empty: then a model is matched by name
        only).
    protocol : Protocol or None
        What the training rows read and how they were measured: a verdict is given only on
        a row read the same way. A frozen file always records it; ``None`` only for a
        predictor built from rows that record none.
    rounding : TrainingRounding or None
        The float32 rounding of the training models' own values: of each range's ends, of
        each feature at most, and of each target (the baseline's ends are made of them). A
        frozen file always states it; ``None``: each end's by its value alone
        (:meth:`TrainingRounding.by_value`), targets exact.
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
    support: Support
    residual_std: float | None
    interval: CVPlus
    baseline: Baseline
    training_models: tuple[str, ...]
    version: str
    created: str
    identities: tuple[TrainingIdentity, ...] = ()
    protocol: Protocol | None = None
    rounding: TrainingRounding | None = None

    @property
    def alpha(self) -> float:
        """The miscoverage level of the interval (and of the interval score)."""
        return self.interval.alpha

    @property
    def training_runs(self) -> tuple[str, ...]:
        """The run of each training model (the unit the interval leaves out)."""
        return self.interval.runs

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
            ``weights_sha256``, ``weights_sketch`` and ``recipe``.

        Returns
        -------
        (str, str) or None
            ``(training model, how)``, ``how`` in :data:`MATCHES`: equal canonical weights
            hashes first; then a near copy (the nearest training model whose weights sketch
            lies within :data:`attncoda.training.identity.NEAR_COPY`, relative, of the
            model's: the same weights rounded to bfloat16, float16 or a quantisation at
            least as fine); then equal ``train-tiny`` recipes (task, full config, seed,
            step: a retrained checkpoint whose weights differ on another CPU); then equal
            names.
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
        """How what a row read (its ``protocol``) differs from the fit's; ``[]`` when it is
        on protocol. A predictor without a protocol takes no row."""
        if self.protocol is None:
            return ["the predictor records no protocol"]
        return self.protocol.differences(read)

    def apply(
        self,
        features: Mapping[str, float],
        *,
        matched_by: str = "",
        errors: Mapping[str, float] | None = None,
    ) -> Prediction:
        """Predict the flip rate of a model from its features, or abstain.

        Parameters
        ----------
        features : mapping
            At least every name in ``self.features`` (e.g. from :func:`sink_features`).
        errors : mapping, optional
            The float32 rounding bound of each feature (a row's stated ``rounding``,
            :func:`~attncoda.experiments.predictor._rounding.feature_rounding`); by default
            one rounding of each by its value
            (:func:`~attncoda.experiments.predictor._rounding.feature_errors`).
        matched_by : str
            How the model was matched to a training model (:meth:`training_match`), ``""``
            for none. A model matched by its weights (:data:`~attncoda.experiments.
            predictor._identity.BY_WEIGHTS`: ``"weights"`` or ``"near copy"``) is one of the
            training points: it is never subject to abstention (only non-finite features
            still abstain), wherever its features were recomputed.

        Returns
        -------
        Prediction
            The full fit's linear value and the CV+ interval at the features, each clipped
            to ``[0, 1]``: a rate in ``[0, 1]`` inside the unclipped interval is inside the
            clipped one, so clipping loses no coverage (a linear value below 0 predicts 0).
            Or an abstention, when a feature is not finite, when the point's leverage
            exceeds the largest training leverage (outside the joint support,
            :mod:`~attncoda.experiments.predictor._support`), or when a feature lies outside
            its training range: the leverage ellipsoid holds the training points but reaches
            past the extremes a single feature took, where the fit has never seen its value.
            The reason names each rule the point breaks. Both rules hold within the features'
            float32 rounding (:mod:`~attncoda.experiments.predictor._rounding`): a value
            within its own and the edge's rounding of an edge is inside. ``rounding`` is how
            far that rounding moves the point and the ends (the largest ``sum_f |c_f| e_f``
            over the full fit and the left-out fits), stated for an abstention too; ``edge``
            is whether either rule was decided within rounding of its widened threshold
            (:func:`~attncoda.experiments.predictor._rounding.range_edges`,
            :meth:`~attncoda.experiments.predictor._support.Support.on_edge`).
        """
        missing = [f for f in self.features if f not in features]
        if missing:
            raise AttncodaError(
                f"features lack {missing[0]!r}; this predictor uses {', '.join(self.features)}"
            )
        values = [float(features[f]) for f in self.features]
        reasons = [
            f"feature {name}={value} is not finite"
            for name, value in zip(self.features, values, strict=True)
            if not math.isfinite(value)
        ]
        if reasons:
            return Prediction(abstained=True, reason="; ".join(reasons))
        errors = self._errors(values, errors)
        fits = [self.coefficients, *(fit.coefficients for fit in self.interval.fits)]
        rounding = float(
            max(
                sum(abs(c) * errors[f] for c, f in zip(coefficients, self.features, strict=True))
                for coefficients in fits
            )
        )
        edge = False
        if matched_by not in BY_WEIGHTS:
            own = [errors[f] for f in self.features]
            stated = self.rounding or TrainingRounding.by_value(
                self.features, self.training_range, len(self.training_models)
            )
            ends, largest = stated.ends, list(stated.largest)
            joint = self.support.outside(values, own, largest)
            reasons += [joint] if joint else []
            reasons += outside_range(self.features, values, self.training_range, errors, ends)
            edge = self.support.on_edge(values, own, largest) or bool(
                range_edges(self.features, values, self.training_range, errors, ends)
            )
        if reasons:
            return Prediction(
                abstained=True, reason="; ".join(reasons), rounding=rounding, edge=edge
            )
        linear = self.intercept + sum(c * v for c, v in zip(self.coefficients, values, strict=True))
        low, high = self.interval.bounds(values)
        return Prediction(
            abstained=False,
            point=_rate(linear),
            low=_rate(low),
            high=_rate(high),
            rounding=rounding,
            edge=edge,
        )

    def _errors(
        self, values: Sequence[float], errors: Mapping[str, float] | None
    ) -> dict[str, float]:
        """Each feature's rounding bound: ``errors`` as given (checked), else by value."""
        if errors is None:
            return feature_errors(dict(zip(self.features, values, strict=True)))
        found = {}
        for f in self.features:
            e = errors.get(f) if isinstance(errors, Mapping) else None
            if isinstance(e, bool) or not isinstance(e, (int, float)) or not e >= 0:
                raise AttncodaError(
                    f"the rounding of feature {f!r} must be a non-negative number; got {e!r}: "
                    "give the row's stated rounding (predictor_row) or none"
                )
            found[f] = float(e)
        return found

    def apply_baseline(self) -> Prediction:
        """The constant baseline's prediction (:meth:`Baseline.apply`), its rounding that of
        the training models' measured rates (:attr:`rounding`)."""
        return self.baseline.apply(() if self.rounding is None else self.rounding.targets)

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
        fields = fields_from_file(data, where)
        fields["baseline"] = Baseline(*fields["baseline"])
        return cls(**fields)


def _moved(values: np.ndarray, moves: np.ndarray, rank: int) -> float:
    """How far the ``rank``-th smallest of ``values`` (1-based), clipped to ``[0, 1]``,
    moves when each value moves by up to its ``moves``: the ``rank``-th smallest is monotone
    in every value, so it lies between that of ``values - moves`` and of ``values + moves``."""
    at = _rate(float(np.sort(values)[rank - 1]))
    up = _rate(float(np.sort(values + moves)[rank - 1]))
    down = _rate(float(np.sort(values - moves)[rank - 1]))
    return max(up - at, at - down)


def _rate(value: float) -> float:
    """``value`` clipped to ``[0, 1]``: a flip rate (an infinite end is 0 or 1)."""
    return min(1.0, max(0.0, value))
