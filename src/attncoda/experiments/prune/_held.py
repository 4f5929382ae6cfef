"""How prune's tables are held when two runs are compared (docs/design.md, "The same
evidence, by one rule"): each perplexity, ratio and interval end to the rounding its row
states of the NLL it is ``exp`` of, anything where the row's chosen heads are on the edge of
their cut; the bounds and the fragile heads to their own rule; the profiling head table as
profile holds its own."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.contract import Bound, Exponent, Held, Stated, Verdict
from attncoda.experiments.profile import HEAD_HELD

__all__ = ["HELD"]

#: The chosen heads may be another set on another machine: the row's evaluation may differ.
_EDGE = "heads_edge"

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "prune": {
        "perplexity": Exponent("nll_rounding", edge=_EDGE),
        "ratio": Exponent("ratio_rounding", edge=_EDGE),
        "ratio_ci_low": Exponent("ratio_rounding", edge=_EDGE),
        "ratio_ci_high": Exponent("ratio_rounding", edge=_EDGE),
        "mean_nll": Stated("nll_rounding", edge=_EDGE),
        # bounds in nats, made of the windows' magnitudes: 1% of themselves
        "nll_rounding": Bound(units=0, edge=_EDGE),
        "ratio_rounding": Bound(units=0, edge=_EDGE),
        "n_fragile_heads": Bound(),
        "heads_edge": Verdict(edge=_EDGE),
        "order_edge": Verdict(edge="order_edge"),
        "heads": Verdict(edge=("order_edge", _EDGE)),
    },
    "prune_heads": {
        **HEAD_HELD,
        "gradient_importance": Stated("gradient_rounding"),
        "gradient_rounding": Bound(units=0),
    },
}
