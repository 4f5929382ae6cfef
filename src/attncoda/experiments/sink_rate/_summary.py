"""What ``attncoda sink-rate`` prints: each model's sink rate per position."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def _rounding(row: Any) -> str:
    """``; k within rounding of epsilon (±x points)`` (nothing for a table made before the
    columns were, or a position no window reaches)."""
    k = getattr(row, "n_fragile", None)
    if k is None or row.n_triples == 0:
        return ""
    return f"; {k} within rounding of epsilon (±{row.rate_rounding:.2g} points)"


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """One line per model and position: the sink rate (percent of (window, layer, head)
    triples whose score exceeds ε), how many triples it counts, and how many of them lie
    within float32 rounding of ε (``n_fragile``: above it on one run, not on another) with
    how far they can move the rate."""
    lines = [
        "sink rate (Gu et al. 2025): % of (window, layer, head) triples in which the key at "
        "the position receives more than epsilon of its queries' attention:"
    ]
    for row in tables["sink_rate"].itertuples(index=False):
        rate = "n/a (no window that long)" if row.n_triples == 0 else f"{row.sink_rate:5.1f}%"
        lines.append(
            f"  {row.model:<24} position {row.position:<3} epsilon {row.epsilon:g}  {rate} "
            f"of {row.n_triples} triples ({row.n_windows} windows x {row.n_heads} heads)"
            + _rounding(row)
        )
    return "\n".join(lines)
