"""How the safety map's tables are held when two runs are compared (docs/design.md, "The
same evidence, by one rule"): each count to the triplets its row states rounding can move
(those within rounding of the tie edge, ``n_fragile``, and of a bin edge, ``n_edge``), the
rate and the interval's ends to how far those move them, the verdict either way where its
row says it lies on the edge, the bin edges to their own rounding, and the bounds
themselves to their own rule."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.contract import Bound, Held, Stated, Verdict

__all__ = ["HELD"]

_MOVED = ("n_fragile", "n_edge")

_CELLS: dict[str, Held] = {
    "n_triplets": Stated("n_edge"),
    "n_ties": Stated(_MOVED),
    "flips": Stated(_MOVED),
    "n_decided": Stated(_MOVED),
    "flip_rate": Stated("rate_rounding"),
    "flip_rate_low": Stated("ci_rounding"),
    "flip_rate_high": Stated("ci_rounding"),
    "safe": Verdict("safe_edge"),
    "n_fragile": Bound(),
    "n_edge": Bound(),
    "rate_rounding": Bound(per="n_decided"),
    "ci_rounding": Bound(per="n_decided"),
}

#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`
#: (``safe_threshold``, a setting the rows echo, and ``ci_method`` stay equal).
HELD: Mapping[str, Mapping[str, Held]] = {
    "safety": {
        **_CELLS,
        "bin_low": Stated("bin_rounding"),
        "bin_high": Stated("bin_rounding"),
        "bin_rounding": Bound(units=0),
    },
    "safety_grid": {
        **_CELLS,
        "sink_share_low": Stated("sink_share_rounding"),
        "sink_share_high": Stated("sink_share_rounding"),
        "sink_share_rounding": Bound(units=0),
        "sink_gap_low": Stated("sink_gap_rounding"),
        "sink_gap_high": Stated("sink_gap_rounding"),
        "sink_gap_rounding": Bound(units=0),
    },
}
