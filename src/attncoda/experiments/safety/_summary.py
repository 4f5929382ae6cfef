"""What ``attncoda safety`` prints: the flip rate per bin and where each convention is safe."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attncoda.experiments.safety._regions import safe_regions

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """One line per model, metric and bin (flip rate, the upper end of its 95%
    Clopper-Pearson interval, SAFE where that is below the threshold, EDGE where it lies
    within rounding of it: safe or not by rounding), then each model's statement of where
    keep and drop agree."""
    table = tables["safety"]
    lines = [
        "flip rate per bin (upper end of its 95% Clopper-Pearson interval over the decided "
        "triplets, and their number; EDGE: that end within rounding of the threshold, safe "
        "or not by rounding):"
    ]
    for row in table.itertuples(index=False):
        if getattr(row, "safe_edge", False):
            verdict = f"  EDGE (within {row.ci_rounding:.2g} of {row.safe_threshold:.0%})"
        else:
            verdict = "  SAFE" if row.safe else ""
        lines.append(
            f"  {row.model:<20} {row.metric:<12} {row.bin_kind:<10} "
            f"[{row.bin_low:.3g}, {row.bin_high:.3g})  flip rate {row.flip_rate:6.1%} "
            f"(95% bound {row.flip_rate_high:6.1%} of {row.n_decided})" + verdict
        )
    regions = safe_regions(table)
    for row in regions[regions["metric"] == "all"].itertuples(index=False):
        lines.append(f"{row.model}: {row.statement}")
    return "\n".join(lines)
