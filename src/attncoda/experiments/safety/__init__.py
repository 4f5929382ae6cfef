"""safety: flip rates binned by the sink share of ``d_A^2`` and the sink-mass gap, and the
regions where keep and drop agree (docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`safety_map` and
:class:`SafetyResult`, the squared split of head distances (:class:`SquaredSplit`,
:func:`mean_squared_split`, :func:`triplet_coordinates`) and the safe regions
(:func:`safe_regions`).

Modules: ``_experiment`` (the declaration), ``_map`` (the binned map), ``_bins`` (bin
edges, the cell of each triplet, each cell's ties, flips, fragile triplets and verdict),
``_edges`` (the triplets within rounding of a bin edge), ``_split`` (the squared Aitchison
split per head pair, the coordinates and their rounding), ``_held`` (how the tables are
compared), ``_regions`` (safe cells and their bounds). They may import
:mod:`attncoda.coda`, :mod:`attncoda.experiments.contract` and the flips package; nothing
above the experiments.
"""

from __future__ import annotations

from attncoda.experiments.contract import flip_rate_interval
from attncoda.experiments.safety._experiment import (
    DEFAULT_SAFE_THRESHOLD,
    EXPERIMENT,
    GRID_COLUMNS,
    SAFETY_COLUMNS,
    SafetyResult,
    Settings,
    safety_map,
)
from attncoda.experiments.safety._regions import (
    REGION_COLUMNS,
    safe_regions,
)
from attncoda.experiments.safety._split import (
    SquaredSplit,
    mean_squared_split,
    triplet_coordinates,
)

__all__ = [
    "DEFAULT_SAFE_THRESHOLD",
    "EXPERIMENT",
    "GRID_COLUMNS",
    "REGION_COLUMNS",
    "SAFETY_COLUMNS",
    "SafetyResult",
    "Settings",
    "SquaredSplit",
    "flip_rate_interval",
    "mean_squared_split",
    "safe_regions",
    "safety_map",
    "triplet_coordinates",
]
