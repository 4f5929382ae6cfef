"""What ``attncoda prune`` prints: the unpruned perplexity and each line's worst ratio."""

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
    """Per model: the unpruned perplexity on the evaluation windows (and how far rounding can
    move its mean NLL), then per ablation, channel and order the worst perplexity ratio, its
    k and its paired bootstrap interval (or why there is none), with the chosen heads' edge
    where they lie within rounding of their cut, and how many rows do."""
    lines = []
    for _, table in tables["prune"].groupby(["model", "revision"], sort=False):
        base = table[table["k"] == 0]
        if len(base):
            rounding = (
                f" (its mean NLL good to {float(base['nll_rounding'].iloc[0]):.2g} nats)"
                if "nll_rounding" in base
                else ""
            )
            lines.append(
                f"unpruned perplexity: {float(base['perplexity'].iloc[0]):.3f} on "
                f"{int(base['n_windows'].iloc[0])} windows{rounding}; each ratio's 95% interval "
                "is a paired percentile bootstrap over them"
            )
        pruned = table[table["k"] > 0]
        for key, group in pruned.groupby(["ablation", "channel", "order"], sort=True):
            worst = group.loc[group["ratio"].idxmax()]
            ci = worst["ci_note"] or (
                f"[{worst['ratio_ci_low']:.2f}, {worst['ratio_ci_high']:.2f}] of "
                f"{int(worst['n_boot'])} resamples"
            )
            edge = (
                f"  heads on the edge: {int(worst['n_fragile_heads'])} within rounding of the cut"
                if bool(worst.get("heads_edge", False))
                else ""
            )
            lines.append(
                f"  {key[0]:<8} {key[1]:<16} {key[2]:<5} worst ratio {worst['ratio']:9.2f} "
                f"at k={int(worst['k'])}  {ci}{edge}"
            )
        if "heads_edge" in pruned and pruned["heads_edge"].any():
            lines.append(
                f"  {int(pruned['heads_edge'].sum())} of {len(pruned)} rows choose heads within "
                "rounding of their cut: another machine may prune other heads there"
            )
    return "\n".join(lines)
