"""Prune's row of a demo run's headline: on the first model, at its largest k, the
informed channel and order that inflate perplexity most and least, each ratio with its
paired interval."""

from __future__ import annotations

from typing import Any

from attncoda.experiments.contract import Headline
from attncoda.experiments.prune._ranking import CHANNEL_COLUMNS
from attncoda.experiments.view import Context, is_missing, prose_name, times

__all__ = ["HEADLINE", "ratio_text"]

#: The channels the headline weighs against each other: those read from the attention.
_CHANNELS = tuple(c for c in CHANNEL_COLUMNS if c != "gradient")


def ratio_text(row: Any) -> str:
    """A zero-ablation row's perplexity ratio with its paired interval: ``×460 [391, 540]``,
    and ``, heads on the edge`` where its chosen heads lie within rounding of their cut
    (another machine may prune others)."""
    edge = ", heads on the edge" if "heads_edge" in row and bool(row["heads_edge"]) else ""
    if is_missing(row["ratio_ci_low"]):
        return times(row["ratio"]) + edge
    low, high = times(row["ratio_ci_low"]), times(row["ratio_ci_high"])
    return f"{times(row['ratio'])} [{low.lstrip('×')}, {high.lstrip('×')}]{edge}"


def _cell(ctx: Context) -> str:
    prune = ctx.tables.prune
    model = prune["model"].iloc[0]
    mine = prune[(prune["model"] == model) & (prune["ablation"] == "zero")]
    k = int(mine["k"].max())
    at_k = mine[(mine["k"] == k) & mine["channel"].isin(_CHANNELS)]
    ranked = at_k.sort_values(["ratio", "channel", "order"])
    best, worst = ranked.iloc[0], ranked.iloc[-1]
    heads = ctx.tables.prune_heads
    n_heads = int((heads["model"] == model).sum())
    tokens = ctx.settings["prune"].max_tokens
    return (
        f"{prose_name(model)}, k = {k} of {n_heads} heads: worst {ratio_text(worst)} "
        f"({worst['channel']}, {worst['order']}est first), best {ratio_text(best)} "
        f"({best['channel']}, {best['order']}est first); 95% intervals: "
        f"{worst['ci_method']} over {int(worst['n_windows'])} windows of {tokens} tokens"
    )


HEADLINE = Headline(
    "prune (zero ablation)", "the wrong channel inflates perplexity > 100×", _cell
)
