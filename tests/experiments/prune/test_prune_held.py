"""How prune's tables are held when two runs are compared (prune's HELD): tampered copies of
a hand-made prune table, each allowance computed by hand from the reference's row."""

from __future__ import annotations

import math

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

from attncoda.experiments.contract import compare_frames  # noqa: E402
from attncoda.experiments.contract._held import FLOAT64_SLACK  # noqa: E402
from attncoda.experiments.prune import HELD  # noqa: E402

RULES = HELD["prune"]


def reference():
    """Three rows of one model: the baseline, a decided row, and a row whose chosen heads
    lie within rounding of their cut (``heads_edge``)."""
    nll = np.array([3.30, 6.09, 22.80])
    rounding = np.array([0.004, 0.0045, 0.005])
    ratio = np.exp(nll - nll[0])
    return pd.DataFrame(
        {
            "model": ["m"] * 3,
            "channel": ["none", "sink_mass", "sink_mass"],
            "order": ["none", "high", "low"],
            "ablation": ["none", "zero", "zero"],
            "k": np.array([0, 16, 16], dtype=np.int64),
            "perplexity": np.exp(nll),
            "ratio": ratio,
            "ratio_ci_low": [np.nan, ratio[1] * 0.8, ratio[2] * 0.7],
            "ratio_ci_high": [np.nan, ratio[1] * 1.2, ratio[2] * 1.5],
            "mean_nll": nll,
            "nll_rounding": rounding,
            "ratio_rounding": [0.0, rounding[1] + rounding[0], rounding[2] + rounding[0]],
            "heads": ["", "1.2,3.4", "0.1,5.6"],
            "n_fragile_heads": np.array([0, 0, 2], dtype=np.int64),
            "heads_edge": [False, False, True],
            "order_edge": [False, False, True],
        }
    )


def compared(run):
    return compare_frames("prune", run, reference(), RULES)


def test_the_same_table_is_the_same_evidence():
    assert compared(reference()).same


def test_a_ratio_moved_within_its_stated_rounding_holds():
    run = reference()
    # the decided row's log-ratio may move by 0.0085 nats: exp(0.0085) - 1 = 0.85%
    run.loc[1, "ratio"] *= 1.008
    run.loc[1, "ratio_ci_low"] *= 0.992
    run.loc[1, "ratio_ci_high"] *= math.exp(0.0084)
    run.loc[1, "mean_nll"] += 0.0044
    run.loc[1, "perplexity"] *= math.exp(0.0044)
    got = compared(run)
    assert got.same and 0.9 < got.worst < 1.0


@pytest.mark.parametrize("column", ["ratio", "ratio_ci_low", "ratio_ci_high", "perplexity"])
def test_a_ratio_moved_by_one_percent_fails(column):
    run = reference()
    run.loc[1, column] *= 1.01
    (cell,) = compared(run).cells
    bound = "nll_rounding" if column == "perplexity" else "ratio_rounding"
    size = reference().loc[1, column]
    allowed = size * math.expm1(reference().loc[1, bound]) + FLOAT64_SLACK * size
    assert (cell.row, cell.column) == (1, column)
    assert cell.allowed == pytest.approx(allowed, rel=1e-12)


def test_a_mean_nll_moved_past_its_rounding_fails():
    run = reference()
    run.loc[1, "mean_nll"] += 0.0046
    (cell,) = compared(run).cells
    assert cell.column == "mean_nll"
    assert cell.allowed == pytest.approx(0.0045 + FLOAT64_SLACK * 6.09, rel=1e-12)


def test_a_row_whose_heads_are_on_the_edge_may_differ():
    run = reference()
    # another set of heads chosen: another evaluation, another interval, another order
    run.loc[2, ["perplexity", "ratio", "ratio_ci_low", "ratio_ci_high"]] *= 2.0
    run.loc[2, "mean_nll"] += math.log(2.0)
    run.loc[2, "heads"] = "5.6,0.2"
    run.loc[2, "heads_edge"] = False
    run.loc[2, "order_edge"] = False
    assert compared(run).same
    # the same change on the decided row is a difference in every column it touches
    run = reference()
    run.loc[1, ["perplexity", "ratio"]] *= 2.0
    run.loc[1, "heads"] = "1.2,3.5"
    run.loc[1, "heads_edge"] = True
    got = compared(run)
    assert {c.column for c in got.cells} == {"perplexity", "ratio", "heads", "heads_edge"}


def test_an_inflated_fragile_count_fails():
    run = reference()
    run.loc[2, "n_fragile_heads"] = 2 + 3  # 1% of 2 plus 3 heads allowed
    assert compared(run).same
    run.loc[2, "n_fragile_heads"] = 2 + 4
    (cell,) = compared(run).cells
    assert cell.column == "n_fragile_heads" and cell.allowed == pytest.approx(3.02)
    run = reference()
    run.loc[1, "n_fragile_heads"] = 10
    assert [c.column for c in compared(run).cells] == ["n_fragile_heads"]


def test_a_stated_rounding_is_held_to_its_own_rule():
    run = reference()
    run.loc[1, "nll_rounding"] = 0.0045 * 1.009
    assert compared(run).same
    # Bound's 3 units are 3 nats for a bound in nats: only a gross inflation fails
    run.loc[1, "nll_rounding"] = 0.0045 + 3.1
    assert [c.column for c in compared(run).cells] == ["nll_rounding"]


def test_the_order_of_the_chosen_heads_is_held_unless_it_is_on_its_edge():
    run = reference()
    run.loc[1, "heads"] = "3.4,1.2"
    assert [c.column for c in compared(run).cells] == ["heads"]
    ref = reference()
    ref.loc[1, "order_edge"] = True  # two chosen heads within rounding of each other
    run.loc[1, "order_edge"] = True
    assert compare_frames("prune", run, ref, RULES).same
    # the set on the edge is not: its evaluation is still held
    run.loc[1, "ratio"] *= 1.01
    assert [c.column for c in compare_frames("prune", run, ref, RULES).cells] == ["ratio"]


def test_every_float_column_of_prune_has_a_rule():
    floats = [c for c, t in reference().dtypes.items() if pd.api.types.is_float_dtype(t)]
    assert floats and all(c in RULES for c in floats)
    flags = [c for c, t in reference().dtypes.items() if pd.api.types.is_bool_dtype(t)]
    assert all(c in RULES for c in flags)
