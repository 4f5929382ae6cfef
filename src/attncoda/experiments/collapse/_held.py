"""How collapse's tables are held when two runs are compared (docs/design.md, "The same
evidence, by one rule"): every mean a row statistic over ``n_keys`` keys, every change by
the means it is made of (the rounding that also nulls a share), each share through its
parts, and the share's verdicts equal unless their row states they lie on their edge."""

from __future__ import annotations

from collections.abc import Mapping

from attncoda.experiments.collapse._split import (
    CHECKPOINT_COLUMNS,
    COLUMNS,
    PART_MAGNITUDES,
)
from attncoda.experiments.contract import Held, RowStatistic, Same, Share, Verdict

__all__ = ["HELD"]

#: Means over rows of float32 row statistics (nats, or a mass): to their own size.
_MEANS = (
    "mean_sink_mass_from",
    "mean_sink_mass_to",
    "entropy_from",
    "entropy_to",
    "content_entropy_from",
    "content_entropy_to",
    "mean_sink_mass",
    "entropy",
    "content_entropy",
    "sink_balance",
)
#: A share is held through its parts (near its null bound it moves by far more than they
#: do), and lets go where its row states that ``|delta_entropy|`` lies on the bound's edge.
_SHARES: dict[str, Held] = {
    "sink_share": Share(("delta_sink",), "delta_entropy", edge="share_edge"),
    **{
        f"sink_share_{end}": Share(
            ("delta_sink_sink_first", "delta_sink_content_first"),
            "delta_entropy",
            edge="share_edge",
        )
        for end in ("low", "high")
    },
}


def _rules(columns: tuple[str, ...]) -> dict[str, Held]:
    """Every column's rule; the keys, counts, text and flags :class:`Same`."""
    declared: dict[str, Held] = {
        **{c: RowStatistic() for c in _MEANS},
        **{c: RowStatistic(magnitude=m) for c, m in PART_MAGNITUDES.items()},
        **_SHARES,
        "sink_share_note": Verdict("note_edge"),
    }
    # revision: the column a run adds after model ("-": the tables span the series)
    return {c: declared.get(c, Same()) for c in ("revision", *columns)}


#: ``{table: {column: rule}}`` of :attr:`attncoda.experiments.contract.Experiment.held`.
HELD: Mapping[str, Mapping[str, Held]] = {
    "collapse": _rules(COLUMNS),
    "collapse_checkpoints": _rules(CHECKPOINT_COLUMNS),
}
