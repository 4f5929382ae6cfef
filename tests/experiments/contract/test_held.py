"""The rules by which two runs' tables are compared (attncoda.experiments.contract._held):
hand-made tables that agree, differ by a stated amount, or differ in nulls, text, rows or
columns; each allowance computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from attncoda.experiments.contract import (
    Bound,
    Coordinates,
    Labels,
    Same,
    Share,
    Stated,
    compare_frames,
)
from attncoda.experiments.contract._held import ATOL, BOUND_RTOL, BOUND_UNITS, RTOL

pd = pytest.importorskip("pandas")


def table():
    return pd.DataFrame(
        {
            "model": ["a", "a", "b"],
            "layer": [0, 1, 0],
            "entropy": [2.0, 3.5, np.nan],
            "balance": [np.inf, -1.0, 0.5],
            "note": ["", "tie", None],
            "safe": [True, False, True],
        }
    )


def test_equal_tables_are_the_same_evidence():
    got = compare_frames("t", table(), table())
    assert got.same and got.worst == 0.0 and got.cells == ()


def test_a_float_within_float32_rounding_is_the_same_and_measured_in_its_allowance():
    other = table()
    other.loc[1, "entropy"] = 3.5 + 3e-5  # within 1e-5 + 1e-5 * (3.5 + 3e-5)
    got = compare_frames("t", table(), other)
    assert got.same and got.worst_column == "entropy"
    assert got.worst == pytest.approx(3e-5 / (ATOL + RTOL * (3.5 + 3e-5)), rel=1e-6)


def test_a_float_beyond_it_is_named_with_its_row_and_allowance():
    other = table()
    other.loc[0, "entropy"] = 2.0 + 1e-4  # beyond 1e-5 + 1e-5 * 2.0001
    got = compare_frames("t", table(), other)
    (cell,) = got.cells
    assert (cell.row, cell.column, cell.key) == (0, "entropy", "a 0")
    assert cell.difference == pytest.approx(1e-4, rel=1e-6)
    assert cell.allowed == pytest.approx(ATOL + RTOL * 2.0001, rel=1e-9)
    assert "t[a 0].entropy: 2.0 against 2.0001" in cell.line()


@pytest.mark.parametrize(
    ("column", "row", "value"),
    [("entropy", 2, 1.0), ("entropy", 0, np.nan), ("note", 1, "tie "), ("note", 2, ""),
     ("safe", 0, False), ("layer", 2, 1), ("balance", 0, 1e300), ("balance", 0, -np.inf)],
)  # fmt: skip
def test_nulls_text_flags_counts_and_infinities_must_match(column, row, value):
    other = table()
    other.loc[row, column] = value
    got = compare_frames("t", table(), other)
    assert not got.same and [c.column for c in got.cells] == [column]


def test_tables_of_other_rows_or_columns_are_not_compared_cell_by_cell():
    assert compare_frames("t", table(), table().iloc[:2]).why == "3 rows against 2"
    got = compare_frames("t", table(), table().drop(columns="note"))
    assert not got.same and got.why == "columns differ: ['note']"


def test_a_declared_rule_overrides_the_type():
    other = table()
    other.loc[1, "entropy"] = 3.5 + 1e-9
    assert not compare_frames("t", table(), other, {"entropy": Same()}).same


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


RULES = {
    "flips": Stated("n_fragile"),
    "flip_rate": Stated("rate_rounding"),
    "ci_high": Stated("ci_rounding"),
    "n_fragile": Bound(),
    "rate_rounding": Bound(per="n_triplets"),
    "ci_rounding": Bound(per="n_triplets"),
}


def test_a_count_and_its_rates_are_held_to_the_stated_rounding():
    # The H200's case: one triplet at the tie edge moved a flip and ci_high by 5.2e-4,
    # within the larger stated ci_rounding (1e-3).
    moved = flips(flips_=10, ci_high=0.0901046, ci_rounding=0.99e-3)
    assert compare_frames("flips", flips(), moved, RULES).same
    # Without the bound the same move is a difference of every column that moved.
    plain = compare_frames("flips", flips(), moved)
    assert {c.column for c in plain.cells} == {"flips", "flip_rate", "ci_high"}
    # Two flips where one triplet is stated: the count differs, by 2 against 1 allowed (a
    # count carries no float rounding), and so does its rate (2/168 against 1/167 + 1e-5).
    two = compare_frames("flips", flips(), flips(flips_=11), RULES)
    assert [(c.column, c.difference, c.allowed) for c in two.cells[:1]] == [("flips", 2, 1)]
    assert [c.column for c in two.cells] == ["flips", "flip_rate"]


def test_a_bound_is_held_to_its_own_rule_so_an_inflated_one_fails():
    n = 1000
    base = pd.DataFrame({"n_triplets": [168_000], "n_fragile": [n], "rate_rounding": [0.006]})
    allowed = BOUND_RTOL * n + BOUND_UNITS  # 13 triplets
    near = base.assign(n_fragile=[n + 13], rate_rounding=[0.006 * 1.01])
    assert compare_frames("flips", base, near, RULES).same
    inflated = base.assign(n_fragile=[n + 14])
    (cell,) = compare_frames("flips", base, inflated, RULES).cells
    assert (cell.column, cell.difference) == ("n_fragile", 14)
    assert cell.allowed == pytest.approx(BOUND_RTOL * (n + 14) + BOUND_UNITS)
    assert allowed < cell.allowed < 14
    # A rate's unit is one triplet of its count: 3 / 168,000 beside 1% of itself, on top of
    # float rounding: 1e-5 + 1e-5 * 0.0061 + 0.01 * 0.0061 + 3 / 168,000 = 8.88e-5.
    rate = base.assign(rate_rounding=[0.006 + 8.8e-5])
    assert compare_frames("flips", base, rate, RULES).same
    rate = base.assign(rate_rounding=[0.006 + 9e-5])
    (cell,) = compare_frames("flips", base, rate, RULES).cells
    assert cell.allowed == pytest.approx(ATOL + (RTOL + BOUND_RTOL) * 0.00609 + 3 / 168_000)


def test_a_share_is_held_to_what_its_parts_differences_make_of_it():
    # A change of 1e-4 nats whose parts each move by 1e-6 (within the tolerance): the share
    # 0.5 moves by up to (1e-6 + 0.5 * 1e-6) / 1e-4 = 1.5e-2, far past 1e-5 + 1e-5 * 0.5.
    ends = Share(("delta_sink_sink_first", "delta_sink_content_first"), "delta_entropy")
    rules = {
        "sink_share": Share(("delta_sink",), "delta_entropy"),
        "sink_share_low": ends,
        "sink_share_high": ends,
    }
    cpu = pd.DataFrame(
        {
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
    assert compare_frames("collapse", cpu, gpu, rules).same
    assert not compare_frames("collapse", cpu, gpu).same
    wrong = gpu.assign(sink_share=[0.6])  # ten times what the parts allow
    assert [c.column for c in compare_frames("collapse", cpu, wrong, rules).cells] == ["sink_share"]


def points(angle: float, reflect: bool = False) -> pd.DataFrame:
    xy = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [1.0, 1.0]])
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    xy = xy @ turn.T * ([1.0, -1.0] if reflect else 1.0)
    return pd.DataFrame(
        {"model": ["m"] * 4, "revision": ["-"] * 4, "x_keep": xy[:, 0], "y_keep": xy[:, 1]}
    )


COORDINATES = {"x_keep": Coordinates("y_keep"), "y_keep": Coordinates("x_keep")}


@pytest.mark.parametrize(("angle", "reflect"), [(np.pi / 2, False), (1.0, True), (np.pi, False)])
def test_coordinates_are_held_through_the_distances_between_their_points(angle, reflect):
    turned = points(angle, reflect)
    assert compare_frames("cluster", points(0.0), turned, COORDINATES).same
    assert not compare_frames("cluster", points(0.0), turned).same  # cell by cell they differ
    moved = turned.copy()
    moved.loc[3, "x_keep"] += 1e-3  # beyond 1e-5 + 1e-5 * 5 (the largest distance)
    got = compare_frames("cluster", points(0.0), moved, COORDINATES)
    assert 3 in {c.row for c in got.cells} and not got.same


def test_labels_are_held_through_the_partition_they_make():
    a = pd.DataFrame({"model": ["m"] * 4 + ["n"] * 2, "cluster_keep": [0, 0, 1, 2, 0, 1]})
    renamed = a.assign(cluster_keep=[2, 2, 0, 1, 1, 0])  # the same partition of each model
    assert compare_frames("cluster", a, renamed, {"cluster_keep": Labels()}).same
    split = a.assign(cluster_keep=[2, 0, 0, 1, 1, 0])  # row 1 left its cluster
    got = compare_frames("cluster", a, split, {"cluster_keep": Labels()})
    assert not got.same and {c.row for c in got.cells} <= {0, 1, 2}
