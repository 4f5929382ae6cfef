"""Where the predictor may speak: the joint support of its training features, by leverage
(docs/design.md, "The experiments", predictor).

The leverage of a point ``x`` is ``h(x) = x~' (X~' X~)^{-1} x~``, with ``x~ = [1, z]`` and
``z`` the features standardised by the training mean and standard deviation, ``X~`` the
training rows so written. It is the Mahalanobis rule in another unit: with an intercept,
``h(x) = 1/n + d(x)^2 / (n - 1)``, ``d`` the Mahalanobis distance from the training mean
under the training covariance (``ddof=1``), so a threshold on one is a threshold on the other.
The predictor abstains when ``h(x)`` exceeds the largest training leverage ``max_i h(x_i)``:
the point lies outside the smallest ellipsoid of that shape that holds every training model,
where the least-squares fit would extrapolate jointly even when each feature on its own lies
within its training range.

The check holds within the features' float32 rounding (:mod:`._rounding`): the point's
features ``x_f`` move by up to ``e_f`` each, which moves ``h`` by up to
``sum_f |dh/dx_f| e_f`` (``dh/dz = 2 [(X~' X~)^{-1} x~]_z``, ``z_f = (x_f - mean_f) /
scale_f``); and the training model of the largest leverage carries its own, at most
``2 sqrt(h_max) sqrt(d' |G_zz| d)`` by Cauchy-Schwarz in the ``(X~' X~)^{-1}`` inner product
(``d_f`` the largest rounding bound a training value of feature ``f`` can carry, in
standardised units, ``|G_zz|`` the entrywise absolute feature block of the inverse). A
point within the sum of both of the largest training leverage is inside; a point whose
leverage lies within twice its own share plus the training model's of the widened threshold,
on either side, is on the rule's edge (:meth:`Support.on_edge`): two devices, each within its
share of the exact leverage, may decide it either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from attncoda._errors import AttncodaError

__all__ = ["LEVERAGE_SLACK", "Support", "fit_support"]

#: Relative slack on the largest training leverage: a training point recomputed at apply time
#: may differ from its fit-time leverage in the last bits.
LEVERAGE_SLACK = 1e-9


@dataclass(frozen=True)
class Support:
    """The joint support of the training features.

    Attributes
    ----------
    mean, scale : tuple of float, shape (p,)
        The training mean and standard deviation (``ddof=0``) of each feature, raw units.
    gram_inverse : tuple of tuple of float, shape (p + 1, p + 1)
        ``(X~' X~)^{-1}`` of the standardised training rows with the intercept column first.
    max_leverage : float
        The largest training leverage, in ``(0, 1]``.
    """

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    gram_inverse: tuple[tuple[float, ...], ...]
    max_leverage: float

    def leverage(self, values: Sequence[float]) -> float:
        """``h(x)`` of a point (its features in raw units, shape (p,))."""
        z = (np.asarray(values, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(
            self.scale
        )
        row = np.concatenate([[1.0], z])
        return float(row @ np.asarray(self.gram_inverse) @ row)

    def rounding(
        self, values: Sequence[float], errors: Sequence[float], edge_errors: Sequence[float]
    ) -> float:
        """How far float32 rounding can move the comparison of ``h(x)`` with the largest
        training leverage: the point's own share plus that training model's.

        Parameters
        ----------
        values, errors : sequence of float, shape (p,)
            The point's features (raw units) and their rounding bounds
            (:func:`~attncoda.experiments.predictor._rounding.feature_errors`).
        edge_errors : sequence of float, shape (p,)
            The largest rounding bound a training value of each feature can carry.

        Returns
        -------
        float
            A non-negative bound in leverage units.
        """
        scale = np.asarray(self.scale)
        z = (np.asarray(values, dtype=np.float64) - np.asarray(self.mean)) / scale
        gram = np.asarray(self.gram_inverse)
        slope = 2 * (gram @ np.concatenate([[1.0], z]))[1:] / scale
        own = float(np.abs(slope) @ np.asarray(errors, dtype=np.float64))
        d = np.asarray(edge_errors, dtype=np.float64) / scale
        theirs = 2 * np.sqrt(self.max_leverage * float(d @ np.abs(gram[1:, 1:]) @ d))
        return own + float(theirs)

    def threshold(
        self,
        values: Sequence[float],
        errors: Sequence[float] | None = None,
        edge_errors: Sequence[float] | None = None,
    ) -> tuple[float, float]:
        """``(threshold, allowed)``: the leverage above which a point is outside, the largest
        training leverage widened by ``allowed``, the features' float32 rounding
        (:meth:`rounding`; 0 when ``errors`` or ``edge_errors`` is None)."""
        allowed = 0.0
        if errors is not None and edge_errors is not None:
            allowed = self.rounding(values, errors, edge_errors)
        return self.max_leverage * (1 + LEVERAGE_SLACK) + allowed, allowed

    def on_edge(
        self, values: Sequence[float], errors: Sequence[float], edge_errors: Sequence[float]
    ) -> bool:
        """Whether the point's leverage lies within rounding of its threshold
        (:meth:`threshold`), on either side: within twice the point's share (each device
        computes the leverage within its share of the exact one) plus that of the training
        model of the largest leverage (itself measured once). Another device may then decide
        :meth:`outside` the other way."""
        threshold, _ = self.threshold(values, errors, edge_errors)
        zeros = [0.0] * len(self.mean)
        own = self.rounding(values, errors, zeros)
        theirs = self.rounding(values, zeros, edge_errors)
        return abs(self.leverage(values) - threshold) <= 2 * own + theirs

    def outside(
        self,
        values: Sequence[float],
        errors: Sequence[float] | None = None,
        edge_errors: Sequence[float] | None = None,
    ) -> str:
        """Why a point is outside the joint support, or ``""`` when it is inside.

        ``errors`` and ``edge_errors`` (:meth:`rounding`; none: no rounding is allowed) widen
        the largest training leverage by the features' float32 rounding."""
        h = self.leverage(values)
        if h <= self.threshold(values, errors, edge_errors)[0]:
            return ""
        return (
            f"leverage {h:.4g} exceeds the largest training leverage {self.max_leverage:.4g}: "
            "outside the training set's joint support"
        )


def fit_support(x: np.ndarray, features: Sequence[str]) -> Support:
    """The :class:`Support` of training rows ``x`` (shape (n, p), raw units).

    Raises
    ------
    AttncodaError
        A constant feature, or features that (with the intercept) are linearly dependent
        over the training rows: the joint support is then flat, and no leverage defines it.
    """
    mean, scale = x.mean(axis=0), x.std(axis=0)
    spread = x.max(axis=0) - x.min(axis=0)
    constant = [f for f, s in zip(features, spread, strict=True) if not s > 0]
    if constant:
        raise AttncodaError(
            f"feature {constant[0]!r} is constant over the training models: it cannot be "
            "fitted; drop it or add models where it varies"
        )
    design = np.column_stack([np.ones(len(x)), (x - mean) / scale])
    rank = int(np.linalg.matrix_rank(design))
    if rank < design.shape[1]:
        raise AttncodaError(
            f"the training features {', '.join(features)} and the intercept have rank {rank} "
            f"of {design.shape[1]} over {len(x)} models: their joint support is flat; drop a "
            "feature or add models"
        )
    inverse = np.linalg.inv(design.T @ design)
    leverages = np.einsum("ij,jk,ik->i", design, inverse, design)
    return Support(
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        gram_inverse=tuple(tuple(float(v) for v in row) for row in inverse),
        max_leverage=float(leverages.max()),
    )
