"""collapse: the entropy change across training checkpoints, split exactly into sink and
content parts (docs/design.md, "The experiments").

Public names: :data:`EXPERIMENT` and its :class:`Settings`, :class:`CollapseResult`, one
checkpoint's statistics (:class:`CheckpointStats`, :func:`capture_stats`,
:func:`check_windows`) and the split between two of them, its Shapley share and the range of
the two one-sided orderings (:func:`collapse_pair`, :func:`series_tables`,
:data:`SHARE_METHOD`, :func:`share_rounding`, within which a change has no share, and
:func:`share_verdict` with :class:`ShareVerdict`, the share's verdicts and whether each lies
on its edge, and :func:`part_rounding` with :data:`PART_MAGNITUDES`, each change's
rounding; ``EXPERIMENT.held`` says how its tables are held when two runs are compared).

Modules: ``_experiment`` (the declaration, its run and the combination of a series' units),
``_stats`` (per-checkpoint row statistics and their frames), ``_split`` (the exact split per
head, layer and model), ``_null`` (a change's rounding, the null of a share and the edges of
its verdicts), ``_held`` (the rule of each column of its tables). They may import
:mod:`attncoda.coda`, :mod:`attncoda.experiments.contract` and :mod:`attncoda.models.spec`;
they capture nothing
(a run's captures are the runner's; :mod:`attncoda.run.direct` captures for a direct call).
"""

from __future__ import annotations

from attncoda.experiments.collapse._experiment import (
    EXPERIMENT,
    CollapseResult,
    Settings,
    collapse_from_stats,
    combine,
)
from attncoda.experiments.collapse._split import (
    CHECKPOINT_COLUMNS,
    COLUMNS,
    DEFAULT_SHARE_ATOL,
    PART_MAGNITUDES,
    SHARE_METHOD,
    ShareVerdict,
    collapse_pair,
    part_rounding,
    series_tables,
    share_rounding,
    share_verdict,
)
from attncoda.experiments.collapse._stats import (
    CheckpointStats,
    capture_stats,
    check_same_layout,
    check_windows,
    stats_frames,
    stats_from_frames,
    windows_hash,
)

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "CheckpointStats",
    "CollapseResult",
    "DEFAULT_SHARE_ATOL",
    "EXPERIMENT",
    "PART_MAGNITUDES",
    "SHARE_METHOD",
    "Settings",
    "ShareVerdict",
    "capture_stats",
    "check_same_layout",
    "check_windows",
    "collapse_from_stats",
    "collapse_pair",
    "combine",
    "part_rounding",
    "series_tables",
    "share_rounding",
    "share_verdict",
    "stats_frames",
    "stats_from_frames",
    "windows_hash",
]
