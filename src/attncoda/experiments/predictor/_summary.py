"""What ``attncoda predictor apply`` prints: each model's prediction beside the baseline's,
the measured rate and the verdict, or why the model tests nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from attncoda.experiments.predictor._verdict import EDGE, standing, verdict_text

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["summary"]


def summary(
    tables: Mapping[str, pd.DataFrame],
    facts: Callable[[str, str], Mapping[str, Any]],
    sink: str,
) -> str:
    """One line per model: the predictor's point and interval (or its abstention) with its
    interval score, the constant baseline's, the measured flip rate and the verdict. A
    verdict or an abstention decided within rounding of its threshold (its row's
    ``verdict_edge``, ``baseline_edge``, ``abstain_edge``) says "on the edge" instead of
    standing as a side."""
    lines = []
    for row in tables["predictor"].itertuples(index=False):
        abstain_edge = bool(getattr(row, "abstain_edge", False))
        said = (
            f"ABSTAIN ({EDGE + '; ' if abstain_edge else ''}{row.reason})"
            if row.abstained
            else f"predicted {row.predicted:.1%} "
            f"[{row.predicted_low:.1%}, {row.predicted_high:.1%}] "
            f"(interval score {row.interval_score:.3f})"
        )
        if hasattr(row, "baseline_predicted"):
            said += (
                f"; baseline {row.baseline_predicted:.1%} [{row.baseline_predicted_low:.1%}, "
                f"{row.baseline_predicted_high:.1%}] (interval score "
                f"{row.baseline_interval_score:.3f})"
            )
        counted, stands = standing(row._asdict())
        seen = getattr(row, "matched_training_model", "")
        if counted:
            mine = verdict_text(row.verdict, getattr(row, "verdict_edge", False))
            base = verdict_text(row.baseline_verdict, getattr(row, "baseline_edge", False))
            verdict = f"{mine} (held out; baseline {base})"
        elif row.relation == "training" and seen and row.on_protocol:
            verdict = f"training model {seen} (matched by {row.matched_by}): no test"
        else:
            verdict = f"{stands}: no test" if row.on_protocol else stands
        if not counted and row.on_protocol:  # no test, but its edges said all the same
            edges = [
                f"{name} {value} {EDGE}"
                for name, value, flag in (
                    ("verdict", row.verdict, getattr(row, "verdict_edge", False)),
                    ("baseline", row.baseline_verdict, getattr(row, "baseline_edge", False)),
                )
                if bool(flag)
            ]
            verdict += f" ({'; '.join(edges)})" if edges else ""
        lines.append(f"{row.model}: {said}; measured {row.measured:.1%}; {verdict}")
    return "\n".join(lines)
