"""Collapse's row of a demo run's headline: the first-to-last change of the series' mean
entropy, its Shapley sink share with the range of the two orderings, and its parts."""

from __future__ import annotations

from typing import Any

from attncoda.experiments.contract import Headline
from attncoda.experiments.view import pct

__all__ = ["HEADLINE"]


def _cell(ctx: Any) -> str:
    rows = ctx.need("collapse").query("pair_kind == 'first_last' and level == 'model'")
    row = rows.iloc[0]
    return (
        f"{pct(row['sink_share'])} (Shapley attribution; {pct(row['sink_share_low'])}–"
        f"{pct(row['sink_share_high'])} over the two orderings): ΔH = "
        f"{row['delta_entropy']:.3f} = sink "
        f"{row['delta_sink']:.3f} + content {row['delta_content']:.3f} nats; mean sink mass "
        f"{row['mean_sink_mass_from']:.3f} → {row['mean_sink_mass_to']:.3f}"
    )


HEADLINE = Headline(
    "collapse (Bigram-Backcopy, step0 → step2000)",
    "30% / 95% / 79% of the drop is the sink (Pythia)",
    _cell,
)
