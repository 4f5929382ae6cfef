r"""The paired bootstrap interval of a perplexity ratio over the evaluation windows
(docs/design.md, "Intervals").

The pruned and the unpruned model read the same evaluation windows, so a resample draws the
windows once and recomputes the ratio on both, as the prune table defines it:

.. math::

    \mathrm{ratio} = \exp\Bigl(\tfrac{1}{n}\sum_w \ell^{pruned}_w
        - \tfrac{1}{n}\sum_w \ell^{unpruned}_w\Bigr),

``l_w`` the mean next-token NLL of window ``w`` (nats), ``n`` the windows. The interval is
the 2.5 and 97.5 percentiles of the resampled ratios. Drawing the windows once for both
models (pairing) keeps each window's own difficulty out of the interval: a pruned model that
loses the same amount ``c`` more than the unpruned one on every window has the interval
``[exp(c), exp(c)]``, whatever the windows.
"""

from __future__ import annotations

import math

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    BOOTSTRAP_WINDOWS,
    no_interval_note,
    percentile_interval,
    resample_weights,
)

__all__ = ["BASELINE_NOTE", "RatioInterval", "ratio_interval", "window_resamples"]

#: The note of the unpruned row, whose ratio is 1 by definition and has no interval.
BASELINE_NOTE = "the unpruned model: ratio 1 by definition"

#: ``(ratio_ci_low, ratio_ci_high, ci_method, n_windows, n_boot, ci_note)`` of one row.
RatioInterval = tuple[float, float, str, int, int, str]


def window_resamples(n_windows: int, n_boot: int, seed: int) -> np.ndarray:
    """How often each evaluation window is drawn in each resample, shape (n_boot, window);
    ``(0, window)`` below :data:`~attncoda.experiments.contract.MIN_BOOTSTRAP_N` windows (no
    interval is drawn)."""
    drawn = 0 if no_interval_note(n_windows, "windows") else n_boot
    return resample_weights(n_windows, drawn, seed)


def ratio_interval(
    pruned: np.ndarray, unpruned: np.ndarray, weights: np.ndarray
) -> RatioInterval:
    """The paired percentile bootstrap interval of ``exp(mean(pruned) - mean(unpruned))``.

    Parameters
    ----------
    pruned, unpruned : ndarray of float64, shape (window,)
        Each evaluation window's mean next-token NLL (nats) under the pruned and the unpruned
        model, the same windows in the same order.
    weights : ndarray of float64, shape (n_boot, window)
        :func:`window_resamples`: how often each window is drawn in each resample, the same
        draws for every row of a table.

    Returns
    -------
    RatioInterval
        ``(ratio_ci_low, ratio_ci_high, ci_method, n_windows, n_boot, ci_note)``: with too few
        windows (no resample), NaN bounds, ``ci_method = ""``, ``n_boot = 0`` and a note that
        says why.
    """
    pruned = np.asarray(pruned, dtype=np.float64)
    unpruned = np.asarray(unpruned, dtype=np.float64)
    n = pruned.shape[0]
    if pruned.shape != (n,) or unpruned.shape != (n,) or weights.shape[1:] != (n,):
        raise AttncodaError(
            f"the window losses of the pruned and the unpruned model must be two vectors over "
            f"the same windows; got shapes {pruned.shape}, {unpruned.shape} and resamples of "
            f"{weights.shape[1:]}: evaluate both on the same windows"
        )
    note = no_interval_note(n, "windows")
    if note or not len(weights):
        return math.nan, math.nan, "", n, 0, note or "no interval: no resample drawn"
    # Each resample's mean loss difference: (w_r . (l_pruned - l_unpruned)) / n.
    ratios = np.exp(weights @ (pruned - unpruned) / n)
    low, high = percentile_interval(ratios)
    return low, high, BOOTSTRAP_WINDOWS, n, len(weights), ""
