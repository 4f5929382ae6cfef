"""Collapse's row of a demo run's headline: the first-to-last change of the series' mean
entropy, its Shapley sink share with the range of the two orderings, and its parts."""

from __future__ import annotations

from attncoda.experiments.contract import Headline
from attncoda.experiments.view import Context, is_missing, pct

__all__ = ["HEADLINE"]


def _cell(ctx: Context) -> str:
    rows = ctx.tables.collapse.query("pair_kind == 'first_last' and level == 'model'")
    row = rows.iloc[0]
    if is_missing(row["sink_share"]):
        share = f"n/a ({row['sink_share_note']})"
    else:
        share = (
            f"{pct(row['sink_share'])} (Shapley attribution; {pct(row['sink_share_low'])}–"
            f"{pct(row['sink_share_high'])} over the two orderings)"
        )
    if not is_missing(row.get("share_edge")) and bool(row.get("share_edge")):
        share += ", on the edge of its null bound"
    return (
        f"{share}: ΔH = {row['delta_entropy']:.3f} = sink "
        f"{row['delta_sink']:.3f} + content {row['delta_content']:.3f} nats; mean sink mass "
        f"{row['mean_sink_mass_from']:.3f} → {row['mean_sink_mass_to']:.3f}"
    )


HEADLINE = Headline(
    "collapse (Bigram-Backcopy, step0 → step2000)",
    "30% / 95% / 79% of the drop is the sink (Pythia)",
    _cell,
)
