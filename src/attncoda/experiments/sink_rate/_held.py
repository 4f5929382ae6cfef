"""How the sink rate's tables are held when two runs are compared (docs/design.md, "The same
evidence, by one rule"): a rate to how far its row states its fragile triples can move it,
the bounds themselves to their own rule, a mean score as a row statistic over ``n_keys``
keys, and the rest (settings, structural counts) equal."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.contract import RUN_COLUMNS, Bound, Held, RowStatistic, Same, Stated

__all__ = ["HELD"]

#: A rounding in percentage points is a rate over its count: :class:`Bound` allows 3 of
#: its items (each ``100 / n`` points), as it allows 3 fragile items of the count.
_FRAGILE: dict[str, Held] = {"n_fragile": Bound()}

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "sink_rate": {
        **{c: Same() for c in ("model", *RUN_COLUMNS, "position", "epsilon")},
        "sink_rate": Stated("rate_rounding"),
        "rate_rounding": Bound(per="n_triples", scale=100.0),
        **{c: Same() for c in ("n_windows", "n_heads", "n_triples")},
        **_FRAGILE,
    },
    "sink_rate_heads": {
        **{c: Same() for c in ("model", *RUN_COLUMNS, "layer", "head", "position")},
        **{c: Same() for c in ("n_windows", "n_keys")},
        "score": RowStatistic(),
        "above": Stated("above_rounding"),
        "above_rounding": Bound(per="n_windows", scale=100.0),
        **_FRAGILE,
    },
}
