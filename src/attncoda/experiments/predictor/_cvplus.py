"""The predictor's interval: CV+ over runs (Barber, Candès, Ramdas and Tibshirani 2021,
"Predictive inference with the jackknife+", Ann. Statist. 49(1), 486-507), and the
leave-one-run-out fits it needs (docs/design.md, "The experiments", predictor).

The unit is a **run**: a ``train-tiny`` run and all its checkpoints are one run, a
pretrained model is a run of its own. With the rows of ``K`` runs, ``n`` rows in all, and
``g(i)`` the run of row ``i``:

- ``mu_{-g}`` is the fit on every row outside run ``g`` (``K`` fits);
- ``R_i = |y_i - mu_{-g(i)}(x_i)|``, the leave-one-run-out residual of row ``i``;
- for a new ``x``, the interval is ``[lower, upper]`` with ``lower`` the
  ``floor(alpha (n + 1))``-th smallest of ``mu_{-g(i)}(x) - R_i`` and ``upper`` the
  ``ceil((1 - alpha)(n + 1))``-th smallest of ``mu_{-g(i)}(x) + R_i`` over ``i = 1..n``.

This is the paper's K-fold CV+ (its Section 4) with the runs as the folds; when every run
gives one row it is the jackknife+. What the paper guarantees, for a new point exchangeable
with the training points and an algorithm that treats them symmetrically:

- jackknife+ (one row per run): coverage at least ``1 - 2 alpha``;
- CV+ with ``K`` folds of ``m = n / K`` points each: at least
  ``1 - 2 alpha - min{2 (1 - 1/K) / (n/K + 1), (1 - K/n) / (K + 1)}``, which is at least
  ``1 - 2 alpha - sqrt(2 / n)`` (Section 4).

Here exchangeability is over **runs**: the new model must come from a new run drawn like the
training runs, not be another checkpoint of one of them (such a model is no test, see
:func:`~attncoda.experiments.predictor._identity.relation_to_training`). Runs that give
different numbers of checkpoints are folds of unequal size, outside Theorem 4's hypothesis:
for them the bound is the paper's guide, not a proof.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from attncoda._errors import AttncodaError

__all__ = ["INTERVAL_METHOD", "CVPlus", "LeftOutFit", "cv_plus_ranks", "fit_cv_plus"]

#: How the interval is made, as tables and files name it.
INTERVAL_METHOD = "CV+ over runs (Barber et al. 2021; jackknife+ when each run gives one model)"

#: A fit: ``(x, y) -> (coefficients per raw feature unit, intercept)``.
Fit = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, float]]


@dataclass(frozen=True)
class LeftOutFit:
    """The fit without one run, ``mu_{-g}``.

    Attributes
    ----------
    run : str
        The run left out.
    coefficients : tuple of float
        Per raw unit of each feature (empty for the constant baseline).
    intercept : float
    """

    run: str
    coefficients: tuple[float, ...]
    intercept: float

    def predict(self, values: Sequence[float]) -> float:
        """``intercept + sum_j coefficients[j] * values[j]`` (a flip rate, unclipped)."""
        return self.intercept + sum(c * v for c, v in zip(self.coefficients, values, strict=True))


@dataclass(frozen=True)
class CVPlus:
    """A CV+ interval over runs: what applying it needs.

    Attributes
    ----------
    alpha : float
        The miscoverage level: the paper's guarantee is stated in it (module docstring).
    runs : tuple of str, shape (n,)
        The run of each training row, in the order of the training models.
    residuals : tuple of float, shape (n,)
        ``y_i - mu_{-g(i)}(x_i)`` of each training row (signed; ``R_i`` is its absolute
        value), in the units of the target (a flip rate).
    fits : tuple of LeftOutFit, shape (K,)
        One per run, in the order the runs first appear in ``runs``.
    """

    alpha: float
    runs: tuple[str, ...]
    residuals: tuple[float, ...]
    fits: tuple[LeftOutFit, ...]

    def bounds(self, values: Sequence[float]) -> tuple[float, float]:
        """The interval ``(lower, upper)`` at a point (unclipped, in target units).

        Parameters
        ----------
        values : sequence of float, shape (p,)
            The point's features, in the order of the fits' coefficients.
        """
        fit_of = {f.run: f.predict(values) for f in self.fits}
        mu = np.array([fit_of[r] for r in self.runs])
        spread = np.abs(np.asarray(self.residuals))
        low_rank, high_rank = cv_plus_ranks(len(self.runs), self.alpha)
        return (
            float(np.sort(mu - spread)[low_rank - 1]),
            float(np.sort(mu + spread)[high_rank - 1]),
        )

    @property
    def n_runs(self) -> int:
        """``K``, the runs (folds)."""
        return len(self.fits)

    @property
    def rmse(self) -> float:
        """The leave-one-run-out root mean squared error ``sqrt(mean_i residuals_i**2)``."""
        return float(np.sqrt(np.mean(np.square(self.residuals))))


def cv_plus_ranks(n: int, alpha: float) -> tuple[int, int]:
    """The ranks (1-based) of the CV+ ends among ``n`` values:
    ``(floor(alpha (n + 1)), ceil((1 - alpha)(n + 1)))``, ``alpha`` read as the decimal it
    is written as (``0.1`` is ``1/10``, so ``0.9 * 10`` is 9, not 9.000000000000002).

    Raises
    ------
    AttncodaError
        When either rank falls outside ``1..n`` (too few rows for ``alpha``).
    """
    a = Fraction(str(alpha))
    low, high = math.floor(a * (n + 1)), math.ceil((1 - a) * (n + 1))
    if low < 1 or high > n:
        least = math.ceil(1 / a) - 1
        raise AttncodaError(
            f"alpha={alpha} needs at least {least} training models (the CV+ interval takes "
            f"the floor(alpha (n + 1))-th smallest of n values); got {n}: add models or "
            "raise alpha"
        )
    return low, high


def fit_cv_plus(
    x: np.ndarray, y: np.ndarray, runs: Sequence[str], *, alpha: float, fit: Fit
) -> CVPlus:
    """Fit ``fit`` once without each run and record the leave-one-run-out residuals.

    Parameters
    ----------
    x : ndarray, shape (n, p)
        Training features (``p`` may be 0: the constant baseline).
    y : ndarray, shape (n,)
        Training targets.
    runs : sequence of str, shape (n,)
        The run of each row; at least 2 distinct.
    alpha : float
        Miscoverage level (checked by :func:`cv_plus_ranks`).
    fit : callable
        ``(x, y) -> (coefficients, intercept)``, applied to the rows of the other runs.

    Returns
    -------
    CVPlus
    """
    runs = tuple(runs)
    cv_plus_ranks(len(runs), alpha)
    labels = np.asarray(runs, dtype=object)
    residuals = np.empty(len(runs))
    fits = []
    for run in dict.fromkeys(runs):
        out = labels == run
        coef, intercept = fit(x[~out], y[~out])
        fits.append(LeftOutFit(run, tuple(float(c) for c in coef), float(intercept)))
        residuals[out] = y[out] - (intercept + x[out] @ coef)
    return CVPlus(float(alpha), runs, tuple(float(r) for r in residuals), tuple(fits))
