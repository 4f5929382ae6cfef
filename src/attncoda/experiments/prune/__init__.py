"""prune: heads ranked by a channel, ablated, and held-out perplexity per k
(docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :func:`prune` and
:class:`PruneResult`, the ranking (:func:`head_ranking`, :data:`CHANNELS`, :data:`ORDERS`,
:data:`ABLATIONS`) and the windows it measures on (:func:`split_windows`,
:func:`window_losses`, :func:`gradient_importance`).

Modules: ``_experiment`` (the declaration, the ablated passes and the losses) and
``_ranking`` (channels, orders and the ranking of heads). They may import
:mod:`attncoda.coda`, :mod:`attncoda.experiments.contract`, :mod:`attncoda.models` and,
lazily, :mod:`attncoda.capture` (ablation and the forward helper); nothing above the
experiments.
"""

from __future__ import annotations

from attncoda.experiments.prune._experiment import (
    COLUMNS,
    EXPERIMENT,
    PruneResult,
    Settings,
    gradient_importance,
    prune,
    window_losses,
)
from attncoda.experiments.prune._ranking import (
    ABLATIONS,
    CHANNEL_COLUMNS,
    CHANNELS,
    DEFAULT_CHANNELS,
    ORDERS,
    check_choices,
    check_ks,
    head_ranking,
    split_windows,
)

__all__ = [
    "ABLATIONS",
    "CHANNELS",
    "CHANNEL_COLUMNS",
    "COLUMNS",
    "DEFAULT_CHANNELS",
    "EXPERIMENT",
    "ORDERS",
    "PruneResult",
    "Settings",
    "check_choices",
    "check_ks",
    "gradient_importance",
    "head_ranking",
    "prune",
    "split_windows",
    "window_losses",
]
