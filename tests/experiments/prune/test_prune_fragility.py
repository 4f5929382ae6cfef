"""The fragility of prune's chosen heads: each channel's rounding and the heads within
rounding of a cut, against plain loops over pairs of heads and hand-computed cases."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.experiments.prune import (  # noqa: E402
    channel_rounding,
    fragile_heads,
    head_ranking,
)
from attncoda.experiments.prune._fragility import ranking_rounding  # noqa: E402

U = 2.0**-24


def loop_fragility(key, rounding, k):
    """By pairs: a chosen head ``a`` and a head ``b`` left out may change places when
    ``|key_a - key_b| <= e_a + e_b``; both are then fragile. The order of the chosen heads
    may change where any two of them may change places."""
    fragile = set()
    for a in range(k):
        for b in range(k, len(key)):
            if abs(key[a] - key[b]) <= rounding[a] + rounding[b]:
                fragile.update((a, b))
    order = any(
        abs(key[a] - key[b]) <= rounding[a] + rounding[b] for a in range(k) for b in range(a + 1, k)
    )
    return len(fragile), bool(fragile) or order


@pytest.mark.parametrize("seed", range(6))
def test_fragile_heads_equal_a_loop_over_pairs(seed):
    rng = np.random.default_rng(seed)
    n = 30
    # Values on a coarse grid, so that near-ties and exact ties occur at every cut.
    key = np.sort(rng.integers(0, 40, size=n) * 0.01)
    rounding = rng.choice([0.0, 0.002, 0.006, 0.011], size=n)
    for k in range(n + 1):
        got = fragile_heads(key, rounding, k)
        n_fragile, order_edge = loop_fragility(key.tolist(), rounding.tolist(), k)
        assert (got.n_fragile, got.edge, got.order_edge) == (
            n_fragile,
            n_fragile > 0,
            order_edge,
        ), k


def chosen(key, rounding, k):
    got = fragile_heads(np.asarray(key, dtype=float), np.asarray(rounding, dtype=float), k)
    return got.n_fragile, got.edge, got.order_edge


def test_fragile_heads_by_hand():
    key = [0.0, 1.0, 2.0, 2.5, 4.0]
    rounding = [0.1, 0.1, 0.3, 0.3, 0.1]
    # cut between 1.0 and 2.0: 1.0 + 0.1 < 2.0 - 0.3, nothing reaches across
    assert chosen(key, rounding, 2) == (0, False, False)
    # cut between 2.0 and 2.5: 2.0 + 0.3 >= 2.5 - 0.3, so both are fragile; 1.0 is not
    assert chosen(key, rounding, 3) == (2, True, True)
    # cut between 2.5 and 4.0: 2.5 + 0.3 < 4.0 - 0.1; the chosen 2.0 and 2.5 may swap
    assert chosen(key, rounding, 4) == (0, False, True)
    # nothing chosen, or everything: no cut
    assert chosen(key, rounding, 0) == (0, False, False)
    assert chosen(key, rounding, 5) == (0, False, True)
    # a tie (broken by layer and head) is fragile with the least rounding
    assert chosen([1.0, 1.0, 3.0], [1e-9, 0.0, 0.0], 1) == (2, True, True)
    # one head that reaches across two: 1.0 + 1.5 >= 2.0 and 2.4 (their roundings 0)
    assert chosen([0.0, 1.0, 2.0, 2.4, 9.0], [0.0, 1.5, 0.0, 0.0, 0.0], 2) == (3, True, True)


def test_fragile_heads_errors():
    with pytest.raises(
        AttncodaError,
        match=re.escape(
            "a ranking of 3 heads with roundings of shape (2,) cannot choose 1: give one "
            "rounding per head and 0 <= k <= 3"
        ),
    ):
        fragile_heads(np.zeros(3), np.zeros(2), 1)
    with pytest.raises(AttncodaError, match="cannot choose 4"):
        fragile_heads(np.zeros(3), np.zeros(3), 4)


def heads_table():
    return pd.DataFrame(
        {
            "layer": [0, 0, 1, 1],
            "head": [0, 1, 0, 1],
            "n_keys": [64, 64, 17, 1],
            "sink_mass": [0.5, 0.9, 0.25, 1.0],
            "sink_balance": [-2.0, 0.0, 3.0, 1.0],
            "entropy": [2.0, 1.0, 3.0, 0.0],
            "content_entropy": pd.array([1.5, 2.5, None, 1.0], dtype="Float64"),
            "gradient_importance": [4.0, 1.0, 2.0, 3.0],
            "gradient_rounding": [1e-3, 2e-3, 3e-3, 4e-3],
        }
    )


def test_channel_rounding_by_hand():
    table = heads_table()
    # u (n + 2) (|v| + log n): a mean of float32 row statistics over at most n keys
    want = [U * 66 * (0.5 + math.log(64)), U * 66 * (0.9 + math.log(64))]
    want += [U * 19 * (0.25 + math.log(17)), U * 3 * 1.0]
    np.testing.assert_allclose(channel_rounding(table, "sink_mass"), want, rtol=1e-15)
    balance = channel_rounding(table, "sink_balance")
    np.testing.assert_allclose(balance[0], U * 66 * (2.0 + math.log(64)), rtol=1e-15)
    full = channel_rounding(table, "full_entropy")  # the column "entropy"
    np.testing.assert_allclose(full[2], U * 19 * (3.0 + math.log(17)), rtol=1e-15)
    assert channel_rounding(table, "content_entropy")[2] == U * 19 * math.log(17)
    assert channel_rounding(table, "gradient").tolist() == [1e-3, 2e-3, 3e-3, 4e-3]
    assert channel_rounding(table, "random").tolist() == [0.0] * 4


def test_ranking_rounding_follows_the_ranking():
    table = heads_table()
    ranking = head_ranking(table, "gradient", "high")
    assert list(zip(ranking["layer"], ranking["head"], strict=True)) == [
        (0, 0),
        (1, 1),
        (1, 0),
        (0, 1),
    ]
    assert ranking_rounding(table, ranking, "gradient").tolist() == [1e-3, 4e-3, 3e-3, 2e-3]


def test_channel_rounding_errors():
    table = heads_table()
    with pytest.raises(
        AttncodaError,
        match=re.escape(
            "the heads table has no column 'n_keys': the rounding of channel 'sink_mass' is "
            "read from it (profile.head_summary and prune's gradient importance give it)"
        ),
    ):
        channel_rounding(table.drop(columns="n_keys"), "sink_mass")
    with pytest.raises(AttncodaError, match="no column 'gradient_rounding'"):
        channel_rounding(table.drop(columns="gradient_rounding"), "gradient")
    with pytest.raises(AttncodaError, match="unknown channel 'entropy'"):
        channel_rounding(table, "entropy")
