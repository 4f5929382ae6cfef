"""prune: heads ranked by a channel, ablated, and held-out perplexity per k
(docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings` (:func:`fitting_ks`: the ks
that fit a model), :func:`prune` and :class:`PruneResult`, the ranking
(:func:`head_ranking`, :data:`CHANNELS`, :data:`ORDERS`, :data:`ABLATIONS`), the windows it
measures on (:func:`split_windows`, :func:`check_windows`, :func:`window_losses`,
:func:`window_nll` and :class:`WindowNLL`, :func:`gradient_importance`), what rounding can
move (:func:`nll_rounding` and :func:`logit_rows`: a window's NLL;
:func:`gradient_rounding`; :func:`channel_rounding`, :func:`fragile_heads` and
:class:`ChosenHeads`: the heads within rounding of a cut), how its tables are held when two
runs are compared (:data:`HELD`) and the paired bootstrap interval of a perplexity ratio
(:func:`ratio_interval`, :func:`window_resamples`, :func:`ratio_text`: a ratio with its
interval as a headline writes it).

Modules: ``_experiment`` (the declaration: settings, ``run`` and the windows the runner
captures for it, :func:`profiling_windows`), ``_grid`` (:func:`prune`, the grid of ablated
evaluations), ``_headline`` (its row of a demo run's headline), ``_profiling`` (the head
table of the profiling capture), ``_losses`` (the window losses and gradient importance),
``_nll`` (a window's NLL and the bound of its rounding), ``_fragility`` (the heads within
rounding of a cut), ``_held`` (the tables' rules), ``_interval`` (the paired bootstrap over
windows) and ``_ranking`` (channels, orders and the ranking of heads). They may import
:mod:`attncoda.coda`, :mod:`attncoda.experiments.contract`,
:mod:`attncoda.experiments.profile` (the head table's rules), :mod:`attncoda.models` and,
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
from attncoda.experiments.prune._fragility import ChosenHeads, channel_rounding, fragile_heads
from attncoda.experiments.prune._grid import COLUMNS, PruneResult, prune
from attncoda.experiments.prune._headline import ratio_text
from attncoda.experiments.prune._held import HELD
from attncoda.experiments.prune._interval import (
    BASELINE_NOTE,
    ratio_interval,
    window_resamples,
)
from attncoda.experiments.prune._losses import (
    WindowNLL,
    check_windows,
    gradient_importance,
    gradient_rounding,
    window_losses,
    window_nll,
)
from attncoda.experiments.prune._nll import LogitRows, logit_rows, nll_rounding
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
    "ChosenHeads",
    "DEFAULT_CHANNELS",
    "EXPERIMENT",
    "HELD",
    "LogitRows",
    "ORDERS",
    "PruneResult",
    "Settings",
    "WindowNLL",
    "channel_rounding",
    "check_choices",
    "check_ks",
    "check_windows",
    "fitting_ks",
    "fragile_heads",
    "gradient_importance",
    "gradient_rounding",
    "head_ranking",
    "logit_rows",
    "nll_rounding",
    "profiling_windows",
    "prune",
    "ratio_text",
    "ratio_interval",
    "split_windows",
    "window_losses",
    "window_nll",
    "window_resamples",
]
