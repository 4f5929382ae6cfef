r"""The exact sink/content split of entropy changes between checkpoints, as tables
(docs/design.md, "The mathematics" and "The experiments").

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

The Shapley rule is a convention: it splits the interaction of the two factors in half. With
``H(p) = h(s) + s H(p_S / s) + (1-s) H(q)``, the two one-sided orderings are exact
decompositions too, and the Shapley parts are their average:

- *sink first* (move the sink part ``s, p_S / s`` to state 1, then the content ``q``):
  ``dH_content = (1-s_1) (H(q_1) - H(q_0))``, the sink part the rest;
- *content first* (move ``q``, then the sink part):
  ``dH_content = (1-s_0) (H(q_1) - H(q_0))``, the sink part the rest.

Their sink parts (``delta_sink_sink_first``, ``delta_sink_content_first``) are summed over
rows as the Shapley parts are, and the share of each ordering is its summed sink part over
the summed ``dH``; the smaller share is ``sink_share_low``, the larger ``sink_share_high``.
The Shapley share lies between them (it is their mean): a statement such as "x% of the
entropy drop is the sink" is the Shapley share together with that range.

The share and its range are undefined where the change lies within its own rounding,
``|delta_entropy| <= u (n + 2) (entropy_from + entropy_to + log n)`` (``u = 2**-24``, the
float32 unit roundoff; ``n`` the most keys a row sees, the ``n_keys`` column; each row
entropy is a float32 sum over its keys: :func:`share_rounding`, the rounding
:class:`~attncoda.experiments.contract.RowStatistic` holds ``delta_entropy`` to, docs/design.md
"Verdicts and ratios within rounding"), or ``<= share_atol``: a ratio of a change of the
last bits is noise, which two devices or two kernels give differently (-18 and -85 for one
head at ``4e-8`` nats). It is then ``<NA>`` (null in Parquet, ``None`` in JSON) and
``sink_share_note`` says why. When the two parts have opposite signs the share lies outside
``[0, 1]`` (the note says so): a sink part of ``-0.3`` nats and a content part of ``+0.1``
give ``dH = -0.2`` and a share of 1.5; where a part lies within its own rounding of 0
(:data:`PART_MAGNITUDES`), its sign is not resolved and the note says that instead.

Both are verdicts at a threshold, and each row states whether it lies on its edge:
``share_edge`` where ``|delta_entropy|`` lies within its rounding of the null bound (either
side: a share null here may be measured on another run, and the other way round; a share
nulled by rounding always is), ``note_edge`` where the note may read otherwise on another
run (``share_edge``, or a part within twice its rounding of 0: :func:`share_verdict`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.collapse._null import (
    PART_MAGNITUDES,
    SHARES,
    ShareVerdict,
    part_rounding,
    share_rounding,
    share_verdict,
)
from attncoda.experiments.collapse._stats import CheckpointStats, check_same_layout

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "DEFAULT_SHARE_ATOL",
    "PART_MAGNITUDES",
    "SHARE_METHOD",
    "ShareVerdict",
    "collapse_pair",
    "part_rounding",
    "series_tables",
    "share_rounding",
    "share_verdict",
]

#: Columns of the pair table (``CollapseResult.table``, ``collapse.parquet``), in order.
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
    "n_keys",
    "mean_sink_mass_from",
    "mean_sink_mass_to",
    "entropy_from",
    "entropy_to",
    "content_entropy_from",
    "content_entropy_to",
    "delta_entropy",
    "delta_sink",
    "delta_content",
    "delta_sink_sink_first",
    "delta_sink_content_first",
    "sink_share",
    "sink_share_low",
    "sink_share_high",
    "share_edge",
    "sink_share_method",
    "sink_share_note",
    "note_edge",
)
#: What ``sink_share`` is and what its range spans (the ``sink_share_method`` column).
SHARE_METHOD = "two-factor Shapley; range: the sink-first and content-first orderings"
#: Columns of the checkpoint table (``CollapseResult.checkpoints``).
CHECKPOINT_COLUMNS = (
    "model",
    "step",
    "label",
    "level",
    "layer",
    "head",
    "n_rows",
    "n_keys",
    "mean_sink_mass",
    "entropy",
    "content_entropy",
    "sink_balance",
)
# The float columns of each table: its means (and, for pairs, the change and its parts).
_PAIR_MEANS = COLUMNS[
    COLUMNS.index("mean_sink_mass_from") : COLUMNS.index("delta_sink_content_first") + 1
]
_CHECKPOINT_MEANS = CHECKPOINT_COLUMNS[CHECKPOINT_COLUMNS.index("mean_sink_mass") :]
DEFAULT_SHARE_ATOL = 1e-9


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


def collapse_pair(a: Any, b: Any) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-head sums of the pair's row quantities, over rows with content at both ends.

    Parameters
    ----------
    a, b : objects with ``sink_mass``, ``entropy``, ``content_entropy``, ``has_content``
        Float64 / bool arrays ``(doc, layer, head, query_pos)`` of the two checkpoints (a
        :class:`attncoda.capture.Capture` works).

    Returns
    -------
    sums : dict of str to ndarray
        ``(layer, head)`` sums over (doc, query_pos) of the pair's means (the names of
        :data:`COLUMNS` ``mean_sink_mass_from`` ... ``delta_sink_content_first``); each sink
        part is computed per row as ``dH`` minus its content part: ``delta_sink`` with the
        Shapley content part, ``delta_sink_sink_first`` with ``(1-s1)(H(q1)-H(q0))``,
        ``delta_sink_content_first`` with ``(1-s0)(H(q1)-H(q0))``.
    counts : ndarray of int64, shape (layer, head)
        The rows summed.
    """
    both = np.asarray(a.has_content, bool) & np.asarray(b.has_content, bool)
    s0, s1 = a.sink_mass, b.sink_mass
    h0, h1 = a.entropy, b.entropy
    q0, q1 = a.content_entropy, b.content_entropy
    delta = h1 - h0
    content = ((1.0 - s0) + (1.0 - s1)) / 2.0 * (q1 - q0)
    # The one-sided orderings: the content moves at the sink part it finds (s1 when the sink
    # moved first, s0 when the content moves first); the Shapley part is their mean.
    content_after_sink = (1.0 - s1) * (q1 - q0)
    content_before_sink = (1.0 - s0) * (q1 - q0)
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
        "delta_sink_sink_first": delta - content_after_sink,
        "delta_sink_content_first": delta - content_before_sink,
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
    keys = _keys(a)
    records = []
    for level, layer, head, n, means in _levels(sums, counts):
        verdict = share_verdict(means, atol, keys)
        if n == 0:
            verdict = ShareVerdict(
                dict.fromkeys(SHARES), "no row has content at both checkpoints", False, False
            )
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
                "n_keys": keys,
                **means,
                **verdict.shares,
                "share_edge": verdict.share_edge,
                "sink_share_method": SHARE_METHOD,
                "sink_share_note": verdict.note,
                "note_edge": verdict.note_edge,
            }
        )
    return records


def _keys(stats: CheckpointStats) -> int:
    """The most keys a row of the series sees: the windows' padded length (``n_keys``)."""
    return int(np.shape(stats.entropy)[-1])


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
            "n_keys": _keys(stats),
            **means,
        }
        for level, layer, head, n, means in _levels(sums, counts)
    ]


def _frame(records: list[dict[str, Any]], columns: Sequence[str], floats: Sequence[str]):
    import pandas as pd

    frame = pd.DataFrame.from_records(records, columns=list(columns))
    for name in ("layer", "head"):
        frame[name] = pd.array(frame[name].tolist(), dtype="Int64")
    for name in ("n_rows", "n_keys"):
        frame[name] = frame[name].astype(np.int64)
    for name in floats:
        frame[name] = frame[name].astype(np.float64)
    if "sink_share" in frame:
        for name in SHARES:
            frame[name] = pd.array(frame[name].tolist(), dtype="Float64")
        frame["sink_share_method"] = frame["sink_share_method"].astype(str)
        frame["sink_share_note"] = frame["sink_share_note"].astype(str)
        for name in ("share_edge", "note_edge"):
            frame[name] = frame[name].astype(bool)
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
        "sink_share_low",
        "sink_share_high",
        "sink_share_note",
        "share_edge",
        "entropy_from",
        "entropy_to",
        "mean_sink_mass_from",
        "mean_sink_mass_to",
    )
    return {k: records[0][k] for k in keep}


def series_tables(
    stats: Iterable[CheckpointStats], model: str, share_atol: float
) -> tuple[pd.DataFrame, pd.DataFrame, list[dict[str, Any]], dict[str, Any]]:
    """The pair and checkpoint tables of a series' statistics (in step order), the
    model-level numbers of each consecutive pair and those of the first-to-last pair.

    Parameters
    ----------
    stats : iterable of CheckpointStats
        One per checkpoint, in step order (a generator keeps three in memory).
    model : str
        Name in the tables.
    share_atol : float
        ``sink_share`` is undefined (``<NA>``) where ``|delta_entropy| <= share_atol`` nats,
        as it is where ``|delta_entropy|`` lies within its rounding (:func:`share_rounding`).
        Rows within rounding of either threshold are flagged (``share_edge``).

    Returns
    -------
    table, checkpoints : pandas.DataFrame
        Columns :data:`COLUMNS` and :data:`CHECKPOINT_COLUMNS`.
    pairs : list of dict
        The model-level numbers of each consecutive pair.
    first_last : dict
        Those of the first-to-last pair.
    """
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
        check_same_layout(first, current)
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
