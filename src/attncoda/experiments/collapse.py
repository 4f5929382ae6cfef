r"""Entropy across training checkpoints, and its change split exactly into sink and content
parts (docs/design.md, "The mathematics" and "The experiments").

Every checkpoint of a series reads the *same* token windows. For each row (document, layer,
head, query) with content at both checkpoints of a pair ``0 -> 1`` the entropy change is
split by the two-factor Shapley rule (docs/design.md, "The mathematics"),

.. math::

    \Delta H = H(p_1) - H(p_0), \qquad
    \Delta H_{content} = \tfrac{(1-s_0) + (1-s_1)}{2}\,\bigl(H(q_1) - H(q_0)\bigr), \qquad
    \Delta H_{sink} = \Delta H - \Delta H_{content},

(``s`` the sink mass, ``q`` the content composition, entropies in nats). Means over rows,
heads and layers keep the identity ``delta_sink + delta_content == delta_entropy`` (to
float64 rounding), so "the share of the entropy change that is the sink" is the ratio of
the summed parts, ``sink_share = sum dH_sink / sum dH`` over the rows of a head, a layer or
the model. No keep/drop convention is involved: both parts come from the full rows.

The share is undefined where ``|delta_entropy| <= share_atol`` (no change to share out): it
is then ``<NA>`` (null in Parquet, ``None`` in JSON) and ``sink_share_note`` says why. When
the two parts have opposite signs the share lies outside ``[0, 1]`` (the note says so): a
sink part of ``-0.3`` nats and a content part of ``+0.1`` give ``dH = -0.2`` and a share of
1.5.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Experiment, Inputs, Tables
from attncoda.models.spec import NO_REVISION
from attncoda.store.files import atomic_write_json, write_table

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "CheckpointStats",
    "CollapseResult",
    "EXPERIMENT",
    "Settings",
    "checkpoint_stats",
    "collapse",
    "collapse_from_stats",
    "collapse_pair",
    "combine",
    "stats_frames",
    "stats_from_frames",
    "write_collapse",
]

#: Columns of :attr:`CollapseResult.table` (``collapse.parquet``), in order.
COLUMNS = (
    "model",
    "pair_kind",
    "pair_from",
    "pair_to",
    "label_from",
    "label_to",
    "level",
    "layer",
    "head",
    "n_rows",
    "mean_sink_mass_from",
    "mean_sink_mass_to",
    "entropy_from",
    "entropy_to",
    "content_entropy_from",
    "content_entropy_to",
    "delta_entropy",
    "delta_sink",
    "delta_content",
    "sink_share",
    "sink_share_note",
)
#: Columns of :attr:`CollapseResult.checkpoints` (``collapse_checkpoints.parquet``).
CHECKPOINT_COLUMNS = (
    "model",
    "step",
    "label",
    "level",
    "layer",
    "head",
    "n_rows",
    "mean_sink_mass",
    "entropy",
    "content_entropy",
    "sink_balance",
)
_PAIR_MEANS = (
    "mean_sink_mass_from",
    "mean_sink_mass_to",
    "entropy_from",
    "entropy_to",
    "content_entropy_from",
    "content_entropy_to",
    "delta_entropy",
    "delta_sink",
    "delta_content",
)
_CHECKPOINT_MEANS = ("mean_sink_mass", "entropy", "content_entropy", "sink_balance")
DEFAULT_SHARE_ATOL = 1e-9


@dataclass(frozen=True, eq=False)
class CheckpointStats:
    """One checkpoint's row statistics, float64 ``(doc, layer, head, query_pos)``.

    Made by :func:`checkpoint_stats`; stored and read back with :func:`stats_frames` and
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


@dataclass(frozen=True, eq=False)
class CollapseResult:
    """Entropy per checkpoint and its exact sink/content change split per pair.

    Attributes
    ----------
    table : pandas.DataFrame
        ``collapse.parquet``: one row per (pair, level, layer, head), columns
        :data:`COLUMNS`. ``pair_kind`` is ``"consecutive"`` (each checkpoint to the next) or
        ``"first_last"`` (first to last checkpoint; present even for two checkpoints, where
        it repeats the one consecutive pair). ``level`` is ``"model"``, ``"layer"`` or
        ``"head"``; ``layer`` and ``head`` are nullable ``Int64``, ``<NA>`` above their
        level. ``n_rows`` counts the rows (document, [layer, head,] query) averaged: those
        with content at both checkpoints. Every other number is a mean over those rows:
        sink mass, ``H(p)`` and ``H(q)`` at each end (nats), ``delta_entropy`` (``dH``),
        ``delta_sink`` and ``delta_content`` (its exact split; they sum to ``dH``).
        ``sink_share = delta_sink / delta_entropy`` (nullable ``Float64``; ``<NA>`` when
        ``|dH| <= share_atol``) and ``sink_share_note`` (``""``, or why the share is
        undefined or outside ``[0, 1]``).
    checkpoints : pandas.DataFrame
        ``collapse_checkpoints.parquet``: one row per (checkpoint, level, layer, head),
        columns :data:`CHECKPOINT_COLUMNS`: means over the rows with content at that
        checkpoint of sink mass, ``H(p)``, ``H(q)`` (nats) and sink balance.
    summary : dict
        JSON-ready: model, sink, points, window counts and hash, ``share_atol``, and the
        model-level numbers of every pair (``pairs``) and of ``first_last``.
    """

    table: Any
    checkpoints: Any
    summary: dict[str, Any]


def _check_windows(windows_ids: object) -> list[np.ndarray]:
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


def _check_points(series_points: object) -> list[Any]:
    from attncoda.models.series import SeriesPoint, parse_series

    if isinstance(series_points, (str, os.PathLike)):
        return parse_series(series_points)
    points = list(series_points)  # type: ignore[call-overload]
    if len(points) < 2:
        raise AttncodaError(f"collapse needs a series of at least 2 checkpoints, got {len(points)}")
    for point in points:
        if not isinstance(point, SeriesPoint):
            raise AttncodaError(
                f"series_points must hold SeriesPoint items (see parse_series), got "
                f"{type(point).__name__}"
            )
    steps = [point.step for point in points]
    if steps != sorted(set(steps)):
        raise AttncodaError(f"series points must have increasing, distinct steps, got {steps}")
    return points


def _model_name(points: Sequence[Any]) -> str:
    spec = points[0].spec
    repo, at, _ = spec.partition("@")
    if at:
        return repo
    return Path(spec).parent.name or spec


def _windows_hash(windows: Sequence[np.ndarray]) -> str:
    digest = hashlib.sha256()
    for window in windows:
        digest.update(np.asarray(window, dtype="<i8").tobytes())
        digest.update(b"|")
    return "sha256:" + digest.hexdigest()


def _vocabulary(model: Any, tokenizer: Any) -> tuple[str, Any]:
    """What must match across a series: the tokenizer's vocabulary, else the vocab size."""
    if tokenizer is not None and hasattr(tokenizer, "get_vocab"):
        return "tokenizer vocabulary", tokenizer.get_vocab()
    return "vocab_size", getattr(model.config.get_text_config(), "vocab_size", None)


def checkpoint_stats(
    model: Any,
    tokenizer: Any,
    windows_ids: Sequence[Sequence[int]],
    point: Any,
    *,
    sink: str | int | Sequence[int] = "first",
    batch_size: int = 8,
) -> CheckpointStats:
    """Capture one checkpoint's row statistics on the series' windows.

    Parameters
    ----------
    model, tokenizer
        The checkpoint, as :func:`attncoda.load_model` returns them.
    windows_ids : sequence of sequence of int
        The series' token windows (the same for every checkpoint).
    point : SeriesPoint
        Which checkpoint this is (its ``step`` and ``label`` are recorded).
    sink : str, int or sequence of int
        Sink spec, as in :func:`collapse`.
    batch_size : int
        Windows per forward pass.

    Returns
    -------
    CheckpointStats
    """
    from attncoda.capture.capture import capture_windows

    windows = _check_windows(windows_ids)
    vocab = getattr(model.config.get_text_config(), "vocab_size", None)
    top = max(int(w.max()) for w in windows)
    if isinstance(vocab, int) and top >= vocab:
        raise AttncodaError(
            f"checkpoint {point.label} has a vocabulary of {vocab} tokens, but the windows hold "
            f"token id {top}: make the windows with this series' tokenizer"
        )
    cap = capture_windows(
        model,
        [w.tolist() for w in windows],
        batch_size=batch_size,
        sink=sink,
        tokenizer=tokenizer,
        record_rows="none",
    )
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


def _check_same_layout(first: CheckpointStats, other: CheckpointStats) -> None:
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


def _levels(sums: dict[str, np.ndarray], counts: np.ndarray):
    """Yield (level, layer, head, n_rows, means) from per-head sums ``(layer, head)``."""
    n_layers, n_heads = counts.shape

    def means(select):
        n = int(counts[select].sum())
        return n, {
            name: float(value[select].sum()) / n if n else math.nan for name, value in sums.items()
        }

    n, m = means(np.ones_like(counts, dtype=bool))
    yield "model", None, None, n, m
    for layer in range(n_layers):
        select = np.zeros_like(counts, dtype=bool)
        select[layer] = True
        n, m = means(select)
        yield "layer", layer, None, n, m
    for layer in range(n_layers):
        for head in range(n_heads):
            select = np.zeros_like(counts, dtype=bool)
            select[layer, head] = True
            n, m = means(select)
            yield "head", layer, head, n, m


def _share(delta_sink: float, delta_content: float, delta: float, atol: float):
    if not abs(delta) > atol:
        return None, f"|delta_entropy| = {abs(delta):.3g} nats <= share_atol {atol:g}: undefined"
    share = delta_sink / delta
    note = ""
    if delta_sink * delta_content < 0:
        note = "sink and content parts have opposite signs: share outside [0, 1]"
    return share, note


def collapse_pair(a: Any, b: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-head sums of the pair's row quantities, over rows with content at both ends.

    Parameters
    ----------
    a, b : objects with ``sink_mass``, ``entropy``, ``content_entropy``, ``has_content``
        Float64 / bool arrays ``(doc, layer, head, query_pos)`` of the two checkpoints (a
        :class:`attncoda.capture.capture.Capture` works).

    Returns
    -------
    sums : dict of str to ndarray
        ``(layer, head)`` sums over (doc, query_pos) of the pair's means (the names of
        :data:`COLUMNS` ``mean_sink_mass_from`` ... ``delta_content``); ``delta_sink`` is
        computed per row as ``dH - dH_content``.
    counts : ndarray of int64, shape (layer, head)
        The rows summed.
    """
    both = np.asarray(a.has_content, bool) & np.asarray(b.has_content, bool)
    s0, s1 = a.sink_mass, b.sink_mass
    h0, h1 = a.entropy, b.entropy
    q0, q1 = a.content_entropy, b.content_entropy
    delta = h1 - h0
    content = ((1.0 - s0) + (1.0 - s1)) / 2.0 * (q1 - q0)
    rows = {
        "mean_sink_mass_from": s0,
        "mean_sink_mass_to": s1,
        "entropy_from": h0,
        "entropy_to": h1,
        "content_entropy_from": q0,
        "content_entropy_to": q1,
        "delta_entropy": delta,
        "delta_sink": delta - content,
        "delta_content": content,
    }
    sums = {
        name: np.where(both, np.asarray(value, np.float64), 0.0).sum(axis=(0, 3))
        for name, value in rows.items()
    }
    return sums, both.sum(axis=(0, 3)).astype(np.int64)


def _pair_records(
    model, kind, a: CheckpointStats, b: CheckpointStats, atol: float
) -> list[dict[str, Any]]:
    sums, counts = collapse_pair(a, b)
    records = []
    for level, layer, head, n, means in _levels(sums, counts):
        share, note = _share(
            means["delta_sink"], means["delta_content"], means["delta_entropy"], atol
        )
        if n == 0:
            share, note = None, "no row has content at both checkpoints"
        records.append(
            {
                "model": model,
                "pair_kind": kind,
                "pair_from": a.step,
                "pair_to": b.step,
                "label_from": a.label,
                "label_to": b.label,
                "level": level,
                "layer": layer,
                "head": head,
                "n_rows": n,
                **means,
                "sink_share": share,
                "sink_share_note": note,
            }
        )
    return records


def _checkpoint_records(model, stats: CheckpointStats) -> list[dict[str, Any]]:
    has = np.asarray(stats.has_content, bool)
    values = {
        "mean_sink_mass": stats.sink_mass,
        "entropy": stats.entropy,
        "content_entropy": stats.content_entropy,
        "sink_balance": stats.sink_balance,
    }
    sums = {k: np.where(has, v, 0.0).sum(axis=(0, 3)) for k, v in values.items()}
    counts = has.sum(axis=(0, 3)).astype(np.int64)
    return [
        {
            "model": model,
            "step": stats.step,
            "label": stats.label,
            "level": level,
            "layer": layer,
            "head": head,
            "n_rows": n,
            **means,
        }
        for level, layer, head, n, means in _levels(sums, counts)
    ]


def _frame(records: list[dict[str, Any]], columns: Sequence[str], floats: Sequence[str]):
    import pandas as pd

    frame = pd.DataFrame.from_records(records, columns=list(columns))
    for name in ("layer", "head"):
        frame[name] = pd.array(frame[name].tolist(), dtype="Int64")
    frame["n_rows"] = frame["n_rows"].astype(np.int64)
    for name in floats:
        frame[name] = frame[name].astype(np.float64)
    if "sink_share" in frame:
        frame["sink_share"] = pd.array(frame["sink_share"].tolist(), dtype="Float64")
        frame["sink_share_note"] = frame["sink_share_note"].astype(str)
    return frame


def _model_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    keep = (
        "pair_from",
        "pair_to",
        "n_rows",
        "delta_entropy",
        "delta_sink",
        "delta_content",
        "sink_share",
        "sink_share_note",
        "entropy_from",
        "entropy_to",
        "mean_sink_mass_from",
        "mean_sink_mass_to",
    )
    return {k: records[0][k] for k in keep}


def collapse(
    series_points: Sequence[Any] | str | os.PathLike[str],
    windows_ids: Sequence[Sequence[int]],
    *,
    sink: str | int | Sequence[int] = "first",
    batch_size: int = 8,
    progress: bool = False,
    loader: Callable[[str], tuple[Any, Any, Any]] | None = None,
    model: str | None = None,
    share_atol: float = DEFAULT_SHARE_ATOL,
) -> CollapseResult:
    """Mean entropy per checkpoint, and the exact sink/content split of its changes.

    Parameters
    ----------
    series_points : sequence of SeriesPoint, or a series spec
        At least two checkpoints in increasing step order
        (:func:`attncoda.models.series.parse_series`).
    windows_ids : sequence of sequence of int
        Token windows (at least 2 tokens each; :class:`attncoda.data.corpus.Window`
        objects work), made with the series' tokenizer; every checkpoint reads the same ones.
    sink : str, int or sequence of int
        Sink spec (``"first"``: the first real token). It must give the same sink keys at
        every checkpoint (``"auto"`` usually does not).
    batch_size : int
        Windows per forward pass.
    progress : bool
        Show a progress bar over checkpoints.
    loader : callable, optional
        ``loader(spec) -> (model, tokenizer, info)``; default
        :func:`attncoda.models.load.load_model`.
    model : str, optional
        Name in the tables; default the hub repository, or the series folder's name.
    share_atol : float
        ``sink_share`` is undefined (``<NA>``) where ``|delta_entropy| <= share_atol`` nats.

    Returns
    -------
    CollapseResult

    Raises
    ------
    AttncodaError
        Fewer than two checkpoints, bad windows, a checkpoint whose tokenizer vocabulary (or,
        without a tokenizer, vocab size) differs from the first one's, a token id beyond a
        checkpoint's vocabulary, another architecture, sink keys that move between
        checkpoints, and every error of loading or capture.

    Notes
    -----
    Only the first, the previous and the current checkpoint's statistics are held at once,
    so a 154-checkpoint Pythia series needs the memory of three captures.
    """
    points = _check_points(series_points)
    windows = _check_windows(windows_ids)
    if (
        isinstance(share_atol, bool)
        or not isinstance(share_atol, (int, float))
        or not (share_atol >= 0)
    ):
        raise AttncodaError(f"share_atol must be a non-negative number, got {share_atol!r}")
    if loader is None:
        from attncoda.models.load import load_model

        loader = load_model
    name = model if model is not None else _model_name(points)
    iterator: Any = points
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(points, desc="collapse", unit="checkpoint")

    def captured():
        reference: tuple[str, Any] | None = None
        for point in iterator:
            net, tokenizer, _ = loader(point.spec)
            vocabulary = _vocabulary(net, tokenizer)
            if reference is None:
                reference = vocabulary
            elif vocabulary != reference:
                raise AttncodaError(
                    f"checkpoint {point.label} has another {vocabulary[0]} than "
                    f"{points[0].label} (compared: {reference[0]}): a series must share one "
                    f"tokenizer"
                )
            stats = checkpoint_stats(
                net, tokenizer, windows, point, sink=sink, batch_size=batch_size
            )
            del net
            yield stats

    return collapse_from_stats(
        captured(), windows, points=points, model=name, sink=sink, share_atol=share_atol
    )


def collapse_from_stats(
    stats: Iterable[CheckpointStats],
    windows_ids: Sequence[Any],
    *,
    points: Sequence[Any],
    model: str,
    sink: str | int | Sequence[int] = "first",
    share_atol: float = DEFAULT_SHARE_ATOL,
) -> CollapseResult:
    """Assemble :class:`CollapseResult` from each checkpoint's statistics, in step order.

    Parameters
    ----------
    stats : iterable of CheckpointStats
        One per point, in the order of ``points`` (a generator keeps three in memory).
    windows_ids : sequence of sequence of int
        The windows every checkpoint read (for the summary's counts and hash).
    points : sequence of SeriesPoint
        The series.
    model : str
        Name in the tables.
    sink : str, int or sequence of int
        The sink spec the statistics were captured with (recorded).
    share_atol : float
        As in :func:`collapse`.

    Returns
    -------
    CollapseResult
        Identical to what :func:`collapse` returns for the same checkpoints.
    """
    windows = _check_windows(windows_ids)
    table, checkpoints, pairs, first_last = _assemble(stats, model, share_atol)
    facts = {
        "n_windows": len(windows),
        "n_tokens": int(sum(len(w) for w in windows)),
        "windows_sha256": _windows_hash(windows),
    }
    points_facts = [{"step": p.step, "label": p.label, "spec": p.spec} for p in points]
    summary = _summary(model, sink, points_facts, facts, share_atol, pairs, first_last)
    return CollapseResult(table=table, checkpoints=checkpoints, summary=summary)


def _assemble(
    stats: Iterable[CheckpointStats], model: str, share_atol: float
) -> tuple[Any, Any, list[dict[str, Any]], dict[str, Any]]:
    """The pair and checkpoint tables of a series' statistics (in step order), the
    model-level numbers of each consecutive pair and those of the first-to-last pair."""
    first: CheckpointStats | None = None
    previous: CheckpointStats | None = None
    pair_records: list[dict[str, Any]] = []
    checkpoint_records: list[dict[str, Any]] = []
    summary_pairs = []
    n_seen = 0
    for current in stats:
        n_seen += 1
        if first is None:
            first = current
        _check_same_layout(first, current)
        checkpoint_records.extend(_checkpoint_records(model, current))
        if previous is not None:
            records = _pair_records(model, "consecutive", previous, current, share_atol)
            pair_records.extend(records)
            summary_pairs.append(_model_summary(records))
        previous = current
    if first is None or previous is None or n_seen < 2:
        raise AttncodaError(f"collapse needs at least 2 checkpoints' statistics, got {n_seen}")
    last_records = _pair_records(model, "first_last", first, previous, share_atol)
    pair_records.extend(last_records)
    table = _frame(pair_records, COLUMNS, _PAIR_MEANS)
    checkpoints = _frame(checkpoint_records, CHECKPOINT_COLUMNS, _CHECKPOINT_MEANS)
    return table, checkpoints, summary_pairs, _model_summary(last_records)


def _summary(
    model: str,
    sink: Any,
    points: list[dict[str, Any]],
    windows: dict[str, Any],
    share_atol: float,
    pairs: list[dict[str, Any]],
    first_last: dict[str, Any],
) -> dict[str, Any]:
    """The JSON summary of :class:`CollapseResult` (``windows``: its window counts and hash)."""
    return {
        "model": model,
        "sink": str(sink),
        "points": points,
        **windows,
        "share_atol": float(share_atol),
        "share_definition": "sink_share = sum of dH_sink / sum of dH over the rows with "
        "content at both checkpoints; dH_content = ((1-s0)+(1-s1))/2 * (H(q1)-H(q0)), "
        "dH_sink = dH - dH_content (nats); exact, no keep/drop convention",
        "pairs": pairs,
        "first_last": first_last,
    }


_STAT_ARRAYS = ("sink_mass", "entropy", "content_entropy", "sink_balance")


def stats_frames(stats: CheckpointStats) -> tuple[Any, Any]:
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


def stats_from_frames(step: int, label: str, rows: Any, sinks: Any) -> CheckpointStats:
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


def write_collapse(result: CollapseResult, out_dir: str | os.PathLike[str]) -> tuple[Path, ...]:
    """Write ``collapse.parquet``, ``collapse_checkpoints.parquet`` and ``collapse.json``.

    Parameters
    ----------
    result : CollapseResult
    out_dir : path-like
        Created if needed; each file is written atomically.

    Returns
    -------
    tuple of Path
        The three paths, in that order.
    """
    out = Path(out_dir)
    return (
        write_table(result.table, out / "collapse.parquet"),
        write_table(result.checkpoints, out / "collapse_checkpoints.parquet"),
        atomic_write_json(out / "collapse.json", result.summary),
    )


@dataclass(frozen=True)
class Settings:
    """Settings of the collapse experiment: every checkpoint reads the same ``docs`` windows
    of ``tokens`` tokens (made with the series' first tokenizer)."""

    docs: int = field(default=16, metadata={"help": "corpus windows every checkpoint reads"})
    tokens: int = field(default=128, metadata={"help": "tokens per window"})


def run(inputs: Inputs, settings: Settings) -> Tables:
    """One checkpoint's row statistics (:func:`checkpoint_stats`) as the tables
    ``collapse_rows`` and ``collapse_sinks`` (:func:`stats_frames`).

    The summary records what :func:`combine` needs beside the frames: the checkpoint's
    ``step``, ``label`` and ``spec``, the series ``model`` name, the ``sink`` spec and the
    windows' ``n_windows``, ``n_tokens`` and ``windows_sha256``.
    """
    model, tokenizer, _ = inputs.need("loaded")
    point = inputs.need("checkpoint")
    windows = _check_windows(inputs.need("windows"))
    stats = checkpoint_stats(model, tokenizer, windows, point, sink=inputs.sink)
    rows, sinks = stats_frames(stats)
    summary = {
        "model": inputs.model,
        "sink": str(inputs.sink),
        "step": int(point.step),
        "label": str(point.label),
        "spec": str(point.spec),
        "n_windows": len(windows),
        "n_tokens": int(sum(len(w) for w in windows)),
        "windows_sha256": _windows_hash(windows),
    }
    return Tables(frames={"collapse_rows": rows, "collapse_sinks": sinks}, summary=summary)


def combine(units: Sequence[Tables], settings: Settings) -> Tables:
    """The run's collapse tables from the tables of every checkpoint unit of the series.

    Parameters
    ----------
    units : sequence of Tables
        One per checkpoint, as :func:`run` made them (stored frames may carry the run's key
        columns; they are not read). Each summary must hold what :func:`run` records.
    settings : Settings

    Returns
    -------
    Tables
        Frames ``collapse`` and ``collapse_checkpoints`` (:class:`CollapseResult`), each with
        a ``revision`` column (``"-"``: they span the series) after ``model``; the summary is
        :attr:`CollapseResult.summary`.

    Raises
    ------
    AttncodaError
        Fewer than two checkpoints, two with one step, checkpoints that read other windows
        or another sink, and every error of :func:`collapse_from_stats`.
    """
    facts = [dict(t.summary) for t in units]
    for fact in facts:
        missing = [k for k in ("step", "label", "model", "sink", "windows_sha256") if k not in fact]
        if missing:
            raise AttncodaError(
                f"a collapse unit's summary lacks {missing[0]!r}: rerun its checkpoint"
            )
    order = sorted(range(len(units)), key=lambda i: int(facts[i]["step"]))
    steps = [int(facts[i]["step"]) for i in order]
    if len(set(steps)) != len(steps):
        raise AttncodaError(f"collapse units must have distinct steps, got {sorted(steps)}")
    first = facts[order[0]] if order else {}
    for i in order:
        for key in ("model", "sink", "n_windows", "n_tokens", "windows_sha256"):
            if facts[i].get(key) != first.get(key):
                raise AttncodaError(
                    f"checkpoint {facts[i]['label']} has {key} {facts[i].get(key)!r}, "
                    f"checkpoint {first['label']} {first.get(key)!r}: every checkpoint of a "
                    "series reads the same windows with the same sink"
                )
    stats = (
        stats_from_frames(
            facts[i]["step"],
            facts[i]["label"],
            units[i].frames["collapse_rows"],
            units[i].frames["collapse_sinks"],
        )
        for i in order
    )
    model = str(first.get("model", ""))
    table, checkpoints, pairs, first_last = _assemble(stats, model, DEFAULT_SHARE_ATOL)
    points = [
        {"step": facts[i]["step"], "label": facts[i]["label"], "spec": facts[i].get("spec")}
        for i in order
    ]
    windows = {k: first[k] for k in ("n_windows", "n_tokens", "windows_sha256") if k in first}
    summary = _summary(model, first["sink"], points, windows, DEFAULT_SHARE_ATOL, pairs, first_last)
    frames = {}
    for name, frame in (("collapse", table), ("collapse_checkpoints", checkpoints)):
        frame = frame.copy()
        frame.insert(1, "revision", NO_REVISION)
        frames[name] = frame
    return Tables(frames=frames, summary=summary)


EXPERIMENT = Experiment(
    name="collapse",
    needs=("model", "windows", "checkpoint"),
    after=(),
    settings=Settings,
    run=run,
    tables=("collapse_rows", "collapse_sinks"),
    combine=combine,
)
