r"""Safety map: where the keep / drop choice flips verdicts, and where it is safe
(docs/design.md, "The experiments").

Every triplet ``(A; B, C)`` of :mod:`attncoda.experiments.flips` gets two coordinates:

- **sink share** — how much of the Aitchison geometry of the triplet is the sink:

  .. math:: \sigma(A; B, C) = \frac{S(A, B) + S(A, C)}{T(A, B) + T(A, C)}

  with ``T(A, B)`` the mean over used rows of ``d_A(p_A, p_B)^2`` and ``S(A, B)`` the mean of
  the sink term ``(b_A - b_B)^2`` (``b`` the sink balance), both in nats². It lies in
  ``[0, 1]`` (the split is orthogonal); a triplet whose three heads have identical rows
  (``T = 0``) gets share 0.
- **sink-mass gap** — ``|s_B - s_C|``, the difference of the mean sink masses
  (``HeadRows.sink_mass``) of the two heads being ranked.

Triplets are binned on each coordinate (quantile bins over all triplets by default, or fixed
edges), and the flip rate of keep vs drop is reported per bin and per cell of both binnings.

**Where it is safe.** Each bin and cell carries the two-sided 95% Clopper-Pearson interval
of its flip rate (flips among the decided triplets), and names it: ``ci_method`` is
``"Clopper-Pearson over triplets"`` and ``n_decided`` its n. A bin or cell is **safe** when
the upper end of that interval lies below ``threshold`` (default 5%): there, keep and drop
agree on at least ``1 - threshold`` of the verdicts with 95% confidence. The interval treats
triplets as independent draws; triplets that share heads and documents are not, so it is the
narrowest honest interval, not a conservative one. :func:`safe_regions` turns the bins into
a statement per model: the run of safe bins from the lowest value up ("when the sink-mass
gap between the two heads is below 0.03, keep and drop agree on >= 95% of verdicts"), or
that no bin is safe.

**What rounding leaves open.** Every count is decided at a threshold: a tie at the tie
tolerance, a bin at its edges. Each row states how far rounding can move it (docs/design.md,
"Verdicts and ratios within rounding"): ``n_fragile``, its triplets within rounding of the
tie edge (flips' definition, from the distances' stated rounding); ``n_edge``, its triplets
whose coordinate lies within rounding of an interior edge bounding it (inside, or in the
neighbour that could move in), from the coordinates' rounding (:func:`triplet_rounding`)
and the edges' own (``bin_rounding``); ``rate_rounding`` and ``ci_rounding``, how far the
rate and the interval's ends move when those triplets change; and ``safe_edge``, whether the
upper end lies within ``ci_rounding`` of the threshold, where ``safe`` is decided by
rounding and the report says so instead of picking a side.
"""

from __future__ import annotations

from dataclasses import dataclass

from attncoda.experiments.contract import (
    Command,
    Experiment,
    Inputs,
    Tables,
    View,
    setting,
)
from attncoda.experiments.flips import FlipsResult
from attncoda.experiments.safety._figure import draw
from attncoda.experiments.safety._held import HELD
from attncoda.experiments.safety._map import (
    DEFAULT_SAFE_THRESHOLD,
    GRID_COLUMNS,
    SAFETY_COLUMNS,
    SafetyResult,
    safety_map,
)
from attncoda.experiments.safety._section import safety_section
from attncoda.experiments.safety._summary import summary

__all__ = [
    "DEFAULT_SAFE_THRESHOLD",
    "EXPERIMENT",
    "GRID_COLUMNS",
    "SAFETY_COLUMNS",
    "SafetyResult",
    "Settings",
    "safety_map",
]


@dataclass(frozen=True)
class Settings:
    """Settings of the safety experiment."""

    n_bins: int = setting(5, "quantile bins of sink share and of sink-mass gap", at_least=1)
    threshold: float = setting(
        DEFAULT_SAFE_THRESHOLD,
        "a bin is safe when the upper 95 percent bound of its flip rate is below this",
        above=0.0,
        at_most=1.0,
    )


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The safety map of the unit's recorded rows, from the head distances of its flips
    unit (same model and revision), for the metrics flips measured."""
    flips_result = FlipsResult.from_tables(inputs.model, inputs.tables_of("flips"))
    result = safety_map(
        inputs.rows,
        tuple(str(m) for m in flips_result.table["metric"]),
        flips_result=flips_result,
        n_bins=settings.n_bins,
        threshold=settings.threshold,
    )
    return Tables(frames={"safety": result.table, "safety_grid": result.grid})


EXPERIMENT = Experiment(
    name="safety",
    needs=("rows",),
    after=("flips",),
    cost=4.0,
    settings=Settings,
    run=run,
    tables=("safety", "safety_grid"),
    held=HELD,
    view=View(
        title="Safety map: where each convention is safe",
        needs=("safety",),
        section=safety_section,
        figure_tables=("safety_grid",),
        figure=draw,
    ),
    command=Command(
        help="flip rate by sink share and sink-mass gap",
        sources="models+",
        summary=summary,
        doc="The flip rate by sink share and sink-mass gap, and where keep and drop agree.",
        flags={"n_bins": ("--n-bins", "--bins"), "threshold": ("--threshold", "--safe-threshold")},
    ),
)
