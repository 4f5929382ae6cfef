"""How each column of a table is held when two runs are compared: one rule per kind of
column (docs/design.md, "The same evidence, by one rule").

Two runs of the same command agree when every cell of every table lies within what its
column can hold between two roundings (two CPUs, a CPU and a GPU, the exact and the fast
path). A column is held by one of these rules, declared by the experiment that makes the
table (:attr:`attncoda.experiments.contract.Experiment.held`), or by its type:

- :class:`Same`: equal, nulls where nulls (text, flags, structural counts: the default of a
  column that is not a float);
- :class:`Rounding`: a float within ``ATOL + RTOL max(|a|, |b|)``, the float32 rounding of
  the row statistics it is computed from (the default of a float column);
- :class:`Stated`: a count or rate within the rounding bound its row states (flips' count
  of fragile triplets, a rate's ``rate_rounding``), the larger of the two runs' bounds, on
  top of :class:`Rounding`;
- :class:`Bound`: a stated bound itself, within ``BOUND_RTOL`` of itself plus
  ``BOUND_UNITS`` triplets, so that a bound one run inflates fails;
- :class:`Share`: a ratio within what its numerator's and denominator's own differences
  make of it, to first order, on top of :class:`Rounding`;
- :class:`Coordinates`: coordinates defined up to a rotation or reflection (metric MDS),
  through the distances between the points of a group, which define them;
- :class:`Labels`: cluster labels, through the partition they make of a group (labels are
  names: swapping two is the same clustering).

:func:`attncoda.experiments.contract._frames.compare_frames` applies them to two frames of
one table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ATOL",
    "BOUND_RTOL",
    "BOUND_UNITS",
    "RTOL",
    "Bound",
    "Coordinates",
    "Held",
    "Labels",
    "Rounding",
    "Same",
    "Share",
    "Stated",
    "held_by",
]

#: A float column's relative allowance. Every float of a table is a mean, sum or
#: difference of float32 row statistics (sink mass, entropies, log-probabilities, in nats):
#: each statistic carries up to ``n u`` of its size over its ``n`` keys (``u = 2**-24``),
#: which two computations need not share; over n <= 128 keys of values up to ~10 that is
#: ~1e-4 in the worst case and ~sqrt(n) u 10 ~ 1e-5 typically, and the means over rows and
#: heads shrink it further (docs/design.md, "The same evidence, by one rule").
RTOL = 1e-5
#: And absolute, for a value near zero that is a difference of such statistics (a bin edge
#: of a sink-mass gap, a change of entropy), in the value's own units (nats, a fraction).
ATOL = 1e-5
#: A stated bound is held to this share of itself: a count of fragile triplets moves
#: between two roundings by the triplets whose distance gap lies within the actual rounding
#: of the band's edge, at most ~0.25% of them (the distances of two kernels differ by at
#: most 1.2e-3 of their stated bound, docs/design.md); four times that.
BOUND_RTOL = 0.01
#: Plus this many triplets (a rate's unit is one triplet of its ``per`` count): a handful
#: of fragile triplets changes between two CPUs (3 measured between an Intel Xeon and an AMD
#: EPYC on the demo's models).
BOUND_UNITS = 3


@dataclass(frozen=True)
class Same:
    """Equal: text, flags and structural counts (the default of a non-float column)."""

    kind: str = field(default="same", init=False)


@dataclass(frozen=True)
class Rounding:
    """A float within ``atol + rtol max(|a|, |b|)`` (the default of a float column)."""

    rtol: float = RTOL
    atol: float = ATOL
    kind: str = field(default="rounding", init=False)


@dataclass(frozen=True)
class Stated:
    """A count or rate held to the rounding bound its row states in the column ``bound``
    (the larger of the two runs'), on top of :class:`Rounding`."""

    bound: str
    kind: str = field(default="stated", init=False)


@dataclass(frozen=True)
class Bound:
    """A stated bound: within :data:`BOUND_RTOL` of itself plus :data:`BOUND_UNITS` units,
    a unit being one (a count) or one over the column ``per`` (a rate over that count)."""

    per: str | None = None
    kind: str = field(default="bound", init=False)


@dataclass(frozen=True)
class Share:
    """A ratio of ``numerators`` (each its own ratio: a lower and an upper end) over
    ``denominator``, held to ``(|d num| + |share| |d den|) / |den|`` on top of
    :class:`Rounding`, its parts' own differences between the runs."""

    numerators: tuple[str, ...]
    denominator: str
    kind: str = field(default="share", init=False)


@dataclass(frozen=True)
class Coordinates:
    """A coordinate whose point is ``(this, partner)`` in each group of rows with the same
    ``within`` values: held through the distances between the group's points, each within
    :class:`Rounding` of the group's largest distance."""

    partner: str
    within: tuple[str, ...] = ("model", "revision")
    kind: str = field(default="coordinates", init=False)


@dataclass(frozen=True)
class Labels:
    """Cluster labels, held through the partition of each group (rows with the same
    ``within`` values): the two runs' labels must map one to one."""

    within: tuple[str, ...] = ("model", "revision")
    kind: str = field(default="labels", init=False)


#: One of the rules.
Held = Same | Rounding | Stated | Bound | Share | Coordinates | Labels


def held_by(rules: Mapping[str, Held], column: str, dtype: Any) -> Held:
    """The rule of ``column``: the declared one, else :class:`Rounding` for a float
    column and :class:`Same` for any other."""
    import pandas as pd

    if column in rules:
        return rules[column]
    if pd.api.types.is_float_dtype(dtype):
        return Rounding()
    return Same()
