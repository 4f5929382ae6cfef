"""sink_rate: Gu et al.'s attention-sink metric (ICLR 2025), the share of (window, layer,
head) triples in which a key position receives more than ε of the attention of the queries
that see it (docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`key_scores`,
:func:`score_rounding` (how far float32 rounding moves a score: a triple within it of ε is
fragile), :func:`sink_rate` and :class:`SinkRateResult`.

Modules: ``_experiment`` (the scores, the rates, the declaration and its run), ``_figure``
(the rate per position), ``_section`` (the report section), ``_summary`` (what the command
prints), ``_held`` (the rule of each column of its tables). They import
:mod:`attncoda.experiments.contract` and :mod:`attncoda.experiments.view` only.
"""

from __future__ import annotations

from attncoda.experiments.sink_rate._experiment import (
    EXPERIMENT,
    Settings,
    SinkRateResult,
    key_scores,
    score_rounding,
    sink_rate,
)

__all__ = ["EXPERIMENT", "Settings", "SinkRateResult", "key_scores", "score_rounding", "sink_rate"]
