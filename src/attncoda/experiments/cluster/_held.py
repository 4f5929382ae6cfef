"""How cluster's tables are held when two runs are compared (docs/design.md, "The same
evidence, by one rule"): each result to what its reference row states rounding can move it
(``_point_rounding``, ``_summary_rounding``), the bounds themselves to their own rule."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.cluster._distances import VARIANTS
from attncoda.experiments.contract import (
    Bound,
    Coordinates,
    Held,
    Labels,
    RowStatistic,
    Stated,
    Verdict,
)

__all__ = ["HELD"]

_HEADS: dict[str, Held] = {
    "sink_mass": RowStatistic(),
    # MDS coordinates are defined up to a rotation or reflection: held through the distances
    # between the heads' points, to the largest move the reference states of them.
    **{
        f"{axis}_{variant}": Coordinates(f"{other}_{variant}", f"distance_rounding_{variant}")
        for variant in VARIANTS
        for axis, other in (("x", "y"), ("y", "x"))
    },
    # k-means labels through the partition they make, the heads on an edge left out.
    **{f"cluster_{variant}": Labels(edge=f"edge_{variant}") for variant in VARIANTS},
    # A continuous bound: no count moves it, so no unit is its own. The closest rule is a
    # Bound whose unit, 1/n_rows nats (5e-4 on the demo), is a three-hundredth of the
    # smallest per-head bound the demo's models state (0.15 nats).
    **{f"distance_rounding_{variant}": Bound(units=0) for variant in VARIANTS},
}

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "cluster": _HEADS,
    "cluster_summary": {
        # A variant on its degenerate edge may be embedded on one run and not on the other.
        "spearman_axis1_vs_sink_mass": Stated("spearman_axis1_rounding", edge="degenerate_edge"),
        "max_abs_spearman_any_direction": Stated(
            "max_abs_spearman_rounding", edge="degenerate_edge"
        ),
        # A near-tied pair of typical ranks moves rho by about 3 / n_head_pairs.
        "spearman_axis1_rounding": Bound(per="n_head_pairs"),
        "max_abs_spearman_rounding": Bound(per="n_head_pairs"),
        "n_near_ties": Bound(),
        "degenerate": Verdict("degenerate_edge"),
        "mean_sink_share_of_aitchison_sq": Stated("mean_sink_share_rounding"),
        # Continuous too; one pair's weight in the mean, 1/n_head_pairs, is the closest unit,
        # though larger than the bound itself on the demo (3e-6 to 5e-6): held loosely.
        "mean_sink_share_rounding": Bound(units=0),
    },
    "cluster_agreement": {
        "adjusted_rand": Stated("adjusted_rand_rounding"),
        # One edge head moving changes the index by about 1 / n_heads.
        "adjusted_rand_rounding": Bound(per="n_heads"),
        "n_edge_heads": Bound(),
    },
    "cluster_distances": {
        "distance": Stated("distance_rounding"),
        # As the cluster table's; a pair of two nearly pure sink heads states less than the
        # unit (SmolLM2 under keep: 1.4e-4 nats), and is held loosely.
        "distance_rounding": Bound(units=0),
    },
}
