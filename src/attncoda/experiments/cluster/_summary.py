"""What ``attncoda cluster`` prints: Spearman ρ per variant, agreement and the sink share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def _within(row: Any, column: str, spec: str = ".3f") -> str:
    """`` ±x`` from the row's rounding ``column``, nothing where it is 0 or missing."""
    bound = getattr(row, column, None)
    if bound is None or bound != bound or not bound:
        return ""
    return f" ±{bound:{spec}}"


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """Per model: the Spearman ρ of MDS axis 1 with head sink mass per variant, the adjusted
    Rand index of keep's and drop's clusters, and the sink term's mean share of d_A², each
    with how far float32 rounding can move it; a variant whose every distance lies within
    rounding of the zero threshold is said to be on its edge instead of embedded or not."""
    summary_table, agreement = tables["cluster_summary"], tables["cluster_agreement"]
    heads = tables.get("cluster")
    lines = []
    for model, part in summary_table.groupby("model", sort=False):
        lines.append(f"{model}: Spearman rho of MDS axis 1 with head sink mass, per variant:")
        for row in part.itertuples(index=False):
            rho = row.spearman_axis1_vs_sink_mass
            text = "n/a" if rho != rho else f"{rho:+.3f}{_within(row, 'spearman_axis1_rounding')}"
            if bool(getattr(row, "degenerate_edge", False)):
                text += " (all distances within rounding of 0: on the edge of not embedded)"
            edge = f"edge_{row.variant}"
            if heads is not None and edge in heads.columns:
                k = int(heads.loc[heads["model"] == model, edge].sum())
                if k:
                    text += f"; {k} head(s) on a k-means edge"
            lines.append(f"  {row.variant:<18} {text}")
        pairs = agreement[
            (agreement["model"] == model)
            & (agreement["variant_a"] == "keep")
            & (agreement["variant_b"] == "drop")
        ]
        if len(pairs):
            pair = next(pairs.itertuples(index=False))
            ari = f"{float(pair.adjusted_rand):.3f}{_within(pair, 'adjusted_rand_rounding')}"
        else:
            ari = "nan"
        lines.append(f"adjusted Rand index of the k-means clusters, keep vs drop: {ari}")
        first = next(part.itertuples(index=False))
        share = float(first.mean_sink_share_of_aitchison_sq)
        lines.append(
            f"mean share of pairwise d_A^2 that is the sink term: {share:.3f}"
            + _within(first, "mean_sink_share_rounding", ".1e")
        )
    return "\n".join(lines)
