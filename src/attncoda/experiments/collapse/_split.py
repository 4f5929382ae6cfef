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
``|delta_entropy| <= u (n + 2) (entropy_from + entropy_to)`` (``u = 2**-24``, the float32
unit roundoff; ``n`` the most keys a row sees: each row entropy is a float32 sum over its
keys, which rounding moves by up to ``(n + 2) u H``; entropies are non-negative, so
``entropy_from + entropy_to`` is the mean of ``|H(p_0)| + |H(p_1)|`` over the rows;
:func:`share_rounding`, docs/design.md, "Verdicts and ratios within rounding"), or
``<= share_atol``: a ratio of a change of the
last bits is noise, which two devices or two kernels give differently (-18 and -85 for one
head at ``4e-8`` nats). It is then ``<NA>`` (null in Parquet, ``None`` in JSON) and
``sink_share_note`` says why. When
the two parts have opposite signs the share lies outside ``[0, 1]`` (the note says so): a
sink part of ``-0.3`` nats and a content part of ``+0.1`` give ``dH = -0.2`` and a share of
1.5.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.collapse._stats import CheckpointStats, check_same_layout
from attncoda.experiments.contract import rounding_bound, within_rounding

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "CHECKPOINT_COLUMNS",
    "COLUMNS",
    "DEFAULT_SHARE_ATOL",
    "SHARE_METHOD",
    "collapse_pair",
    "series_tables",
    "share_rounding",
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
    "sink_share_method",
    "sink_share_note",
)
#: What ``sink_share`` is and what its range spans (the ``sink_share_method`` column).
SHARE_METHOD = "two-factor Shapley; range: the sink-first and content-first orderings"
_SHARES = ("sink_share", "sink_share_low", "sink_share_high")
#: Columns of the checkpoint table (``CollapseResult.checkpoints``).
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


def share_rounding(entropy_from: float, entropy_to: float, keys: int = 0) -> float:
    """The rounding bound of a mean entropy change, ``u (n + 2) (entropy_from +
    entropy_to)`` nats (``u = 2**-24``, ``n`` the most keys a row sees: the windows' padded
    length). Each row entropy is a float32 sum over its keys, which its rounding moves by up
    to ``(n + 2) u H`` (the accumulation term of the exact path's bound, docs/design.md
    "Error bounds"), and a difference of two mean entropies by the sum of theirs: the part
    of the capture's error bound that needs nothing but the entropies and the key count. Two
    devices, or two kernels, that differ in summation order differ by less. A share over a
    ``|delta_entropy|`` within it is null."""
    return rounding_bound(entropy_from, entropy_to) * (max(int(keys), 0) + 2)


def _share(
    means: dict[str, float], atol: float, keys: int = 0
) -> tuple[dict[str, float | None], str]:
    """The Shapley share of one level's means, its range over the two orderings, and a note
    (``keys``: the most keys a row sees, for :func:`share_rounding`)."""
    delta, delta_sink = means["delta_entropy"], means["delta_sink"]
    bound = share_rounding(means["entropy_from"], means["entropy_to"], keys)
    if within_rounding(delta, bound) and bound >= atol:  # else share_atol is the wider
        # The change itself is not printed: its last digits are what two devices differ in.
        note = (
            f"|delta_entropy| is within its float32 rounding {bound:.2g} nats "
            f"(u (n + 2) (H before + H after), n = {keys} keys): share undefined"
        )
        return dict.fromkeys(_SHARES), note
    if within_rounding(delta, atol):
        note = f"|delta_entropy| = {abs(delta):.3g} nats <= share_atol {atol:g}: undefined"
        return dict.fromkeys(_SHARES), note
    orderings = sorted(
        (means["delta_sink_sink_first"] / delta, means["delta_sink_content_first"] / delta)
    )
    note = ""
    if delta_sink * means["delta_content"] < 0:
        note = "sink and content parts have opposite signs: share outside [0, 1]"
    shares: dict[str, float | None] = dict(
        zip(_SHARES, (delta_sink / delta, *orderings), strict=True)
    )
    return shares, note


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
    keys = int(np.shape(a.entropy)[-1])  # the padded window: the most keys a row sees
    records = []
    for level, layer, head, n, means in _levels(sums, counts):
        shares, note = _share(means, atol, keys)
        if n == 0:
            shares, note = dict.fromkeys(_SHARES), "no row has content at both checkpoints"
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
                **shares,
                "sink_share_method": SHARE_METHOD,
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
        for name in _SHARES:
            frame[name] = pd.array(frame[name].tolist(), dtype="Float64")
        frame["sink_share_method"] = frame["sink_share_method"].astype(str)
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
        "sink_share_low",
        "sink_share_high",
        "sink_share_note",
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
