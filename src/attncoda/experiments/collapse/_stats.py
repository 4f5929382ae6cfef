"""One checkpoint's row statistics, captured on the series' windows, and their tidy tables
(docs/design.md, "The experiments").

Every checkpoint of a series reads the same windows; :func:`capture_stats` reads one
checkpoint's statistics from its capture (in a run, the runner's, made with the run's
options; for a direct call, :func:`attncoda.run.direct.checkpoint_stats`),
:func:`stats_frames` stores it as two tables and :func:`stats_from_frames` reads them back, so
the checkpoints of a series can be captured apart and assembled by
:func:`attncoda.experiments.collapse.collapse_from_stats`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.data.windows import windows_hash

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CheckpointStats",
    "capture_stats",
    "check_same_layout",
    "check_windows",
    "stats_frames",
    "stats_from_frames",
    "windows_hash",
]


@dataclass(frozen=True, eq=False)
class CheckpointStats:
    """One checkpoint's row statistics, float64 ``(doc, layer, head, query_pos)``.

    Made by :func:`capture_stats`; stored and read back with :func:`stats_frames` and
    :func:`stats_from_frames`, so the checkpoints of a series can be captured apart (in
    other processes) and assembled by :func:`collapse_from_stats`.
    """

    step: int
    label: str
    sink_mass: np.ndarray
    entropy: np.ndarray
    content_entropy: np.ndarray
    sink_balance: np.ndarray
    has_content: np.ndarray
    sink_positions: tuple[np.ndarray, ...]


def check_windows(windows_ids: object) -> list[np.ndarray]:
    """The windows as int64 id arrays of at least 2 tokens each (``Window`` objects work)."""
    if isinstance(windows_ids, (str, bytes)) or not isinstance(windows_ids, Sequence):
        raise AttncodaError(
            "windows_ids must be a sequence of token-id sequences, got "
            f"{type(windows_ids).__name__}"
        )
    if len(windows_ids) == 0:
        raise AttncodaError("windows_ids is empty: give at least one window of token ids")
    out = []
    for index, window in enumerate(windows_ids):
        ids = getattr(window, "input_ids", window)
        array = np.asarray(ids)
        if array.ndim != 1 or array.size < 2 or not np.issubdtype(array.dtype, np.integer):
            raise AttncodaError(
                f"window {index} must be a sequence of at least 2 token ids (a row needs a key "
                f"besides the sink to have content), got {ids!r:.80}"
            )
        out.append(array.astype(np.int64))
    return out


def capture_stats(cap: Any, point: Any) -> CheckpointStats:
    """One checkpoint's statistics from its :class:`attncoda.Capture` of the series' windows
    (a model run, or attention handed in with :func:`attncoda.from_attentions`)."""
    return CheckpointStats(
        step=point.step,
        label=point.label,
        sink_mass=cap.sink_mass,
        entropy=cap.entropy,
        content_entropy=cap.content_entropy,
        sink_balance=cap.sink_balance,
        has_content=cap.has_content,
        sink_positions=cap.sink_positions,
    )


def check_same_layout(first: CheckpointStats, other: CheckpointStats) -> None:
    """Refuse a checkpoint with another architecture, or other sink keys, than the first."""
    if other.sink_mass.shape != first.sink_mass.shape:
        _, l0, h0, _ = first.sink_mass.shape
        _, l1, h1, _ = other.sink_mass.shape
        raise AttncodaError(
            f"checkpoint {other.label} has {l1} layers x {h1} heads, {first.label} has "
            f"{l0} x {h0}: a series must keep its architecture"
        )
    for doc, (a, b) in enumerate(zip(first.sink_positions, other.sink_positions, strict=True)):
        if not np.array_equal(a, b):
            raise AttncodaError(
                f"the sink keys of window {doc} differ between {first.label} ({a.tolist()}) "
                f"and {other.label} ({b.tolist()}): the split needs the same sink keys at "
                f"every checkpoint; use sink='first' or explicit positions"
            )


_STAT_ARRAYS = ("sink_mass", "entropy", "content_entropy", "sink_balance")


def stats_frames(stats: CheckpointStats) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One checkpoint's statistics as two tidy tables, for storing.

    Returns
    -------
    rows : pandas.DataFrame
        One row per (doc, layer, head, query_pos) of the padded grid: ``sink_mass``,
        ``entropy``, ``content_entropy`` (nats), ``sink_balance`` (float64, NaN where a row
        has none) and ``has_content``.
    sinks : pandas.DataFrame
        One row per (doc, sink key): ``doc``, ``sink_pos``.
    """
    import pandas as pd

    shape = stats.sink_mass.shape
    index = np.indices(shape).reshape(len(shape), -1)
    rows = pd.DataFrame(
        {
            "doc": index[0].astype(np.int64),
            "layer": index[1].astype(np.int64),
            "head": index[2].astype(np.int64),
            "query_pos": index[3].astype(np.int64),
            **{
                name: np.asarray(getattr(stats, name), np.float64).reshape(-1)
                for name in _STAT_ARRAYS
            },
            "has_content": np.asarray(stats.has_content, bool).reshape(-1),
        }
    )
    sinks = pd.DataFrame(
        [
            {"doc": doc, "sink_pos": int(pos)}
            for doc, positions in enumerate(stats.sink_positions)
            for pos in np.asarray(positions).reshape(-1)
        ],
        columns=["doc", "sink_pos"],
    ).astype(np.int64)
    return rows, sinks


def stats_from_frames(
    step: int, label: str, rows: pd.DataFrame, sinks: pd.DataFrame
) -> CheckpointStats:
    """Rebuild :class:`CheckpointStats` from the tables of :func:`stats_frames`."""
    need = ("doc", "layer", "head", "query_pos", *_STAT_ARRAYS, "has_content")
    missing = [c for c in need if c not in rows.columns]
    if missing:
        raise AttncodaError(f"checkpoint statistics table lacks columns {missing}")
    ordered = rows.sort_values(["doc", "layer", "head", "query_pos"], kind="stable")
    shape = tuple(int(ordered[c].max()) + 1 for c in ("doc", "layer", "head", "query_pos"))
    if int(np.prod(shape)) != len(ordered):
        raise AttncodaError(
            f"checkpoint statistics table of {label} has {len(ordered)} rows, not the full "
            f"grid {shape}"
        )
    arrays = {n: ordered[n].to_numpy(np.float64).reshape(shape) for n in _STAT_ARRAYS}
    positions = tuple(
        np.sort(sinks.loc[sinks["doc"] == doc, "sink_pos"].to_numpy(np.int64))
        for doc in range(shape[0])
    )
    return CheckpointStats(
        step=int(step),
        label=str(label),
        has_content=ordered["has_content"].to_numpy(bool).reshape(shape),
        sink_positions=positions,
        **arrays,
    )
