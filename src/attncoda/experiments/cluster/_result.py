"""The result of the head-clustering pipeline and the tables a cluster unit stores
(docs/design.md, "The experiments").

:class:`ClusterResult` is what :func:`attncoda.experiments.cluster.cluster` returns;
:func:`result_tables` makes a run's tables of it (``cluster``, ``cluster_summary``,
``cluster_agreement``, ``cluster_distances``) and its JSON-safe summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
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
        ``sink_mass``, then ``x_<variant>``, ``y_<variant>`` (MDS coordinates, principal
        axes, signed as the notes of the pipeline module, ``_experiment``, say) and
        ``cluster_<variant>`` (k-means labels, numbered in order of first appearance along
        ``head_index``) for each variant.
    artifact : dict
        JSON-ready summary: ``spearman_axis1_vs_sink_mass`` and
        ``abs_spearman_axis1_vs_sink_mass`` per variant (``None`` where sink mass or the axis
        is constant), ``max_abs_spearman_any_direction_vs_sink_mass`` (the largest ``|rho|``
        over directions of the plane, since a bent embedding can hide a sink-mass gradient
        from axis 1), ``adjusted_rand`` per pair of variants (``"keep|drop"``, ...),
        ``mean_sink_share_of_aitchison_sq``, the settings and the ``convention_note``.
    distances : dict of str to ndarray, shape (head, head)
        The summed distance matrix of each variant (nats), the one MDS embeds; a run
        stores it as the table ``cluster_distances`` (:func:`distance_table`).
    """

    table: pd.DataFrame
    artifact: dict[str, Any]
    distances: dict[str, np.ndarray]


def result_tables(result: ClusterResult) -> Tables:
    """A cluster unit's :class:`Tables` from a :class:`ClusterResult`.

    Frames ``cluster`` (the per-head table), ``cluster_summary`` (one row per variant: the
    axis-1 and best-direction Spearman rho with head sink mass, whether the variant is
    degenerate, and the model's mean sink share of ``d_A^2``), ``cluster_agreement`` (the
    adjusted Rand index of every pair of variants) and ``cluster_distances`` (each
    variant's summed distance of every pair of heads, the matrix MDS embeds:
    :func:`distance_table`); the summary is the artifact with every non-finite float made
    ``None``.
    """
    import pandas as pd

    art = result.artifact
    summary = pd.DataFrame(
        {
            "variant": list(VARIANTS),
            "title": [VARIANT_TITLES[v] for v in VARIANTS],
            "spearman_axis1_vs_sink_mass": [
                art["spearman_axis1_vs_sink_mass"][v] for v in VARIANTS
            ],
            "max_abs_spearman_any_direction": [
                art["max_abs_spearman_any_direction_vs_sink_mass"][v] for v in VARIANTS
            ],
            "degenerate": [v in art["degenerate_variants"] for v in VARIANTS],
            "mean_sink_share_of_aitchison_sq": art["mean_sink_share_of_aitchison_sq"],
        }
    )
    for column in ("spearman_axis1_vs_sink_mass", "max_abs_spearman_any_direction"):
        summary[column] = summary[column].astype("float64")
    agreement = pd.DataFrame(
        [
            {"variant_a": key.split("|")[0], "variant_b": key.split("|")[1], "adjusted_rand": v}
            for key, v in art["adjusted_rand"].items()
        ]
    )
    return Tables(
        frames={
            "cluster": result.table,
            "cluster_summary": summary,
            "cluster_agreement": agreement,
            "cluster_distances": distance_table(art["model"], result.distances),
        },
        summary=_finite(art),
    )


def _finite(obj: Any) -> Any:
    """The artifact with every non-finite float made ``None`` (JSON has no NaN)."""
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
