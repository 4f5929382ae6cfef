r"""Collapse: entropy across training checkpoints, and its change split exactly into sink
and content parts (docs/design.md, "The mathematics" and "The experiments").

Every checkpoint of a series reads the same windows. A unit of the experiment reads one
checkpoint's row statistics from the runner's capture of those windows, made with the run's
options (:mod:`attncoda.experiments.collapse._stats`); :func:`combine` assembles every
checkpoint's into the pair tables of :mod:`attncoda.experiments.collapse._split`,
where the entropy change of each pair is split by the two-factor Shapley rule and
``sink_share = sum dH_sink / sum dH`` over the rows of a head, a layer or the model, with
its range over the two one-sided orderings (sink first, content first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.experiments.collapse._figure import draw
from attncoda.experiments.collapse._headline import HEADLINE
from attncoda.experiments.collapse._held import HELD
from attncoda.experiments.collapse._section import collapse_section
from attncoda.experiments.collapse._split import (
    DEFAULT_SHARE_ATOL,
    series_tables,
)
from attncoda.experiments.collapse._stats import (
    CheckpointStats,
    capture_stats,
    check_windows,
    stats_frames,
    stats_from_frames,
    windows_hash,
)
from attncoda.experiments.collapse._summary import summary
from attncoda.experiments.contract import (
    Command,
    Experiment,
    Inputs,
    Tables,
    View,
    captured_ids,
    check_captured,
    setting,
)
from attncoda.models.spec import NO_REVISION

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CollapseResult",
    "EXPERIMENT",
    "Settings",
    "collapse_from_stats",
    "combine",
]


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
        with content at both checkpoints; ``n_keys`` is the most keys a row sees (the
        windows' padded length: the length of the float32 sums each row statistic comes
        from). Every other number is a mean over those rows:
        sink mass, ``H(p)`` and ``H(q)`` at each end (nats), ``delta_entropy`` (``dH``),
        ``delta_sink`` and ``delta_content`` (its two-factor Shapley split; they sum to
        ``dH``), ``delta_sink_sink_first`` and ``delta_sink_content_first`` (the sink part
        under each one-sided ordering, :mod:`attncoda.experiments.collapse._split`).
        ``sink_share = delta_sink / delta_entropy``, ``sink_share_low`` and
        ``sink_share_high`` (the smaller and the larger share of the two orderings, which
        bound it; nullable ``Float64``, ``<NA>`` when ``|dH|`` lies within its float32
        rounding, ``u (n + 2) (H before + H after + log n)`` with ``n = n_keys``, or
        ``<= share_atol``), ``share_edge`` (bool: ``|dH|`` lies within that rounding of the
        null bound, either side, so that another run may null a share measured here or
        measure one nulled here; every share nulled by rounding is on it),
        ``sink_share_method`` (what the share and its range are), ``sink_share_note``
        (``""``, or why the share is undefined, that it lies outside ``[0, 1]``, or that a
        part's sign is not resolved: the part lies within its rounding of 0) and
        ``note_edge`` (bool: the note may read otherwise on another run: ``share_edge``, or
        a part within twice its rounding of 0;
        :func:`~attncoda.experiments.collapse.share_verdict`).
    checkpoints : pandas.DataFrame
        ``collapse_checkpoints.parquet``: one row per (checkpoint, level, layer, head),
        columns :data:`CHECKPOINT_COLUMNS`: ``n_rows`` and ``n_keys`` as in ``table``, and
        means over the rows with content at that checkpoint of sink mass, ``H(p)``, ``H(q)``
        (nats) and sink balance.
    summary : dict
        JSON-ready: model, sink, points, window counts and hash, ``share_atol``, and the
        model-level numbers of every pair (``pairs``) and of ``first_last``.
    """

    table: pd.DataFrame
    checkpoints: pd.DataFrame
    summary: dict[str, Any]


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
        ``sink_share`` is undefined (``<NA>``) where ``|delta_entropy| <= share_atol`` nats,
        as it is wherever ``|delta_entropy|`` lies within its float32 rounding
        (:func:`~attncoda.experiments.collapse.share_rounding`).

    Returns
    -------
    CollapseResult
        The tables and summary of the series.
    """
    windows = check_windows(windows_ids)
    if (
        isinstance(share_atol, bool)
        or not isinstance(share_atol, (int, float))
        or not (share_atol >= 0)
    ):
        raise AttncodaError(f"share_atol must be a non-negative number, got {share_atol!r}")
    table, checkpoints, pairs, first_last = series_tables(stats, model, share_atol)
    series = {
        "model": model,
        "sink": str(sink),
        "points": [{"step": p.step, "label": p.label, "spec": p.spec} for p in points],
        "n_windows": len(windows),
        "n_tokens": int(sum(len(w) for w in windows)),
        "windows_sha256": windows_hash(windows),
    }
    summary = _summary(series, share_atol, pairs, first_last)
    return CollapseResult(table=table, checkpoints=checkpoints, summary=summary)


def _summary(
    series: dict[str, Any],
    share_atol: float,
    pairs: list[dict[str, Any]],
    first_last: dict[str, Any],
) -> dict[str, Any]:
    """The JSON summary of :class:`CollapseResult`: the ``series`` (its ``model``, ``sink``,
    ``points`` and window counts and hash), then the share's definitions and numbers."""
    return {
        **series,
        "share_atol": float(share_atol),
        "share_rounding": "a share and its range are null where |dH| <= u * (n + 2) * (H "
        "before + H after + log n), u = 2**-24 (float32 unit roundoff), n the most keys a row "
        "sees (each row entropy is a float32 sum over its keys), or <= share_atol; "
        "share_edge: |dH| lies within that rounding of the null bound, and another run may "
        "null a share measured here or measure one nulled here",
        "share_definition": "sink_share = sum of dH_sink / sum of dH over the rows with "
        "content at both checkpoints; dH_content = ((1-s0)+(1-s1))/2 * (H(q1)-H(q0)), "
        "dH_sink = dH - dH_content (nats): a two-factor Shapley attribution, no keep/drop "
        "convention; sink_share_low and sink_share_high are the shares of the two one-sided "
        "orderings (content part (1-s1)(H(q1)-H(q0)) when the sink moves first, "
        "(1-s0)(H(q1)-H(q0)) when the content does), each also exact, which bound it",
        "pairs": pairs,
        "first_last": first_last,
    }


@dataclass(frozen=True)
class Settings:
    """Settings of the collapse experiment: every checkpoint reads the same ``docs`` windows
    of ``max_tokens`` tokens (made with the series' first tokenizer)."""

    docs: int = setting(16, "corpus windows every checkpoint reads", at_least=1)
    max_tokens: int = setting(128, "tokens per window (the window length)", at_least=1)


def run(inputs: Inputs, settings: Settings) -> Tables:
    """One checkpoint's row statistics (:func:`capture_stats`) as the tables
    ``collapse_rows`` and ``collapse_sinks`` (:func:`stats_frames`).

    The statistics are those of the unit's ``capture``: in a run, the runner's capture of
    the series' ``windows`` by the checkpoint, made with the run's options (method, kernel,
    sink, seed, dtype, device: collapse captures nothing itself), which must have read
    exactly those windows; with attention handed in (``given=("capture", "checkpoint")``,
    no ``windows``), the capture's own, its windows the tokens it holds. The summary
    records what :func:`combine` needs beside the frames: the checkpoint's ``step``,
    ``label`` and ``spec``, the series ``model`` name, the ``sink`` spec, the capture's
    ``method`` and ``kernel``, and the windows' ``n_windows``, ``n_tokens`` and
    ``windows_sha256``.
    """
    point = inputs.checkpoint
    cap = inputs.capture
    if inputs.given:  # attention handed in, without windows: the capture holds its tokens
        windows = captured_ids(cap)
    else:
        windows = check_windows(inputs.windows)
        check_captured(cap, windows, "series windows")
    rows, sinks = stats_frames(capture_stats(cap, point))
    summary = {
        "model": inputs.model,
        "sink": str(inputs.sink),
        "method": str(cap.method),
        "kernel": cap.kernel,
        "step": int(point.step),
        "label": str(point.label),
        "spec": str(point.spec),
        "n_windows": len(windows),
        "n_tokens": int(sum(len(w) for w in windows)),
        "windows_sha256": windows_hash(windows),
    }
    return Tables(frames={"collapse_rows": rows, "collapse_sinks": sinks}, summary=summary)


def every_window(windows: Sequence[Any], settings: Settings) -> Sequence[Any]:
    """The windows the runner captures for a collapse unit: every window of the series, at
    the unit's checkpoint."""
    return windows


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
        for key in ("model", "sink", "method", "n_windows", "n_tokens", "windows_sha256"):
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
    table, checkpoints, pairs, first_last = series_tables(stats, model, DEFAULT_SHARE_ATOL)
    series: dict[str, Any] = {
        "model": model,
        "sink": str(first["sink"]),
        "points": [
            {"step": facts[i]["step"], "label": facts[i]["label"], "spec": facts[i].get("spec")}
            for i in order
        ],
        **{k: first[k] for k in ("n_windows", "n_tokens", "windows_sha256") if k in first},
    }
    summary = _summary(series, DEFAULT_SHARE_ATOL, pairs, first_last)
    frames = {}
    for name, frame in (("collapse", table), ("collapse_checkpoints", checkpoints)):
        frame = frame.copy()
        frame.insert(1, "revision", NO_REVISION)
        frames[name] = frame
    return Tables(frames=frames, summary=summary)


EXPERIMENT = Experiment(
    name="collapse",
    needs=("windows", "checkpoint", "capture"),
    given=("capture", "checkpoint"),
    captures=every_window,
    after=(),
    settings=Settings,
    run=run,
    tables=("collapse_rows", "collapse_sinks"),
    combine=combine,
    combined=("collapse", "collapse_checkpoints"),
    # Every column's rule: the means as row statistics, the changes by the means they are
    # made of, the shares through their parts (docs/design.md, "The same evidence, by one
    # rule"); a share or its note on its edge may go either way.
    held=HELD,
    view=View(
        title="Collapse: entropy over training, sink vs content",
        needs=("collapse",),
        section=collapse_section,
        figure_tables=("collapse",),
        figure=draw,
        units=("train",),
        headline=HEADLINE,
    ),
    command=Command(
        help="entropy change over checkpoints, split exactly",
        sources="series",
        summary=summary,
        doc="""Entropy collapse over checkpoints, its change split exactly into sink and content.

        ``source`` is a series spec (the shipped ``"bigram-backcopy"``,
        ``owner/name@step0,step512``, or a folder of ``stepN`` checkpoints), or a list of
        captures, one per checkpoint in training order, with ``steps`` their training steps
        and ``names`` the series name.""",
        source_help="bigram-backcopy (the shipped series), owner/name@step0,step512,... or "
        "a folder of stepN checkpoints",
    ),
)
