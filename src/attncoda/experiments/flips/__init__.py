"""flips: the keep vs drop triplet verdicts and their flip rates (docs/design.md, "The
experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`flips` and
:class:`FlipsResult`, the exact triplet count (:func:`triplet_flips`, :class:`TripletFlips`,
:func:`tie_tolerance`), the per-document distance sums (:func:`document_sums`,
:class:`DocumentSums`, :func:`used_rows`) and the bootstrap over documents
(:func:`bootstrap_rates`).

Modules: ``_experiment`` (the declaration and its run), ``_sums`` (row distances summed per
document), ``_count`` (exact flip and tie counts by sorting), ``_bootstrap`` (resampled
rates). They may import :mod:`attncoda.coda`, :mod:`attncoda.experiments.contract` and each
other; nothing above the experiments.
"""

from __future__ import annotations

from attncoda.experiments.contract import CONVENTIONS, DEFAULT_TOL, FLIP_METRICS
from attncoda.experiments.flips._bootstrap import (
    bootstrap_rates,
    check_n_boot,
    check_threads,
    resample_weights,
)
from attncoda.experiments.flips._count import (
    TripletFlips,
    count_inversions,
    count_rows,
    off_diagonal,
    tie_tolerance,
    triplet_flips,
)
from attncoda.experiments.flips._experiment import (
    BY_LAYER_COLUMNS,
    CAPTURE_TOL,
    EXPERIMENT,
    TABLE_COLUMNS,
    FlipsResult,
    Settings,
    flips,
)
from attncoda.experiments.flips._sums import (
    DocumentSums,
    document_sums,
    used_rows,
)

__all__ = [
    "BY_LAYER_COLUMNS",
    "CAPTURE_TOL",
    "CONVENTIONS",
    "DEFAULT_TOL",
    "DocumentSums",
    "EXPERIMENT",
    "FLIP_METRICS",
    "FlipsResult",
    "Settings",
    "TABLE_COLUMNS",
    "TripletFlips",
    "bootstrap_rates",
    "check_n_boot",
    "check_threads",
    "count_inversions",
    "count_rows",
    "document_sums",
    "flips",
    "off_diagonal",
    "resample_weights",
    "tie_tolerance",
    "triplet_flips",
    "used_rows",
]
