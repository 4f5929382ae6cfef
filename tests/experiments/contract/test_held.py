"""The rules by which two runs' tables are compared (attncoda.experiments.contract._held):
hand-made tables that agree, differ by a stated amount, or differ in nulls, text, rows,
columns or dtypes; each allowance computed by hand, and read from the reference's row."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attncoda.experiments.contract import (
    RULES,
    Bound,
    Coordinates,
    Exponent,
    Labels,
    RowStatistic,
    Same,
    Share,
    Stated,
    Verdict,
    compare_frames,
)
from attncoda.experiments.contract._held import BOUND_RTOL, BOUND_UNITS, FLOAT64_SLACK

pd = pytest.importorskip("pandas")

U = 2.0**-24


def table():
    return pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "layer": [0, 1, 0],
            "n_keys": [128, 128, 64],
            "entropy": [2.0, 3.5, np.nan],
            "balance": [np.inf, -1.0, 0.5],
            "note": ["", "tie", None],
            "safe": [True, False, True],
        }
    )


HEADS = {"entropy": RowStatistic(), "balance": RowStatistic()}


def test_equal_tables_are_the_same_evidence():
    got = compare_frames("t", table(), table(), HEADS)
    assert got.same and got.worst == 0.0 and got.cells == ()


def test_a_float_without_a_rule_must_be_equal():
    other = table()
    other.loc[1, "entropy"] = 3.5 + 1e-12
    assert not compare_frames("t", table(), other).same
    assert not compare_frames("t", table(), other, {"entropy": Same()}).same


def test_a_row_statistic_is_held_to_the_rounding_of_its_sums_over_its_keys():
    allowed = U * 130 * (3.5 + math.log(128))  # u (n + 2) (|x| + log n), n = 128: 6.5e-5
    other = table()
    other.loc[1, "entropy"] = 3.5 + 0.9 * allowed
    got = compare_frames("t", other, table(), HEADS)
    assert got.same and got.worst_column == "entropy"
    assert got.worst == pytest.approx(0.9, rel=1e-6)
    other.loc[1, "entropy"] = 3.5 + 1.1 * allowed
    (cell,) = compare_frames("t", other, table(), HEADS).cells
    assert (cell.row, cell.column, cell.key) == (1, "entropy", "a 1")
    assert cell.allowed == pytest.approx(allowed, rel=1e-12)
    assert "t[a 1].entropy: 3.500071" in cell.line() and "against 3.5 " in cell.line()


def test_a_difference_of_row_statistics_is_held_by_the_magnitudes_it_is_made_of():
    rule = {"delta": RowStatistic(magnitude=("h_from", "h_to"))}
    ref = pd.DataFrame({"n_keys": [64], "h_from": [3.2], "h_to": [3.1], "delta": [-0.1]})
    allowed = U * 66 * (6.3 + math.log(64))  # 3.8e-5: far more than 0.1's own size gives
    moved = ref.assign(delta=[-0.1 + 0.95 * allowed])
    assert compare_frames("t", moved, ref, rule).same
    assert not compare_frames("t", ref.assign(delta=[-0.1 + 1.05 * allowed]), ref, rule).same


@pytest.mark.parametrize(
    ("column", "row", "value"),
    [("entropy", 2, 1.0), ("entropy", 0, np.nan), ("note", 1, "tie "), ("note", 2, ""),
     ("safe", 0, False), ("layer", 2, 1), ("balance", 0, 1e300), ("balance", 0, -np.inf)],
)  # fmt: skip
def test_nulls_text_flags_counts_and_infinities_must_match(column, row, value):
    other = table()
    other.loc[row, column] = value
    got = compare_frames("t", table(), other, HEADS)
    assert not got.same and [c.column for c in got.cells] == [column]


def test_tables_of_other_rows_columns_or_dtypes_are_not_compared_cell_by_cell():
    got = compare_frames("t", table(), table().iloc[:2], HEADS)
    assert got.why == "3 rows against 2; only here: b 0"
    got = compare_frames("t", table(), table().drop(columns="note"))
    assert not got.same and got.why == "columns the reference lacks: ['note']"
    got = compare_frames(
        "t", table()[["model", "note", "layer"]], table()[["model", "layer", "note"]]
    )
    assert got.why == "columns in another order"
    got = compare_frames("t", table().astype({"layer": "float64"}), table())
    assert got.why == "layer is float64 here, int64 in the reference"


def test_a_column_the_run_lacks_is_held_from_the_references_side():
    got = compare_frames("t", table().drop(columns="note"), table(), HEADS)
    assert got.same and got.unheld == ("note",)


def flips(flips_=9, n_fragile=1, rate_rounding=1 / 167, ci_high=0.0895833, ci_rounding=1e-3):
    return pd.DataFrame(
        {
            "n_triplets": [168],
            "flips": [flips_],
            "flip_rate": [flips_ / 168],
            "ci_high": [ci_high],
            "n_fragile": [n_fragile],
            "rate_rounding": [rate_rounding],
            "ci_rounding": [ci_rounding],
        }
    )


RULES_ = {
    "flips": Stated("n_fragile"),
    "flip_rate": Stated("rate_rounding"),
    "ci_high": Stated("ci_rounding"),
    "n_fragile": Bound(),
    "rate_rounding": Bound(per="n_triplets"),
    "ci_rounding": Bound(per="n_triplets"),
}


def test_a_count_and_its_rates_are_held_to_the_references_stated_rounding():
    # The H200's case: one triplet at the tie edge moved a flip and ci_high by 5.2e-4,
    # within the reference's stated ci_rounding (1e-3).
    moved = flips(flips_=10, ci_high=0.0901046, ci_rounding=0.99e-3)
    assert compare_frames("flips", moved, flips(), RULES_).same
    # Without the rules the same move is a difference of every column that moved.
    plain = compare_frames("flips", moved, flips())
    assert {c.column for c in plain.cells} == {"flips", "flip_rate", "ci_high", "ci_rounding"}
    # Two flips where one triplet is stated: the count differs by 2 against 1 allowed (a
    # count carries no float rounding), and so does its rate (2/168 against 1/167).
    two = compare_frames("flips", flips(flips_=11), flips(), RULES_)
    assert [(c.column, c.difference, c.allowed) for c in two.cells[:1]] == [("flips", 2, 1)]
    assert [c.column for c in two.cells] == ["flips", "flip_rate"]


def test_a_run_cannot_widen_its_own_allowance():
    # The run states 5 fragile triplets to excuse 3 moved flips; the reference states 1.
    excused = flips(flips_=12, n_fragile=5)
    cells = compare_frames("flips", excused, flips(), RULES_).cells
    assert [(c.column, c.difference, c.allowed) for c in cells[:1]] == [("flips", 3, 1)]
    assert "n_fragile" in {c.column for c in cells}


def test_several_stated_bounds_add_up():
    rule = {"n_ties": Stated(("n_fragile", "n_edge"))}
    ref = pd.DataFrame({"n_ties": [20], "n_fragile": [2], "n_edge": [1]})
    assert compare_frames("safety", ref.assign(n_ties=[23]), ref, rule).same
    (cell,) = compare_frames("safety", ref.assign(n_ties=[24]), ref, rule).cells
    assert (cell.difference, cell.allowed) == (4, 3)


def test_a_bound_is_held_to_the_references_so_an_inflated_one_fails():
    n = 1000
    base = pd.DataFrame({"n_triplets": [168_000], "n_fragile": [n], "rate_rounding": [0.006]})
    near = base.assign(n_fragile=[n + 13], rate_rounding=[0.006 * 1.01])
    assert compare_frames("flips", near, base, RULES_).same
    (cell,) = compare_frames("flips", base.assign(n_fragile=[n + 14]), base, RULES_).cells
    assert (cell.column, cell.difference) == ("n_fragile", 14)
    assert cell.allowed == BOUND_RTOL * n + BOUND_UNITS  # 13: the reference's, not the run's
    # A rate's unit is one triplet of its count: 1% of 0.006 plus 3 / 168,000 = 7.79e-5.
    allowed = BOUND_RTOL * 0.006 + 3 / 168_000 + FLOAT64_SLACK * 0.006
    assert compare_frames("flips", base.assign(rate_rounding=[0.006 + 7.7e-5]), base, RULES_).same
    (cell,) = compare_frames(
        "flips", base.assign(rate_rounding=[0.006 + 7.9e-5]), base, RULES_
    ).cells
    assert cell.allowed == pytest.approx(allowed)


def test_an_exponent_is_held_to_its_stated_bound_in_nats():
    rule = {"ratio": Exponent(("nll_rounding", "base_rounding"))}
    ref = pd.DataFrame({"ratio": [638.85], "nll_rounding": [2e-4], "base_rounding": [1e-4]})
    allowed = 638.85 * math.expm1(3e-4)  # 0.19
    assert compare_frames("prune", ref.assign(ratio=[638.85 + 0.99 * allowed]), ref, rule).same
    one_percent = ref.assign(ratio=[638.85 * 1.01])
    (cell,) = compare_frames("prune", one_percent, ref, rule).cells
    assert cell.allowed == pytest.approx(allowed + FLOAT64_SLACK * 638.85)


def test_a_verdict_on_its_edge_may_go_either_way_and_off_it_may_not():
    rule = {"verdict": Verdict("edge")}
    ref = pd.DataFrame({"verdict": ["failed", "confirmed"], "edge": [True, False]})
    flipped = ref.assign(verdict=["confirmed", "confirmed"])
    assert compare_frames("predictor", flipped, ref, rule).same
    (cell,) = compare_frames("predictor", ref.assign(verdict=["failed", "failed"]), ref, rule).cells
    assert (cell.row, cell.column) == (1, "verdict")


def test_every_rule_says_what_it_holds():
    assert {r.__name__ for r in RULES} >= {"Same", "Stated", "Bound", "Labels", "Verdict"}
    assert all(r.says and r.says == r.says.strip() for r in RULES)


def test_a_share_is_held_to_what_its_parts_differences_make_of_it():
    # A change of 1e-4 nats whose parts each move by 1e-6 (within the tolerance): the share
    # 0.5 moves by up to (1e-6 + 0.5 * 1e-6) / 1e-4 = 1.5e-2, far past 1e-5 + 1e-5 * 0.5.
    ends = Share(("delta_sink_sink_first", "delta_sink_content_first"), "delta_entropy")
    parts = ("delta_entropy", "delta_sink", "delta_sink_sink_first", "delta_sink_content_first")
    rules = {
        **{part: Stated("delta_rounding") for part in parts},
        "sink_share": Share(("delta_sink",), "delta_entropy"),
        "sink_share_low": ends,
        "sink_share_high": ends,
    }
    cpu = pd.DataFrame(
        {
            "delta_rounding": [1e-6],
            "delta_entropy": [1e-4],
            "delta_sink": [5e-5],
            "delta_sink_sink_first": [4e-5],
            "delta_sink_content_first": [6e-5],
            "sink_share": [0.5],
            "sink_share_low": [0.4],
            "sink_share_high": [0.6],
        }
    )
    gpu = cpu.copy()
    gpu["delta_entropy"] = [1e-4 + 1e-6]
    gpu["delta_sink"] = [5e-5 + 1e-6]
    gpu["delta_sink_sink_first"] = [4e-5 + 1e-6]
    gpu["delta_sink_content_first"] = [6e-5 + 1e-6]
    for name, num in (("sink_share", 5e-5), ("sink_share_low", 4e-5), ("sink_share_high", 6e-5)):
        gpu[name] = [(num + 1e-6) / (1e-4 + 1e-6)]  # what the parts make of it
    assert compare_frames("collapse", gpu, cpu, rules).same
    assert not compare_frames("collapse", gpu, cpu).same
    wrong = gpu.assign(sink_share=[0.6])  # ten times what the parts allow
    assert [c.column for c in compare_frames("collapse", wrong, cpu, rules).cells] == ["sink_share"]


def points(angle: float, reflect: bool = False) -> pd.DataFrame:
    xy = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [1.0, 1.0]])
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    xy = xy @ turn.T * ([1.0, -1.0] if reflect else 1.0)
    return pd.DataFrame(
        {
            "model": ["m"] * 4,
            "revision": ["-"] * 4,
            "x_keep": xy[:, 0],
            "y_keep": xy[:, 1],
            "coordinate_rounding": [1e-4, 2e-4, 1e-4, 1e-4],
        }
    )


COORDINATES = {
    "x_keep": Coordinates("y_keep", "coordinate_rounding"),
    "y_keep": Coordinates("x_keep", "coordinate_rounding"),
}


@pytest.mark.parametrize(("angle", "reflect"), [(np.pi / 2, False), (1.0, True), (np.pi, False)])
def test_coordinates_are_held_through_the_distances_between_their_points(angle, reflect):
    turned = points(angle, reflect)
    assert compare_frames("cluster", points(0.0), turned, COORDINATES).same
    assert not compare_frames("cluster", points(0.0), turned).same  # cell by cell they differ
    moved = turned.copy()
    moved.loc[3, "x_keep"] += 1.5e-4  # within the group's largest stated bound, 2e-4
    assert compare_frames("cluster", moved, points(0.0), COORDINATES).same
    moved.loc[3, "x_keep"] += 1e-3
    got = compare_frames("cluster", moved, points(0.0), COORDINATES)
    assert 3 in {c.row for c in got.cells} and not got.same


def test_labels_are_held_through_the_partition_they_make():
    a = pd.DataFrame({"model": ["m"] * 4 + ["n"] * 2, "cluster_keep": [0, 0, 1, 2, 0, 1]})
    renamed = a.assign(cluster_keep=[2, 2, 0, 1, 1, 0])  # the same partition of each model
    assert compare_frames("cluster", a, renamed, {"cluster_keep": Labels()}).same
    split = a.assign(cluster_keep=[2, 0, 0, 1, 1, 0])  # row 1 left its cluster
    got = compare_frames("cluster", split, a, {"cluster_keep": Labels()})
    assert not got.same and {c.row for c in got.cells} <= {0, 1, 2}
    # Where the reference states row 1 within rounding of two centres, it may move.
    edged = a.assign(label_edge=[False, True, False, False, False, False])
    rule = {"cluster_keep": Labels(edge="label_edge")}
    assert compare_frames("cluster", split.assign(label_edge=edged["label_edge"]), edged, rule).same


def test_a_value_on_its_references_edge_may_differ_by_anything():
    rule = {"ratio": Exponent("ratio_rounding", edge="heads_edge")}
    ref = pd.DataFrame(
        {"ratio": [2.0, 3.0], "ratio_rounding": [1e-4, 1e-4], "heads_edge": [True, False]}
    )
    assert compare_frames("prune", ref.assign(ratio=[5.0, 3.0]), ref, rule).same
    (cell,) = compare_frames("prune", ref.assign(ratio=[2.0, 5.0]), ref, rule).cells
    assert cell.row == 1


def test_a_bound_of_a_rate_in_percent_counts_its_units_in_points():
    # One item of 2,000 is 0.05 points of a rate in percent: 3 items are 0.15 points.
    rule = {"rate_rounding": Bound(per="n_items", scale=100.0)}
    ref = pd.DataFrame({"n_items": [2000], "rate_rounding": [0.10]})
    allowed = BOUND_RTOL * 0.10 + 3 * 100.0 / 2000 + FLOAT64_SLACK * 0.10
    assert compare_frames("t", ref.assign(rate_rounding=[0.10 + 0.99 * allowed]), ref, rule).same
    (cell,) = compare_frames(
        "t", ref.assign(rate_rounding=[0.10 + 1.01 * allowed]), ref, rule
    ).cells
    assert cell.allowed == pytest.approx(allowed)
