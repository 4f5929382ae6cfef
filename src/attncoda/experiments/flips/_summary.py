"""What ``attncoda flips`` prints: each model's flip rate per metric with its interval."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def _rounding(row: Any) -> str:
    k = getattr(row, "n_fragile", 0)
    if not k or k != k:
        return ""
    return f"; ±{row.rate_rounding:.2%} by rounding ({k} at the tie edge)"


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """One line per model and metric: the flip rate keep vs drop, its percentile bootstrap
    interval over documents (or why there is none), the triplets decided and tied, and how
    far float32 rounding can move the rate (the triplets at the tie edge)."""
    lines = [
        "flip rate of 'which head is closer' verdicts, keep vs drop (95% percentile bootstrap "
        "interval over documents, or why there is none):"
    ]
    for row in tables["flips"].itertuples(index=False):
        ci = row.ci_note or f"[{row.ci_low:6.1%}, {row.ci_high:6.1%}] of {row.n_boot} resamples"
        lines.append(
            f"  {row.model:<24} {row.metric:<12} {row.flip_rate:6.1%}  {ci}, {row.n_docs} "
            f"documents; {row.n_triplets - row.n_ties} decided triplets ({row.n_ties} ties)"
            + _rounding(row)
        )
    return "\n".join(lines)
