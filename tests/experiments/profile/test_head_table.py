"""The profile head table's columns for the comparison of two runs: the most keys a head's
rows see, and the magnitude each row's sink balance is computed from (checked against the
definition, from hand-made log-probability rows)."""

from __future__ import annotations

import numpy as np
import pytest

from attncoda.experiments.profile import HEAD_HELD, balance_magnitude, head_summary

pd = pytest.importorskip("pandas")


def _row(logp: np.ndarray) -> dict:
    """A rows-table row of one query over ``logp``'s keys, the sink key 0."""
    n, m = len(logp), len(logp) - 1
    b = np.sqrt(m / n) * (logp[0] - logp[1:].mean())
    return {"n_keys": n, "sink_mass": float(np.exp(logp[0])), "sink_balance": b}


@pytest.mark.parametrize(
    "probs", [[0.5, 0.25, 0.125, 0.125], [0.9, 0.05, 0.03, 0.02], [0.01, 0.9, 0.05, 0.04]]
)
def test_the_balance_magnitude_is_the_mean_absolute_logs_it_is_made_of(probs):
    logp = np.log(np.asarray(probs))
    n, m = len(logp), len(logp) - 1
    by_hand = np.sqrt(m / n) * (abs(logp[0]) + np.abs(logp[1:]).mean())
    rows = pd.DataFrame([_row(logp)]).astype({"sink_balance": "Float64"})
    assert balance_magnitude(rows)[0] == pytest.approx(by_hand, rel=1e-12)
    assert balance_magnitude(rows)[0] >= abs(rows["sink_balance"].iloc[0])


def test_the_head_table_states_its_keys_and_holds_the_balance_by_its_magnitude():
    rng = np.random.default_rng(0)
    records = []
    for q in range(1, 6):  # causal rows of one head: query q sees q + 1 keys
        logp = np.log(rng.dirichlet(np.ones(q + 1)))
        records.append(
            {"doc": 0, "layer": 0, "head": 0, "query_pos": q, **_row(logp), "entropy": 1.0,
             "content_entropy": 1.0, "within_sink_entropy": 0.0, "has_content": True}
        )  # fmt: skip
    rows = pd.DataFrame(records).astype({"sink_balance": "Float64", "content_entropy": "Float64"})
    table = head_summary(rows)
    assert table["n_keys"].tolist() == [6]
    assert table["sink_balance_magnitude"].iloc[0] == pytest.approx(
        balance_magnitude(rows).mean(), rel=1e-12
    )
    assert HEAD_HELD["sink_balance"].magnitude == ("sink_balance_magnitude",)
