"""The result of the head-clustering pipeline and the tables a cluster unit stores
(docs/design.md, "The experiments").

:class:`ClusterResult` is what :func:`attncoda.experiments.cluster.cluster` returns;
:func:`result_tables` makes a run's tables of it (``cluster``, ``cluster_summary``,
``cluster_agreement``, ``cluster_distances``) and its JSON-safe summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda.experiments.cluster._distances import VARIANT_TITLES, VARIANTS, distance_table
from attncoda.experiments.contract import Tables

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ClusterResult", "result_tables"]


@dataclass(frozen=True)
class ClusterResult:
    """The clustering of one model's heads under the four variants.

    Attributes
    ----------
    table : pandas.DataFrame
        One row per head: ``model``, ``head_index`` (layer-major), ``layer``, ``head``,
        ``n_keys`` (int64: the most keys a row of the windows sees, the ``n`` of the sink
        mass's rounding), ``n_rows`` (int64: the used rows the distances sum over),
        ``sink_mass``, then per variant ``x_<variant>``, ``y_<variant>``
        (MDS coordinates, principal axes, signed as the notes of the pipeline module,
        ``_experiment``, say), ``cluster_<variant>`` (k-means labels, numbered in order of
        first appearance along ``head_index``), ``distance_rounding_<variant>`` (float64,
        nats: how far the distance from this head's point to any other can move under the
        distances' float32 rounding, the MDS fit's response plus one more SMACOF iteration;
        docs/design.md, "Verdicts and ratios within rounding") and ``edge_<variant>`` (bool:
        the head's point lies within that rounding of equidistant from its two nearest
        k-means centres, so its label may differ between two runs).
    artifact : dict
        JSON-ready summary: ``spearman_axis1_vs_sink_mass`` and
        ``abs_spearman_axis1_vs_sink_mass`` per variant (``None`` where sink mass or the axis
        is constant), ``max_abs_spearman_any_direction_vs_sink_mass`` (the largest ``|rho|``
        over directions of the plane, since a bent embedding can hide a sink-mass gradient
        from axis 1), ``adjusted_rand`` per pair of variants (``"keep|drop"``, ...),
        ``mean_sink_share_of_aitchison_sq``, ``rounding`` (what rounding can move each of
        them, the parts of the bounds and the edges), the settings and the
        ``convention_note``.
    distances : dict of str to ndarray, shape (head, head)
        The summed distance matrix of each variant (nats), the one MDS embeds; a run
        stores it as the table ``cluster_distances`` (:func:`distance_table`).
    rounding : dict of str to ndarray, shape (head, head)
        The rounding bound of each variant's summed distances (nats): how far the float32
        rounding of the logs can move each (``cluster_distances``' ``distance_rounding``).
    """

    table: pd.DataFrame
    artifact: dict[str, Any]
    distances: dict[str, np.ndarray]
    rounding: dict[str, np.ndarray] = field(default_factory=dict)


def result_tables(result: ClusterResult) -> Tables:
    """A cluster unit's :class:`Tables` from a :class:`ClusterResult`.

    Frames ``cluster`` (the per-head table), ``cluster_summary``, ``cluster_agreement`` and
    ``cluster_distances`` (each variant's summed distance of every pair of heads, the matrix
    MDS embeds, with its rounding: :func:`distance_table`); the summary is the artifact with
    every non-finite float made ``None``.

    ``cluster_summary`` has one row per variant: ``variant``, ``title``, ``n_heads`` and
    ``n_head_pairs`` (int64), ``spearman_axis1_vs_sink_mass`` and
    ``max_abs_spearman_any_direction`` (float64, null where undefined) each beside its
    rounding ``spearman_axis1_rounding`` and ``max_abs_spearman_rounding`` (how far the heads
    whose values lie within rounding of each other can move it by swapping ranks, and for
    axis 1 by signing the axis the other way), ``n_near_ties`` (int64: the pairs of heads
    near-tied in sink mass or on axis 1), ``degenerate`` (bool: all distances below the zero
    threshold, not embedded) and ``degenerate_edge`` (bool: the largest distance lies within
    its rounding of that threshold, so either verdict is the same evidence), and the
    model's ``mean_sink_share_of_aitchison_sq`` with its ``mean_sink_share_rounding``.

    ``cluster_agreement`` has one row per pair of variants: ``variant_a``, ``variant_b``,
    ``n_heads``, ``adjusted_rand`` and ``adjusted_rand_rounding`` (how far it moves when the
    edge heads of the two labellings take their second-nearest cluster), and
    ``n_edge_heads`` (int64: edge heads of the two labellings together).
    """
    art = result.artifact
    heads = int(art.get("n_heads", len(result.table)))
    return Tables(
        frames={
            "cluster": result.table,
            "cluster_summary": _summary_frame(art, heads),
            "cluster_agreement": _agreement_frame(art, heads),
            "cluster_distances": distance_table(
                art["model"],
                result.distances,
                result.rounding or None,
                n_rows=int(art.get("n_rows_used", 0)),
            ),
        },
        summary=_finite(art),
    )


def _summary_frame(art: dict[str, Any], heads: int) -> pd.DataFrame:
    """``cluster_summary`` (:func:`result_tables`): one row per variant, from the artifact."""
    import pandas as pd

    rounding = art.get("rounding", {})

    def per_variant(name: str) -> list[Any]:
        return [rounding.get(name, {}).get(v) for v in VARIANTS]

    summary = pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "title": [VARIANT_TITLES[v] for v in VARIANTS],
            "n_heads": np.full(len(VARIANTS), heads, dtype=np.int64),
            "n_head_pairs": np.full(len(VARIANTS), heads * (heads - 1) // 2, dtype=np.int64),
            "spearman_axis1_vs_sink_mass": [
                art["spearman_axis1_vs_sink_mass"][v] for v in VARIANTS
            ],
            "spearman_axis1_rounding": per_variant("spearman_axis1"),
            "max_abs_spearman_any_direction": [
                art["max_abs_spearman_any_direction_vs_sink_mass"][v] for v in VARIANTS
            ],
            "max_abs_spearman_rounding": per_variant("max_abs_spearman"),
            "n_near_ties": np.asarray(
                [rounding.get("n_near_ties", {}).get(v, 0) for v in VARIANTS], dtype=np.int64
            ),
            "degenerate": [v in art["degenerate_variants"] for v in VARIANTS],
            "degenerate_edge": [
                bool(rounding.get("degenerate_edge", {}).get(v, False)) for v in VARIANTS
            ],
            "mean_sink_share_of_aitchison_sq": art["mean_sink_share_of_aitchison_sq"],
            "mean_sink_share_rounding": rounding.get("mean_sink_share"),
        }
    )
    for column in (
        "spearman_axis1_vs_sink_mass",
        "spearman_axis1_rounding",
        "max_abs_spearman_any_direction",
        "max_abs_spearman_rounding",
        "mean_sink_share_of_aitchison_sq",
        "mean_sink_share_rounding",
    ):
        summary[column] = summary[column].astype("float64")
    return summary


def _agreement_frame(art: dict[str, Any], heads: int) -> pd.DataFrame:
    """``cluster_agreement`` (:func:`result_tables`): one row per pair of variants."""
    import pandas as pd

    rounding = art.get("rounding", {})
    agreement = pd.DataFrame(
        [
            {
                "variant_a": key.split("|")[0],
                "variant_b": key.split("|")[1],
                "n_heads": heads,
                "adjusted_rand": v,
                "adjusted_rand_rounding": rounding.get("adjusted_rand", {}).get(key, 0.0),
                "n_edge_heads": rounding.get("adjusted_rand_edge_heads", {}).get(key, 0),
            }
            for key, v in art["adjusted_rand"].items()
        ]
    )
    for column, dtype in (
        ("n_heads", "int64"),
        ("adjusted_rand", "float64"),
        ("adjusted_rand_rounding", "float64"),
        ("n_edge_heads", "int64"),
    ):
        if column in agreement.columns:
            agreement[column] = agreement[column].astype(dtype)
    return agreement


def _finite(obj: Any) -> Any:
    """The artifact with every non-finite float made ``None`` (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
