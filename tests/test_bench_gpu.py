"""bench/gpu.py's table comparison (its experiments part compares every table of a CUDA run
with the CPU's): hand-made tables that agree, differ by a stated amount, or differ in
nulls, text, rows or columns. The script itself needs a GPU (or ``--cpu-fallback``, a smoke
run of a minute and more), so only its pure parts run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_equal_tables_are_equal(gpu):
    got = gpu.compare_tables(table(), table())
    assert got["equal"] and got["max_abs_diff"] == 0.0 and got["cells_outside"] == 0


def test_a_difference_within_float32_rounding_is_equal_and_reported(gpu):
    cuda = table()
    cuda.loc[1, "entropy"] = 3.5 + 3e-5  # within 1e-5 + 1e-5 * 3.5 = 4.5e-5
    got = gpu.compare_tables(table(), cuda)
    assert got["equal"] and got["column"] == "entropy"
    assert got["max_abs_diff"] == pytest.approx(3e-5, rel=1e-6)


def test_a_difference_beyond_it_is_named_by_column(gpu):
    cuda = table()
    cuda.loc[0, "entropy"] = 2.0 + 1e-4  # beyond 1e-5 + 1e-5 * 2 = 3e-5
    got = gpu.compare_tables(table(), cuda)
    assert not got["equal"] and got["columns_differing"] == ["entropy"]
    assert got["cells_outside"] == 1 and got["max_abs_diff"] == pytest.approx(1e-4, rel=1e-6)


@pytest.mark.parametrize(
    ("column", "row", "value"),
    [("entropy", 2, 1.0), ("entropy", 0, np.nan), ("note", 1, "tie "), ("note", 2, ""),
     ("safe", 0, False), ("layer", 2, 1), ("balance", 0, 1e300), ("balance", 0, -np.inf)],
)  # fmt: skip
def test_nulls_text_flags_and_counts_must_match_exactly(gpu, column, row, value):
    cuda = table()
    cuda.loc[row, column] = value
    got = gpu.compare_tables(table(), cuda)
    assert not got["equal"] and got["columns_differing"] == [column]


def test_tables_of_other_rows_or_columns_are_not_compared_cell_by_cell(gpu):
    assert gpu.compare_tables(table(), table().iloc[:2])["why"] == "3 rows on the CPU, 2 on CUDA"
    got = gpu.compare_tables(table(), table().drop(columns="note"))
    assert not got["equal"] and got["why"] == "columns differ: ['note']"


def test_an_unknown_part_is_refused(gpu):
    assert gpu._parts("tests, speed") == ("tests", "speed")
    with pytest.raises(SystemExit, match="unknown part"):
        gpu._parts("tests,sped")


def test_a_share_is_held_to_what_its_parts_differences_make_of_it(gpu):
    # A change of 1e-4 nats whose parts each move by 1e-6 (within the tolerance): the share
    # 0.5 moves by up to (1e-6 + 0.5 * 1e-6) / 1e-4 = 1.5e-2, far past 1e-5 + 1e-5 * 0.5.
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
    gpu_table = cpu.copy()
    gpu_table["delta_entropy"] = [1e-4 + 1e-6]
    gpu_table["delta_sink"] = [5e-5 + 1e-6]
    gpu_table["delta_sink_sink_first"] = [4e-5 + 1e-6]
    gpu_table["delta_sink_content_first"] = [6e-5 + 1e-6]
    for name, num in (("sink_share", 5e-5), ("sink_share_low", 4e-5), ("sink_share_high", 6e-5)):
        gpu_table[name] = [(num + 1e-6) / (1e-4 + 1e-6)]  # what the parts make of it
    assert gpu.compare_tables(cpu, gpu_table)["equal"]
    wrong = gpu_table.copy()
    wrong["sink_share"] = [0.6]  # ten times what the parts allow
    found = gpu.compare_tables(cpu, wrong)
    assert not found["equal"] and found["columns_differing"] == ["sink_share"]


def test_a_flip_rate_is_held_to_its_stated_rounding(gpu):
    # The H200's case: one ci_high moved by 5.2e-4 (a resample's triplet at the tie edge).
    # Within the larger of the two stated ci_rounding it agrees; without it, it does not.
    cpu = pd.DataFrame(
        {
            "flips": [9],
            "n_ties": [0],
            "flip_rate": [9 / 168],
            "ci_high": [0.0895833],
            "n_fragile": [1],
            "rate_rounding": [1 / 167],
            "ci_rounding": [1e-3],
        }
    )
    cuda = cpu.copy()
    cuda["flips"] = [10]
    cuda["flip_rate"] = [10 / 168]
    cuda["ci_high"] = [0.0901046]
    cuda["ci_rounding"] = [2e-4]
    assert gpu.compare_tables(cpu, cuda)["equal"]
    cpu["ci_rounding"] = [1e-4]
    found = gpu.compare_tables(cpu, cuda)
    assert not found["equal"] and found["columns_differing"] == ["ci_high"]
    cuda["flips"] = [11]  # two triplets moved, one stated
    found = gpu.compare_tables(cpu, cuda)
    assert found["columns_differing"] == ["flips", "ci_high"]
    cuda["ci_rounding"] = [np.nan]  # a bound is each device's own; only its null must match
    assert "ci_rounding" in gpu.compare_tables(cpu, cuda)["columns_differing"]
