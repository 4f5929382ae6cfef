"""What a number computed from float32 statistics can resolve: the rounding bound of a sum
or difference, the null of a ratio whose denominator lies within it, and the edge of a
threshold widened by it (docs/design.md, "Verdicts and ratios within rounding").

Every row statistic an experiment reads (sink mass, entropies, log-probabilities) comes
out of a float32 computation, whose result carries at least one rounding relative to its
size: a statistic ``x`` stands for any value in ``x (1 + delta)``, ``|delta| <= u``, with
``u = 2**-24`` the float32 unit roundoff. A quantity ``f`` computed from such inputs
``x_i`` moves, to first order, by at most

.. math::

    |\\delta f| \\le u \\sum_i |x_i \\, \\partial f / \\partial x_i|,

the unit roundoff times the magnitudes summed (the componentwise condition number of
``f``). For a mean difference ``mean(b) - mean(a)`` that is ``u (mean |a| + mean |b|)``:
a change below it is a change of the last bits, on which two devices, or two kernels of
one device, need not agree. A ratio over such a denominator is null, with a note, and a
value within the bound of a threshold is on the threshold's accepting side.
"""

from __future__ import annotations

import math

__all__ = ["FLOAT32_UNIT_ROUNDOFF", "rounding_bound", "within_rounding"]

#: The float32 unit roundoff ``u = 2**-24``: a float32 result's relative rounding error.
FLOAT32_UNIT_ROUNDOFF = 2.0**-24


def rounding_bound(*magnitudes: float) -> float:
    """``u * sum |m|``: how far float32 rounding of inputs of these magnitudes can move a
    sum or difference of them (the same units as the magnitudes).

    Parameters
    ----------
    *magnitudes : float
        The sizes ``|x_i ∂f/∂x_i|`` of the terms (for a difference of two means: both
        means).

    Returns
    -------
    float
        A non-negative bound; ``inf`` when a magnitude is not finite.
    """
    total = math.fsum(abs(float(m)) for m in magnitudes)
    return FLOAT32_UNIT_ROUNDOFF * total if math.isfinite(total) else math.inf


def within_rounding(value: float, bound: float) -> bool:
    """Whether ``|value| <= bound``: ``value`` (a denominator, a change) is indistinguishable
    from zero at the rounding of what it was computed from. A NaN value is within."""
    return not abs(value) > bound
