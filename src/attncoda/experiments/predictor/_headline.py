"""The predictor's row of a demo run's headline: its held-out verdicts and the constant
baseline's, tallied; and under the headline, each held-out model's verdicts beside the
baseline's, with which scores better."""

from __future__ import annotations

from typing import Any

from attncoda.experiments.contract import Headline
from attncoda.experiments.predictor._verdict import EDGE, VERDICTS, verdict_text
from attncoda.experiments.view import Context, is_missing, pct

__all__ = ["HEADLINE", "held_out"]


def _counted(ctx: Context) -> Any:
    """The counted verdicts: held-out models read on the fitted protocol."""
    rows = ctx.tables.predictor
    return rows[rows["counted"]]


def _edges(rows: Any, column: str) -> Any:
    """Per row, whether its verdict is on its edge (``column``; a table made before edges
    were stated has none)."""
    import numpy as np

    if column not in rows.columns:
        return np.zeros(len(rows), dtype=bool)
    return rows[column].fillna(False).to_numpy(bool)


def _tally(rows: Any, column: str, edge: str) -> str:
    """The verdicts of ``column`` counted, those on their edge apart (so that no count
    depends on the last bits): ``2 confirmed, 1 abstained, 0 failed, 1 on the edge``."""
    on_edge = _edges(rows, edge)
    firm = rows.loc[~on_edge, column]
    found = {v: int(firm.str.startswith(v).sum()) for v in VERDICTS}
    said = ", ".join(f"{found[v]} {v}" for v in VERDICTS)
    return said + (f", {int(on_edge.sum())} {EDGE}" if on_edge.any() else "")


def _cell(ctx: Context) -> str:
    rows = _counted(ctx)
    return (
        f"{len(rows)} held-out verdicts: predictor {_tally(rows, 'verdict', 'verdict_edge')}; "
        f"constant baseline {_tally(rows, 'baseline_verdict', 'baseline_edge')} (below)"
    )


def _interval(row: Any, prefix: str = "") -> str:
    if row[f"{prefix}verdict"].startswith("abstained"):
        return "abstained"
    return (
        f"{pct(row[f'{prefix}predicted'])} [{pct(row[f'{prefix}predicted_low'])}, "
        f"{pct(row[f'{prefix}predicted_high'])}]"
    )


def held_out(ctx: Context) -> str:
    """The held-out verdicts beside the constant baseline's, and which scores better (the
    mean interval score over the verdicts both give; lower is better), in Markdown."""
    rows = _counted(ctx)
    if rows.empty:
        return "No held-out model in this run: the predictor's verdicts need one."
    lines = [
        "| held out | measured | predictor | verdict | score | baseline | verdict | score |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in rows.iterrows():
        scores = [
            "" if is_missing(r[f"{p}interval_score"]) else f"{r[f'{p}interval_score']:.3f}"
            for p in ("", "baseline_")
        ]
        mine = verdict_text(r["verdict"], r.get("verdict_edge"))
        base = verdict_text(r["baseline_verdict"], r.get("baseline_edge"))
        lines.append(
            f"| {r['model']}@{r['revision']} | {pct(r['measured'])} | {_interval(r)} | "
            f"{mine} | {scores[0]} | {_interval(r, 'baseline_')} | {base} | {scores[1]} |"
        )
    both = rows.dropna(subset=["interval_score", "baseline_interval_score"])
    mine, theirs = both["interval_score"].mean(), both["baseline_interval_score"].mean()
    better = "beats" if mine < theirs else "does not beat"
    first = rows.iloc[0]
    lines += [
        "",
        f"On the {len(both)} held-out models both score, the predictor {better} the constant "
        f"baseline: mean interval score {mine:.3f} against {theirs:.3f} (Gneiting and Raftery "
        f"2007; lower is better). Intervals: {first['interval_method']}, alpha "
        f"{first['alpha']:g}, {int(first['n_training_models'])} training models in "
        f"{int(first['n_training_runs'])} runs.",
    ]
    return "\n".join(lines)


HEADLINE = Headline(
    "predictor (frozen)", "1 confirmed, 1 abstained, 1 failed", _cell, below=held_out
)
