"""prune: heads ranked by a channel, ablated, and held-out perplexity per k
(docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings` (:func:`fitting_ks`: the ks
that fit a model), :func:`prune` and :class:`PruneResult`, the ranking
(:func:`head_ranking`, :data:`CHANNELS`, :data:`ORDERS`, :data:`ABLATIONS`), the windows it
measures on (:func:`split_windows`, :func:`check_windows`, :func:`window_losses`,
:func:`gradient_importance`) and the paired bootstrap interval of a perplexity ratio
(:func:`ratio_interval`, :func:`window_resamples`, :func:`ratio_text`: a ratio with its
interval as a headline writes it).

Modules: ``_experiment`` (the declaration: settings, ``run`` and the windows the runner
captures for it, :func:`profiling_windows`), ``_grid`` (:func:`prune`, the grid of ablated
evaluations), ``_headline`` (its row of a demo run's headline), ``_profiling`` (the head
table of the profiling capture), ``_losses`` (the window losses and gradient importance),
``_interval`` (the paired bootstrap over windows) and ``_ranking`` (channels, orders and
the ranking of heads). They may import
:mod:`attncoda.coda`, :mod:`attncoda.experiments.contract`, :mod:`attncoda.models` and,
lazily, :mod:`attncoda.capture` (ablation and the forward helper); nothing above the
experiments.
"""

from __future__ import annotations

from attncoda.experiments.prune._experiment import (
    EXPERIMENT,
    Settings,
    fitting_ks,
    profiling_windows,
)
from attncoda.experiments.prune._grid import COLUMNS, PruneResult, prune
from attncoda.experiments.prune._headline import ratio_text
from attncoda.experiments.prune._interval import (
    BASELINE_NOTE,
    ratio_interval,
    window_resamples,
)
from attncoda.experiments.prune._losses import check_windows, gradient_importance, window_losses
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
    "BASELINE_NOTE",
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
    "check_windows",
    "fitting_ks",
    "gradient_importance",
    "head_ranking",
    "profiling_windows",
    "prune",
    "ratio_text",
    "ratio_interval",
    "split_windows",
    "window_losses",
    "window_resamples",
]
