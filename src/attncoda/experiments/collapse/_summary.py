"""What ``attncoda collapse`` prints: the model-level entropy change and its split."""

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
    """One line per pair of checkpoints: the model-level mean entropy change (nats), its
    two-factor Shapley split into sink and content, and the sink share with its range over
    the two one-sided orderings, and the table's note; where the share is null (a change
    within its float32 rounding), ``n/a``; where the share or its note lies on its edge
    (``share_edge``, ``note_edge``), that another run may give it otherwise."""
    import pandas as pd

    table = tables["collapse"]
    model = table[table["level"] == "model"]
    lines = [
        "model-level mean entropy change and its two-factor Shapley split (nats); the sink "
        "share's range over the two one-sided orderings in brackets:"
    ]
    for row in model.itertuples(index=False):
        share = (
            f"n/a ({row.sink_share_note})"
            if pd.isna(row.sink_share)
            else f"{row.sink_share:.1%} ({row.sink_share_low:.1%}-{row.sink_share_high:.1%})"
            + (f" ({row.sink_share_note})" if row.sink_share_note else "")
        )
        if getattr(row, "share_edge", False):
            share += "; on the edge of its null bound: another run may " + (
                "measure it" if pd.isna(row.sink_share) else "leave it undefined"
            )
        elif getattr(row, "note_edge", False):
            share += "; on the edge: another run may note otherwise (a part near 0)"
        lines.append(
            f"  {row.pair_kind:<11} {row.label_from:>8} -> {row.label_to:<8} "
            f"dH {row.delta_entropy:+.4f} = sink {row.delta_sink:+.4f} "
            f"+ content {row.delta_content:+.4f}   sink share {share}"
        )
    return "\n".join(lines)
