"""Gu et al.'s sink rate over recorded attention rows (docs/design.md, "The experiments").

Gu, Pang, Du, Liu, Zhang, Wang, Lin and Lin, "When Attention Sink Emerges in Language
Models: An Empirical View", ICLR 2025 (``sail-sg/Attention-Sink``,
``eval_sink_open_source.py``, ``compute_attention_sink``). In one window of ``T`` tokens,
one layer and one head, the score of key position ``k`` is the mean attention it receives
from the queries that see it::

    score[k] = sum_i A[i, k] / n_k

with ``n_k`` the number of queries whose row holds key ``k``: ``T - k`` in a causal model
(their ``ratios = arange(T, 0, -1)``), ``T`` in a bidirectional one (every query sees every
key; their code, written for causal models, would divide by ``T - k`` there too). The sink
rate at position ``k`` is the percentage of (window, layer, head) triples whose score
exceeds ``epsilon`` (theirs: 0.3, on windows of 64 tokens). Only windows longer than ``k``
count at ``k``. Probabilities, not the keep/drop conventions: the score is of the full row,
sink included, so no convention applies.

A triple counts by comparing its score with ``epsilon``, so each rate states how many of its
triples lie within float32 rounding of it (docs/design.md, "Verdicts and ratios within
rounding"): a score is a mean over queries of probabilities ``exp(log p)``, each of a
float32 log-softmax row over at most ``n`` keys, whose normaliser (a float32 sum of ``n``
terms) moves ``p`` by ``(n + 2) u p`` and whose rounded log by ``u p |log p| <= u / e``;
the sum over queries is float64. So a score moves by at most ``u (n + 2) (score + log n)``
(:func:`score_rounding`: the row statistic's rounding,
:class:`~attncoda.experiments.contract.RowStatistic`), and a triple within it of
``epsilon`` is *fragile*: above on one run, not on another. Each fragile triple moves a rate
by ``100 / n_triples`` percentage points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    FLOAT32_UNIT_ROUNDOFF,
    Command,
    Experiment,
    HeadRows,
    Inputs,
    Tables,
    View,
    setting,
)
from attncoda.experiments.sink_rate._figure import draw
from attncoda.experiments.sink_rate._held import HELD
from attncoda.experiments.sink_rate._section import sink_rate_section
from attncoda.experiments.sink_rate._summary import summary

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EXPERIMENT",
    "Settings",
    "SinkRateResult",
    "key_scores",
    "run",
    "score_rounding",
    "sink_rate",
]


def key_scores(logp: np.ndarray, key_mask: np.ndarray) -> np.ndarray:
    """Gu et al.'s score of every key of one window, per head.

    Parameters
    ----------
    logp : ndarray, shape (head, row, key_pos)
        Log-probability rows of every head (:class:`attncoda.experiments.contract.DocRows`);
        every query of the window must have its row recorded, in order.
    key_mask : ndarray of bool, shape (row, key_pos)
        Which keys each row holds; entries outside it are ignored.

    Returns
    -------
    ndarray, shape (head, key_pos)
        ``sum_i A[i, k] / n_k``, with ``n_k`` the rows that hold key ``k`` (a probability
        mass per query, in [0, 1]).

    Raises
    ------
    AttncodaError
        Fewer rows than keys (rows were sampled), or a key no row holds.
    """
    n_rows, n_keys = key_mask.shape
    if n_rows != n_keys:
        raise AttncodaError(
            f"the sink rate needs the row of every query of a window; got {n_rows} rows of "
            f"{n_keys} keys: read windows of at most 128 tokens (every row is recorded up to "
            "128) or capture with record_rows='all'"
        )
    seen_by = key_mask.sum(axis=0)
    if (seen_by == 0).any():
        raise AttncodaError(f"key {int(np.argmin(seen_by))} is held by no row of the window")
    probs = np.where(key_mask[None], np.exp(logp.astype(np.float64)), 0.0)
    return probs.sum(axis=1) / seen_by[None, :]


def score_rounding(scores: Any, n_keys: Any) -> np.ndarray:
    r"""How far float32 rounding can move Gu et al.'s scores (a probability mass).

    .. math:: e = u \, (n + 2) \, (|\mathrm{score}| + \log n)

    with ``u = 2**-24`` and ``n`` the most keys a row of the window sees. Each
    log-probability of a float32 log-softmax row over at most ``n`` keys moves by ``(n + 2)
    u`` through its normaliser (the log of a float32 sum of ``n`` terms) and by ``u |log
    p|`` through its own rounding, so each probability ``exp(log p)`` (float64) by ``(n + 2)
    u p + u p |log p| <= (n + 2) u p + u / e``; a mean over queries (float64) by ``u (n + 2)
    score + u / e``, within ``e``: the rounding
    :func:`~attncoda.experiments.contract.row_statistic_rounding` gives a mean of row
    statistics over ``n`` keys, by which a mean score is held between two runs.

    Parameters
    ----------
    scores : array_like
        Scores (NaN where none).
    n_keys : array_like of int
        The most keys a row sees, broadcast against ``scores`` (``>= 1``).

    Returns
    -------
    ndarray of float64
        Non-negative, NaN where a score is.
    """
    n = np.maximum(np.asarray(n_keys, dtype=np.float64), 1.0)
    return FLOAT32_UNIT_ROUNDOFF * (n + 2.0) * (np.abs(np.asarray(scores, np.float64)) + np.log(n))


@dataclass(frozen=True)
class SinkRateResult:
    """The sink rate of one model.

    Attributes
    ----------
    table : pandas.DataFrame
        ``sink_rate.parquet``: one row per position: ``model``, ``position``, ``epsilon``,
        ``sink_rate`` (percent of the ``n_triples`` (window, layer, head) triples whose
        score exceeds ``epsilon``), ``n_fragile`` (triples whose score lies within its
        float32 rounding of ``epsilon``, :func:`score_rounding`: above it on one run, not on
        another), ``rate_rounding`` (percentage points, ``100 * n_fragile / n_triples``: how
        far they can move the rate), ``n_windows`` (windows longer than the position),
        ``n_heads`` (layers × heads) and ``n_triples``. A position no window reaches has a
        NaN rate and rounding and zero counts.
    heads : pandas.DataFrame
        ``sink_rate_heads.parquet``: one row per (layer, head, position): ``model``,
        ``layer``, ``head``, ``position``, ``n_windows`` (windows longer than the position),
        ``n_keys`` (the most keys a row of those windows sees), ``score`` (the mean over
        windows of the score, a probability mass), ``above`` (percent of the windows whose
        score exceeds ``epsilon``), ``n_fragile`` (windows whose score lies within its
        rounding of ``epsilon``), ``above_rounding`` (percentage points, ``100 * n_fragile /
        n_windows``). A position no window reaches has NaN ``score``, ``above`` and
        ``above_rounding`` and zero counts.
    """

    table: pd.DataFrame
    heads: pd.DataFrame


def sink_rate(
    rows: HeadRows, *, epsilon: float = 0.3, positions: Sequence[int] = (0, 1, 2)
) -> SinkRateResult:
    """Gu et al.'s sink rate of a model at ``positions`` (see the module docstring).

    Parameters
    ----------
    rows : HeadRows
        Recorded rows of every head; every query of each window must have its row.
    epsilon : float
        The score a key must exceed to count as a sink in a triple (Gu et al.: 0.3).
    positions : sequence of int
        Key positions (0: the first token of the window as the model reads it, a prepended
        BOS included).

    Returns
    -------
    SinkRateResult
    """
    triples = _triples(rows, epsilon, tuple(int(p) for p in positions))
    return SinkRateResult(table=_rate_table(triples), heads=_head_table(triples))


@dataclass(frozen=True)
class _Triples:
    """Every (window, layer·head, position) score of one model, set against ``epsilon``.

    ``scores`` (doc, layer·head, position) is Gu et al.'s score, a probability mass, NaN
    where the window is no longer than the position; ``keys`` (doc,) the most keys a row of
    each window sees; ``above`` and ``fragile`` (doc, layer·head, position) whether a score
    exceeds ``epsilon`` and whether it lies within its float32 rounding of it; ``reached``
    (doc, position) whether the window is longer than the position.
    """

    model: str
    positions: tuple[int, ...]
    epsilon: float
    heads_per_layer: int
    keys: np.ndarray
    scores: np.ndarray
    above: np.ndarray
    fragile: np.ndarray
    reached: np.ndarray


def _triples(rows: HeadRows, epsilon: float, positions: tuple[int, ...]) -> _Triples:
    """Score the keys at ``positions`` in every window, head by head, against ``epsilon``."""
    scores = np.full((len(rows.docs), rows.n_layers * rows.n_heads, len(positions)), np.nan)
    keys = np.zeros(len(rows.docs), dtype=np.int64)
    for d, doc in enumerate(rows.docs):
        per_key = key_scores(doc.logp, doc.key_mask)
        keys[d] = int(np.asarray(doc.key_mask, bool).sum(axis=1).max())
        for j, k in enumerate(positions):
            if k < per_key.shape[1]:
                scores[d, :, j] = per_key[:, k]
    reached = ~np.isnan(scores[:, 0, :])
    above = scores > epsilon
    with np.errstate(invalid="ignore"):
        fragile = np.abs(scores - epsilon) <= score_rounding(scores, keys[:, None, None])
    return _Triples(
        rows.model, positions, epsilon, rows.n_heads, keys, scores, above, fragile, reached
    )


def _rate_table(t: _Triples) -> pd.DataFrame:
    """``sink_rate.parquet`` (:class:`SinkRateResult`): the rate per position, in percent."""
    import pandas as pd

    n_heads = t.scores.shape[1]
    table = []
    for j, k in enumerate(t.positions):
        n_windows = int(t.reached[:, j].sum())
        count = int(t.above[t.reached[:, j], :, j].sum())
        n_fragile = int(t.fragile[t.reached[:, j], :, j].sum())
        n_triples = n_windows * n_heads
        table.append(
            {
                "model": t.model,
                "position": k,
                "epsilon": float(t.epsilon),
                "sink_rate": 100.0 * count / n_triples if n_triples else float("nan"),
                "n_fragile": n_fragile,
                "rate_rounding": 100.0 * n_fragile / n_triples if n_triples else float("nan"),
                "n_windows": n_windows,
                "n_heads": n_heads,
                "n_triples": n_triples,
            }
        )
    return pd.DataFrame(table)


def _head_table(t: _Triples) -> pd.DataFrame:
    """``sink_rate_heads.parquet`` (:class:`SinkRateResult`): each head's mean score and
    share of windows above ``epsilon`` (percent), per position."""
    import pandas as pd

    n_heads = t.scores.shape[1]
    layer, head = np.divmod(np.arange(n_heads), t.heads_per_layer)
    heads = []
    for j, k in enumerate(t.positions):
        seen = t.reached[:, j]
        n_seen = int(seen.sum())
        none = np.full(n_heads, np.nan)
        n_fragile = t.fragile[seen, :, j].sum(axis=0).astype(np.int64)
        heads.append(
            pd.DataFrame(
                {
                    "model": t.model,
                    "layer": layer,
                    "head": head,
                    "position": k,
                    "n_windows": n_seen,
                    "n_keys": int(t.keys[seen].max(initial=0)),
                    "score": t.scores[seen, :, j].mean(axis=0) if n_seen else none,
                    "above": 100.0 * t.above[seen, :, j].mean(axis=0) if n_seen else none,
                    "n_fragile": n_fragile,
                    "above_rounding": 100.0 * n_fragile / n_seen if n_seen else none,
                }
            )
        )
    return pd.concat(heads, ignore_index=True)


@dataclass(frozen=True)
class Settings:
    """Settings of the sink rate: Gu et al.'s ε, the positions, and the windows read."""

    docs: int = setting(16, "corpus windows to read", at_least=1)
    max_tokens: int = setting(
        64, "tokens per window (Gu et al.: 64; every row is recorded up to 128)", at_least=1
    )
    epsilon: float = setting(
        0.3, "the score above which a key is a sink in a triple", above=0, at_most=1
    )
    positions: tuple[int, ...] = setting(
        (0, 1, 2), "key positions whose sink rate is given", at_least=0, item="position"
    )


def rows_at(settings: Settings) -> Mapping[str, int]:
    """The windows the unit's rows are read at: its own ``docs`` and ``max_tokens``."""
    return {"docs": settings.docs, "max_tokens": settings.max_tokens}


def run(inputs: Inputs, settings: Settings) -> Tables:
    """The tables ``sink_rate`` and ``sink_rate_heads`` of the unit's rows."""
    result = sink_rate(inputs.rows, epsilon=settings.epsilon, positions=settings.positions)
    facts: dict[str, Any] = {"epsilon": settings.epsilon, "positions": list(settings.positions)}
    return Tables(
        frames={"sink_rate": result.table, "sink_rate_heads": result.heads}, summary=facts
    )


EXPERIMENT = Experiment(
    name="sink_rate",
    needs=("rows",),
    after=(),
    cost=4.0,
    settings=Settings,
    run=run,
    tables=("sink_rate", "sink_rate_heads"),
    rows_at=rows_at,
    held=HELD,
    view=View(
        title="Sink rate (Gu et al. 2025): how often a key position is a sink",
        needs=("sink_rate",),
        section=sink_rate_section,
        figure_tables=("sink_rate",),
        figure=draw,
    ),
    command=Command(
        help="Gu et al.'s sink rate: the share of heads in which a key position is a sink",
        sources="model?",
        summary=summary,
        doc="Gu et al.'s sink rate: the percentage of (window, layer, head) triples in "
        "which a key position receives more than epsilon of its queries' attention.",
    ),
)
