"""Cluster's row of a demo run's headline: the rank correlation of the leading MDS axis
with head sink mass, kept and dropped, per model."""

from __future__ import annotations

from typing import Any

from attncoda.experiments.contract import Headline
from attncoda.experiments.view import Context, prose_name

__all__ = ["HEADLINE"]


def _rho(summary: Any, model: str, variant: str) -> float:
    row = summary[(summary["model"] == model) & (summary["variant"] == variant)]
    return float(row["spearman_axis1_vs_sink_mass"].iloc[0])


def _cell(ctx: Context) -> str:
    summary = ctx.tables.cluster_summary
    parts = [
        f"{prose_name(m)} {_rho(summary, m, 'keep'):+.2f} / {_rho(summary, m, 'drop'):+.2f}"
        for m in dict.fromkeys(summary["model"])
    ]
    return "ρ(axis 1, sink mass), keep / drop: " + ", ".join(parts)


HEADLINE = Headline("cluster (Clark et al.)", "the leading axis is the sink", _cell)
