"""flips: the keep vs drop triplet verdicts and their flip rates (docs/design.md, "The
experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`flips` and
:class:`FlipsResult`, the exact triplet count (:func:`triplet_flips`, :class:`TripletFlips`,
:func:`tie_tolerance`, :func:`fragile_band`), the per-document distance sums
(:func:`document_sums`, :class:`DocumentSums`, :func:`used_rows`, :func:`entropy_sums`) and
their rounding (:func:`distance_rounding`, :data:`METRIC_ROUNDING`), and the bootstrap over
documents (:func:`bootstrap_rates`, :func:`rate_rounding`, :func:`interval_rounding`).

Modules: ``_experiment`` (the declaration and its run), ``_result`` (the result and its
tables), ``_sums`` (row distances summed per document), ``_count`` (exact flip and tie
counts by sorting), ``_bootstrap`` (resampled rates). They may import :mod:`attncoda.coda`,
:mod:`attncoda.experiments.contract` and each other; nothing above the experiments.
"""

from __future__ import annotations

from attncoda.experiments.contract import CONVENTIONS, DEFAULT_TOL, FLIP_METRICS
from attncoda.experiments.flips._bootstrap import (
    bootstrap_rates,
    check_n_boot,
    check_threads,
    interval_rounding,
    rate_rounding,
    resample_weights,
)
from attncoda.experiments.flips._count import (
    TripletFlips,
    count_inversions,
    count_rows,
    fragile_band,
    off_diagonal,
    tie_tolerance,
    triplet_flips,
)
from attncoda.experiments.flips._experiment import (
    CAPTURE_TOL,
    EXPERIMENT,
    Settings,
    flips,
)
from attncoda.experiments.flips._result import BY_LAYER_COLUMNS, TABLE_COLUMNS, FlipsResult
from attncoda.experiments.flips._sums import (
    METRIC_ROUNDING,
    DocumentSums,
    distance_rounding,
    document_sums,
    entropy_sums,
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
    "METRIC_ROUNDING",
    "Settings",
    "TABLE_COLUMNS",
    "TripletFlips",
    "bootstrap_rates",
    "check_n_boot",
    "check_threads",
    "count_inversions",
    "count_rows",
    "distance_rounding",
    "document_sums",
    "entropy_sums",
    "flips",
    "fragile_band",
    "interval_rounding",
    "off_diagonal",
    "rate_rounding",
    "resample_weights",
    "tie_tolerance",
    "triplet_flips",
    "used_rows",
]
