"""Flips' row of a demo run's headline: each model's range of flip rates over the metrics,
and how their intervals were made."""

from __future__ import annotations

from attncoda.experiments.contract import Headline
from attncoda.experiments.view import Context, is_missing, pct, prose_name

__all__ = ["HEADLINE"]


def _cell(ctx: Context) -> str:
    flips = ctx.tables.flips
    parts = []
    for model in dict.fromkeys(flips["model"]):
        rates = flips[flips["model"] == model]["flip_rate"]
        parts.append(f"{prose_name(model)} {pct(rates.min())}–{pct(rates.max())}")
    first = flips.iloc[0]
    interval = (
        f"{first['ci_method']}, {int(first['n_docs'])} documents, {int(first['n_boot'])} "
        "resamples, on the results page"
        if not is_missing(first["ci_low"])
        else str(first["ci_note"])
    )
    metrics = flips["metric"].nunique()
    return ", ".join(parts) + f" ({metrics} metrics; 95% intervals: {interval})"


HEADLINE = Headline("flips (keep vs drop)", "17–47% of verdicts flip", _cell)
