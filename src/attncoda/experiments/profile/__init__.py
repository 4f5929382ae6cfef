"""profile: per-head summaries of captured row statistics, sink mass and the exact entropy
split (the tables of ``attncoda profile``; docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`entropy_terms`,
:func:`balance_magnitude`,
:func:`head_summary`, :func:`layer_summary`, :data:`ROW_COLUMNS`, :data:`MEANS`, :data:`TERMS`
and :data:`HEAD_HELD` (how a head table's columns are held when two runs are compared).

Modules: ``_experiment`` (the summaries, the declaration and its run), ``_figure`` (the
layer × head heatmaps), ``_section`` (the report section), ``_summary`` (what the command
prints, and the per-layer means).
"""

from __future__ import annotations

from attncoda.experiments.profile._experiment import (
    EXPERIMENT,
    HEAD_HELD,
    MEANS,
    ROW_COLUMNS,
    TERMS,
    Settings,
    balance_magnitude,
    entropy_terms,
    head_summary,
    run,
)
from attncoda.experiments.profile._summary import layer_summary

__all__ = [
    "EXPERIMENT",
    "HEAD_HELD",
    "MEANS",
    "ROW_COLUMNS",
    "Settings",
    "TERMS",
    "balance_magnitude",
    "entropy_terms",
    "head_summary",
    "layer_summary",
    "run",
]
