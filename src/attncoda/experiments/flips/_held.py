"""How flips' tables are held when two runs are compared (docs/design.md, "The same evidence,
by one rule"): a count or rate of triplets to how far its row states rounding can move it,
the bounds themselves to their own rule."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.contract import Bound, Held, Stated

__all__ = ["HELD"]

_COUNTS: dict[str, Held] = {
    "flips": Stated("n_fragile"),
    "n_ties": Stated("n_fragile"),
    "flip_rate": Stated("rate_rounding"),
    "n_fragile": Bound(),
    "rate_rounding": Bound(per="n_triplets"),
}

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "flips": {
        **_COUNTS,
        "ci_low": Stated("ci_rounding"),
        "ci_high": Stated("ci_rounding"),
        "ci_rounding": Bound(per="n_triplets"),
    },
    "flips_by_layer": _COUNTS,
}
