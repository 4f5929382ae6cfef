r"""How fragile a choice of the top ``k`` heads is: the heads whose channel value lies within
rounding of the cut (docs/design.md, "The same evidence, by one rule").

Each channel value carries a rounding ``e_h`` (:func:`channel_rounding`): a head mean of
float32 row statistics over at most ``n`` keys moves by
:func:`~attncoda.experiments.contract.row_statistic_rounding` ``u (n + 2) (|v_h| + log n)``
(the rule its column is held by in ``prune_heads``); gradient importance by its
``gradient_rounding`` column (:func:`~attncoda.experiments.prune.gradient_rounding`); the
``random`` channel's seeded keys by nothing.

Two heads may change places between two roundings when their values lie within the sum of
their roundings, ``|v_a - v_b| <= e_a + e_b``. The top ``k`` of a ranking is then another
set on another machine exactly when a chosen head and a head left out may change places.
In pruning order (the key ``-v`` for ``"high"``, ``v`` for ``"low"``, smallest first), a
chosen head is fragile when it can fall past a head left out,
``key_a + e_a >= min_{b > k} (key_b - e_b)``, and a head left out when it can rise past a
chosen one. :func:`fragile_heads` counts both sides; the
row's heads are on the edge when the count is not 0. The pruning order *within* the chosen
heads (the ``heads`` text) may change where two of them (adjacent in the order: two that
can change places have an adjacent pair between them that can) lie within rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import row_statistic_rounding
from attncoda.experiments.prune._ranking import CHANNEL_COLUMNS, CHANNELS

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ChosenHeads", "channel_rounding", "fragile_heads", "ranking_rounding"]


def channel_rounding(heads_table: pd.DataFrame, channel: str) -> np.ndarray:
    """Each head's rounding of its ``channel`` value, shape (head,), in the table's row order.

    Parameters
    ----------
    heads_table : pandas.DataFrame
        :func:`attncoda.experiments.profile.head_summary`'s table (with ``n_keys``), and
        ``gradient_importance`` with ``gradient_rounding`` for the ``gradient`` channel.
    channel : str
        One of :data:`~attncoda.experiments.prune.CHANNELS`.

    Returns
    -------
    ndarray of float64
        Non-negative; zeros for ``random``.

    Raises
    ------
    AttncodaError
        An unknown channel, or a table without the columns its rounding is read from.
    """
    if channel not in CHANNELS:
        raise AttncodaError(f"unknown channel {channel!r}: use one of {', '.join(CHANNELS)}")
    if channel == "random":
        return np.zeros(len(heads_table))
    gradient = channel == "gradient"
    needed = ("gradient_rounding",) if gradient else (CHANNEL_COLUMNS[channel], "n_keys")
    for column in needed:
        if column not in heads_table.columns:
            raise AttncodaError(
                f"the heads table has no column {column!r}: the rounding of channel "
                f"{channel!r} is read from it (profile.head_summary and prune's gradient "
                f"importance give it)"
            )
    if gradient:
        return np.abs(heads_table["gradient_rounding"].to_numpy(np.float64))
    values = heads_table[CHANNEL_COLUMNS[channel]].astype("Float64").fillna(0.0)
    keys = heads_table["n_keys"].to_numpy(np.float64)
    return np.array(
        [row_statistic_rounding(n, abs(v)) for n, v in zip(keys, values.to_numpy(), strict=True)],
        dtype=np.float64,
    )


def ranking_rounding(heads_table: pd.DataFrame, ranking: pd.DataFrame, channel: str) -> np.ndarray:
    """:func:`channel_rounding` in the order of ``ranking``
    (:func:`~attncoda.experiments.prune.head_ranking` of the same table), shape (head,)."""
    rounding = channel_rounding(heads_table, channel)
    at = {
        (int(layer), int(head)): i
        for i, (layer, head) in enumerate(
            zip(heads_table["layer"], heads_table["head"], strict=True)
        )
    }
    return rounding[
        [at[(int(a), int(b))] for a, b in zip(ranking["layer"], ranking["head"], strict=True)]
    ]


@dataclass(frozen=True)
class ChosenHeads:
    """How fragile the top ``k`` of a ranking is.

    Attributes
    ----------
    n_fragile : int
        Heads (chosen or left out) that may cross the cut between two roundings.
    edge : bool
        ``n_fragile > 0``: the chosen set may be another on another machine.
    order_edge : bool
        The pruning order of the chosen heads may change (``edge``, or two chosen heads
        within rounding of each other).
    """

    n_fragile: int
    edge: bool
    order_edge: bool


def fragile_heads(key: np.ndarray, rounding: np.ndarray, k: int) -> ChosenHeads:
    """The fragility of choosing the first ``k`` heads of a ranking.

    Parameters
    ----------
    key : ndarray of float64, shape (head,)
        Each head's ranking key in pruning order, non-decreasing (the value for ``"low"``,
        its negative for ``"high"``).
    rounding : ndarray of float64, shape (head,)
        Each head's rounding (:func:`ranking_rounding`), the same order.
    k : int
        The heads chosen, from 0 to ``len(key)``.

    Returns
    -------
    ChosenHeads
    """
    key = np.asarray(key, dtype=np.float64)
    rounding = np.asarray(rounding, dtype=np.float64)
    n = key.shape[0]
    if rounding.shape != (n,) or not 0 <= k <= n:
        raise AttncodaError(
            f"a ranking of {n} heads with roundings of shape {rounding.shape} cannot choose "
            f"{k}: give one rounding per head and 0 <= k <= {n}"
        )
    fragile = 0
    if 0 < k < n:
        reach_down = key[:k] + rounding[:k]  # how far each chosen head can fall
        reach_up = key[k:] - rounding[k:]  # how far each head left out can rise
        fragile = int((reach_down >= reach_up.min()).sum() + (reach_up <= reach_down.max()).sum())
    chosen_gap = np.diff(key[:k]) <= rounding[: max(k - 1, 0)] + rounding[1:k]
    return ChosenHeads(fragile, fragile > 0, fragile > 0 or bool(chosen_gap.any()))
