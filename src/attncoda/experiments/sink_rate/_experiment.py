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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import (
    Command,
    Experiment,
    HeadRows,
    Inputs,
    Tables,
    View,
    setting,
)
from attncoda.experiments.sink_rate._figure import draw
from attncoda.experiments.sink_rate._section import sink_rate_section
from attncoda.experiments.sink_rate._summary import summary

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EXPERIMENT", "Settings", "SinkRateResult", "key_scores", "run", "sink_rate"]


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


@dataclass(frozen=True)
class SinkRateResult:
    """The sink rate of one model.

    Attributes
    ----------
    table : pandas.DataFrame
        ``sink_rate.parquet``: one row per position: ``model``, ``position``, ``epsilon``,
        ``sink_rate`` (percent of the ``n_triples`` (window, layer, head) triples whose
        score exceeds ``epsilon``), ``n_windows`` (windows longer than the position),
        ``n_heads`` (layers × heads) and ``n_triples``. A position no window reaches has
        a NaN rate and zero counts.
    heads : pandas.DataFrame
        ``sink_rate_heads.parquet``: one row per (layer, head, position): ``model``,
        ``layer``, ``head``, ``position``, ``score`` (the mean over windows of the score, a
        probability mass) and ``above`` (percent of the windows whose score exceeds
        ``epsilon``).
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
    import pandas as pd

    positions = tuple(int(p) for p in positions)
    n_heads = rows.n_layers * rows.n_heads
    scores = np.full((len(rows.docs), n_heads, len(positions)), np.nan)
    for d, doc in enumerate(rows.docs):
        per_key = key_scores(doc.logp, doc.key_mask)
        for j, k in enumerate(positions):
            if k < per_key.shape[1]:
                scores[d, :, j] = per_key[:, k]
    reached = ~np.isnan(scores[:, 0, :])  # (doc, position)
    above = scores > epsilon
    table = []
    for j, k in enumerate(positions):
        n_windows = int(reached[:, j].sum())
        count = int(above[reached[:, j], :, j].sum())
        n_triples = n_windows * n_heads
        table.append(
            {
                "model": rows.model,
                "position": k,
                "epsilon": float(epsilon),
                "sink_rate": 100.0 * count / n_triples if n_triples else float("nan"),
                "n_windows": n_windows,
                "n_heads": n_heads,
                "n_triples": n_triples,
            }
        )
    layer, head = np.divmod(np.arange(n_heads), rows.n_heads)
    heads = []
    for j, k in enumerate(positions):
        seen = reached[:, j]
        mean = scores[seen, :, j].mean(axis=0) if seen.any() else np.full(n_heads, np.nan)
        share = 100.0 * above[seen, :, j].mean(axis=0) if seen.any() else mean
        heads.append(
            pd.DataFrame(
                {
                    "model": rows.model,
                    "layer": layer,
                    "head": head,
                    "position": k,
                    "score": mean,
                    "above": share,
                }
            )
        )
    return SinkRateResult(table=pd.DataFrame(table), heads=pd.concat(heads, ignore_index=True))


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
    result = sink_rate(
        inputs.need("rows"), epsilon=settings.epsilon, positions=settings.positions
    )
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
