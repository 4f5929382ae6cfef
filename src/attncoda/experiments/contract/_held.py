"""How each column of a table is held when two runs are compared: one rule per kind of
column, each derived from what the column is computed from (docs/design.md, "The same
evidence, by one rule").

Two runs of the same command agree when every cell of every table lies within what its
column can hold between two roundings (two CPUs, a CPU and a GPU, the exact and the fast
path). The experiment that makes a table declares the rule of each of its columns that is
not plain equality (:attr:`attncoda.experiments.contract.Experiment.held`); there is no
tolerance by type. Every rule reads what it allows from the **reference's** row (the
second run of a comparison): a run cannot widen its own allowance, and a column the run
lacks (a table recorded before the column existed) is held by the reference's. A rule
with an ``edge`` column lets a cell go either way where the reference's row flags it: the
result is decided within rounding of its threshold.

- :class:`Same`: equal, nulls where nulls: text, flags, structural counts, settings a
  table echoes, values read from a file. The rule of every undeclared column.
- :class:`RowStatistic`: a mean of float32 row statistics over ``n`` keys (sink mass, an
  entropy or one of its terms, a sink balance, a Gu score), or a difference of such
  means: within ``u (n + 2) (M + log n)``, ``M`` the magnitudes it is computed from.
- :class:`Stated`: a count, rate or interval end decided at a threshold, within the
  bounds its row states (fragile items, a rate's or an end's rounding).
- :class:`Bound`: a stated bound itself, within ``BOUND_RTOL`` of the reference's plus
  ``BOUND_UNITS`` units, so that a bound one run inflates fails.
- :class:`Exponent`: ``exp`` of a mean negative log-likelihood or of a difference of two
  (a perplexity, a perplexity ratio, a bootstrap end of one), within the stated bound of
  its exponent: ``|x| expm1(bound)``.
- :class:`Share`: a ratio within what its numerator's and denominator's own differences
  make of it, to first order.
- :class:`Coordinates`: coordinates defined up to a rotation or reflection (metric MDS),
  through the distances between the points of a group, within the group's stated bound.
- :class:`Labels`: cluster labels, through the partition they make of a group, leaving
  out the rows whose label its row states to be on an edge.
- :class:`Verdict`: a verdict (text or flag) decided at a threshold: equal, unless its row
  states it to be on the edge, where either side is the same evidence.

:func:`attncoda.experiments.contract._frames.compare_frames` applies them to two frames of
one table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from attncoda.experiments.contract._rounding import FLOAT32_UNIT_ROUNDOFF

__all__ = [
    "BOUND_RTOL",
    "BOUND_UNITS",
    "FLOAT64_SLACK",
    "RULES",
    "Bound",
    "Coordinates",
    "Exponent",
    "Held",
    "Labels",
    "RowStatistic",
    "Same",
    "Share",
    "Stated",
    "Verdict",
    "held_by",
    "row_statistic_rounding",
]

#: A stated bound is held to this share of the reference's: a count of fragile triplets
#: moves between two roundings by the triplets whose distance gap lies within the actual
#: rounding of the band's edge, at most ~0.25% of them (the distances of two kernels
#: differ by at most 1.2e-3 of their stated bound, docs/design.md); four times that.
BOUND_RTOL = 0.01
#: Plus this many units (a rate's unit is one item of its ``per`` count): a handful of
#: fragile items changes between two CPUs (3 measured between an Intel Xeon and an AMD EPYC
#: on the demo's models).
BOUND_UNITS = 3
#: What a float computed in float64 from the same counts or stated values may differ by
#: between two machines, relative to itself: a rate, a Clopper-Pearson end (scipy's beta
#: quantile, solved to float64 precision), a share's own division; 2**-40 is 2**13 float64
#: roundings, more than any of them takes.
FLOAT64_SLACK = 2.0**-40


def _columns(names: str | tuple[str, ...]) -> tuple[str, ...]:
    return (names,) if isinstance(names, str) else tuple(names)


@dataclass(frozen=True)
class Same:
    """Equal, nulls where nulls (text, flags, structural counts, settings, values read
    from a file): the rule of every column that declares none."""

    says: ClassVar[str] = "equal: text, flags, structural counts, settings, values read from a file"

    kind: str = field(default="same", init=False)


@dataclass(frozen=True)
class RowStatistic:
    """A mean over rows of float32 row statistics, each a sum over the row's keys, or a
    difference of such means: held to :func:`row_statistic_rounding` of the reference's
    row.

    Attributes
    ----------
    keys : str
        The column of the most keys a row of the mean sees (``n``).
    magnitude : tuple of str
        Columns whose absolute values are the magnitudes the statistic is computed from
        (both ends of a difference); empty: the statistic's own absolute value (a sum of
        non-negative terms: a sink mass, an entropy or one of its terms).
    """

    says: ClassVar[str] = "a mean of float32 row statistics over n keys, to u (n + 2) (M + log n)"

    keys: str = "n_keys"
    magnitude: tuple[str, ...] = ()
    kind: str = field(default="row statistic", init=False)


def row_statistic_rounding(n_keys: float, magnitude: float) -> float:
    """``u (n + 2) (M + log n)``: how far the float32 rounding of its rows' computation can
    move a mean of row statistics over ``n`` keys whose terms have magnitude ``M``
    (docs/design.md, "The same evidence, by one rule"): the sum over a row's keys
    accumulates ``(n + 2) u`` of what it adds, and the rows' rounded logs bring in
    ``u sum p |log p| = u H <= u log n``."""
    n = max(float(n_keys), 1.0)
    return FLOAT32_UNIT_ROUNDOFF * (n + 2.0) * (abs(magnitude) + math.log(n))


@dataclass(frozen=True)
class Stated:
    """A count, rate or interval end held to the bounds its reference row states in the
    columns ``bound`` (summed: a count good to its fragile ties plus its items at a bin
    edge), plus :data:`FLOAT64_SLACK` of a float value; anything where the reference's flag
    ``edge`` is set (what the value is made of may differ: a top-k choice on a near-tie)."""

    says: ClassVar[str] = "a count, rate or interval end, to the bounds its row states"

    bound: str | tuple[str, ...]
    edge: str | None = None
    kind: str = field(default="stated", init=False)

    @property
    def bounds(self) -> tuple[str, ...]:
        """The bound columns, as a tuple."""
        return _columns(self.bound)


@dataclass(frozen=True)
class Bound:
    """A stated bound: within :data:`BOUND_RTOL` of the reference's plus ``units`` units
    (:data:`BOUND_UNITS`), a unit being one (a count of items) or ``scale`` over the
    reference's column ``per`` (a rate over that count: ``scale`` 100 for a rate in
    percent). A bound in a float's own units, made of magnitudes rather than of counted
    items (a coordinate's rounding, a feature's), takes ``units=0``: its share of itself
    alone, since its magnitudes move by float rounding, far less than 1%. Anything where
    the reference's flag ``edge`` is set (what the bound is made of may differ)."""

    says: ClassVar[str] = "a stated bound, to 1% of the reference's plus 3 units"

    per: str | None = None
    scale: float = 1.0
    units: int = BOUND_UNITS
    edge: str | None = None
    kind: str = field(default="bound", init=False)


@dataclass(frozen=True)
class Exponent:
    """``x = exp(y)``, ``y`` a mean negative log-likelihood or a difference of two, or an
    order statistic of resampled ones: held to ``|x| expm1(b)``, ``b`` the reference's
    bound of ``y`` (nats; the columns ``bound`` summed); anything where the reference's flag
    ``edge`` is set."""

    says: ClassVar[str] = "a perplexity or ratio exp(y), to exp of the stated bound of y"

    bound: str | tuple[str, ...]
    edge: str | None = None
    kind: str = field(default="exponent", init=False)

    @property
    def bounds(self) -> tuple[str, ...]:
        """The bound columns, as a tuple."""
        return _columns(self.bound)


@dataclass(frozen=True)
class Share:
    """A ratio of ``numerators`` (each its own ratio: a lower and an upper end) over
    ``denominator``, held to ``(|d num| + |share| |d den|) / |den|``, its parts' own
    differences between the runs, plus :data:`FLOAT64_SLACK` of itself; anything where the
    reference's flag ``edge`` is set (a share measured on one run may be null on another
    where its denominator lies within rounding of its null bound)."""

    says: ClassVar[str] = "a share, through its numerator's and denominator's differences"

    numerators: tuple[str, ...]
    denominator: str
    edge: str | None = None
    kind: str = field(default="share", init=False)


@dataclass(frozen=True)
class Coordinates:
    """A coordinate whose point is ``(this, partner)`` in each group of rows with the same
    ``within`` values: held through the distances between the group's points, each within
    the largest value of the reference's column ``bound`` in the group."""

    says: ClassVar[str] = "MDS coordinates, through the distances between the points"

    partner: str
    bound: str
    within: tuple[str, ...] = ("model", "revision")
    kind: str = field(default="coordinates", init=False)


@dataclass(frozen=True)
class Labels:
    """Cluster labels, held through the partition of each group (rows with the same
    ``within`` values): the two runs' labels must map one to one, leaving out the rows
    whose reference flag ``edge`` is set (a point within rounding of two centres)."""

    says: ClassVar[str] = "k-means labels, through the partition they make, edge rows left out"

    within: tuple[str, ...] = ("model", "revision")
    edge: str | None = None
    kind: str = field(default="labels", init=False)


@dataclass(frozen=True)
class Verdict:
    """A verdict decided at a threshold (text or a flag): equal, except where the
    reference's flag ``edge`` is set (any of them, given several): its measured value lies
    within rounding of the threshold, and either side is the same evidence."""

    says: ClassVar[str] = "a verdict, equal unless its row states it is on the edge"

    edge: str | tuple[str, ...]
    kind: str = field(default="verdict", init=False)


#: One of the rules.
Held = Same | RowStatistic | Stated | Bound | Exponent | Share | Coordinates | Labels | Verdict
#: Every rule, for the command's help and the docs.
RULES: tuple[type[Held], ...] = (
    Same, RowStatistic, Stated, Bound, Exponent, Share, Coordinates, Labels, Verdict,
)  # fmt: skip


def held_by(rules: Mapping[str, Held], column: str) -> Held:
    """The rule of ``column``: the declared one, else :class:`Same`."""
    return rules.get(column, Same())
