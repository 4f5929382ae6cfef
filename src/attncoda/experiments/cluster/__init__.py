"""cluster: Clark et al.'s head clustering under keep, drop and the Aitchison terms
(docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`cluster` and
:class:`ClusterResult`, the four :data:`VARIANTS`, the smoothed per-document distance terms
(:func:`document_terms`, :func:`used_row_mask`, :data:`SMOOTHING`), what rounding can move
them by (:func:`rounding_sums`) and the tidy table of the summed distances
(:func:`distance_table`, the run's ``cluster_distances``).

Modules: ``_experiment`` (the pipeline and its measures of the artifact), ``_result`` (its
result and the tables a run stores of it), ``_distances`` (the variants, per-document JS and
Aitchison terms and their rounding, the table of the summed distances), ``_embedding``
(metric MDS, k-means and the rank correlations of an embedding), ``_fit`` (one variant's
embedding, labels and correlations with what rounding leaves open of them),
``_point_rounding`` (how far rounding moves the embedding's points and the labels' edges),
``_summary_rounding`` (the rank statistics, the adjusted Rand index, the sink share) and
``_held`` (how a comparison holds each column).
They may import :mod:`attncoda.coda`, :mod:`attncoda.experiments.contract` and each other;
nothing above the experiments.
"""

from __future__ import annotations

from attncoda.experiments.cluster._distances import (
    SMOOTHING,
    VARIANT_TITLES,
    VARIANTS,
    distance_table,
    document_terms,
    rounding_sums,
    used_row_mask,
)
from attncoda.experiments.cluster._experiment import EXPERIMENT, Settings, cluster
from attncoda.experiments.cluster._result import ClusterResult, result_tables

__all__ = [
    "ClusterResult",
    "EXPERIMENT",
    "SMOOTHING",
    "Settings",
    "VARIANTS",
    "VARIANT_TITLES",
    "cluster",
    "distance_table",
    "document_terms",
    "result_tables",
    "rounding_sums",
    "used_row_mask",
]
