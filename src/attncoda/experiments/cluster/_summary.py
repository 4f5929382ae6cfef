"""What ``attncoda cluster`` prints: Spearman ρ per variant, agreement and the sink share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """Per model: the Spearman ρ of MDS axis 1 with head sink mass per variant, the adjusted
    Rand index of keep's and drop's clusters, and the sink term's mean share of d_A²."""
    summary_table, agreement = tables["cluster_summary"], tables["cluster_agreement"]
    lines = []
    for model, part in summary_table.groupby("model", sort=False):
        lines.append(f"{model}: Spearman rho of MDS axis 1 with head sink mass, per variant:")
        for row in part.itertuples(index=False):
            rho = row.spearman_axis1_vs_sink_mass
            lines.append(f"  {row.variant:<18} {'n/a' if rho != rho else f'{rho:+.3f}'}")
        pairs = agreement[
            (agreement["model"] == model)
            & (agreement["variant_a"] == "keep")
            & (agreement["variant_b"] == "drop")
        ]
        ari = float(pairs["adjusted_rand"].iloc[0]) if len(pairs) else float("nan")
        lines.append(f"adjusted Rand index of the k-means clusters, keep vs drop: {ari:.3f}")
        share = float(part["mean_sink_share_of_aitchison_sq"].iloc[0])
        lines.append(f"mean share of pairwise d_A^2 that is the sink term: {share:.3f}")
    return "\n".join(lines)
