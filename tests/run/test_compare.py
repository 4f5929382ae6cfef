"""``attncoda compare``: two run folders' tables, each column held by its rule. A run is the
same evidence as itself, the shipped reference run is as itself (however it is named), and
the demo recorded on an Intel Xeon is the same evidence as it; a copy with one flip count
moved past its stated band, or with an inflated count of fragile triplets, differs, and the
comparison names the cell and what it was allowed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from attncoda import AttncodaError, compare
from attncoda.cli import main
from attncoda.run.compare import reference_run

#: The demo's tables recorded on an Intel Xeon (MKL's AVX-512 path), before the tables
#: stated every threshold's fragility (tests/run/recorded/README.md).
INTEL = Path(__file__).parent / "recorded" / "demo-intel-xeon-207-aten-avx2"


def _copy(run: Path, tmp_path: Path, name: str = "copy") -> Path:
    out = tmp_path / name
    shutil.copytree(run, out)
    return out


def _edit(run: Path, table: str, row: int, column: str, change) -> tuple[object, object]:
    path = run / "tables" / f"{table}.parquet"
    frame = pd.read_parquet(path)
    before = frame.at[row, column]
    frame.at[row, column] = change(frame.loc[row])
    frame.to_parquet(path)
    return before, frame.at[row, column]


def test_a_run_is_the_same_evidence_as_itself(uninterrupted):
    got = compare(uninterrupted, uninterrupted)
    assert got.same and got.cells == () and got.config == ()
    names = {p.stem for p in (uninterrupted / "tables").glob("*.parquet")}
    assert {t.table for t in got.tables} == names >= {"flips", "collapse", "cluster"}
    assert got.summary() == f"same evidence within rounding: {len(names)} tables, every cell equal"


def test_the_shipped_reference_run_is_the_default_and_leaves_out_what_it_does_not_ship():
    reference = reference_run()
    assert (reference / "manifest.json").is_file() and (reference / "tables").is_dir()
    got = compare(reference)
    assert got.reference == reference and got.same and got.left_out == ()
    assert "cluster_distances" not in {t.table for t in got.tables}


def test_the_shipped_reference_named_by_its_path_is_the_default(tmp_path):
    run = _copy(reference_run(), tmp_path)
    table = pd.DataFrame({"model": ["smollm2"], "distance": [1.0]})
    table.to_parquet(run / "tables" / "cluster_distances.parquet")
    for reference in (None, reference_run(), str(reference_run()) + "/"):
        got = compare(run, reference)
        assert got.same and got.left_out == ("cluster_distances",), reference
        assert got.summary().startswith("same evidence within rounding: 16 tables")
        assert "not compared: cluster_distances (left out of the reference's record)" in got.lines()


def test_the_demo_recorded_on_an_intel_xeon_is_the_same_evidence():
    got = compare(INTEL)
    assert got.same, "\n".join(got.lines())
    assert got.left_out == () and len(got.tables) == 16


def test_a_subset_run_that_holds_no_table_is_not_the_same_evidence(tmp_path):
    run = _copy(reference_run(), tmp_path)
    for path in (run / "tables").glob("*.parquet"):
        path.unlink()
    got = compare(run, subset=True)
    assert not got.same and got.tables == ()
    assert got.summary() == f"different: {run} holds no table of the reference's to compare"


def test_a_flip_count_moved_past_its_band_differs_naming_the_cell(uninterrupted, tmp_path):
    copy = _copy(uninterrupted, tmp_path)
    frame = pd.read_parquet(copy / "tables" / "flips.parquet")
    row = int(frame["n_fragile"].idxmax())
    fragile = int(frame.at[row, "n_fragile"])
    before, after = _edit(copy, "flips", row, "flips", lambda r: r["flips"] + r["n_fragile"] + 1)
    got = compare(copy, uninterrupted)
    assert not got.same
    (cell,) = got.cells
    assert (cell.table, cell.row, cell.column) == ("flips", row, "flips")
    assert (cell.a, cell.b, cell.difference, cell.allowed) == (after, before, fragile + 1, fragile)
    assert got.lines()[1].strip() == cell.line()
    assert f"differ by {fragile + 1}, allowed {fragile}" in cell.line()
    # Within the band, the same evidence.
    _edit(copy, "flips", row, "flips", lambda r: before + fragile)
    assert compare(copy, uninterrupted).same


def test_an_inflated_count_of_fragile_triplets_differs(uninterrupted, tmp_path):
    copy = _copy(uninterrupted, tmp_path)
    _edit(copy, "flips", 0, "n_fragile", lambda r: 2 * r["n_fragile"] + 4)
    got = compare(copy, uninterrupted)
    assert not got.same and {c.column for c in got.cells} == {"n_fragile"}


def test_a_missing_table_is_named_and_a_subset_run_compares_its_own_tables(uninterrupted, tmp_path):
    copy = _copy(uninterrupted, tmp_path)
    (copy / "tables" / "safety.parquet").unlink()
    got = compare(copy, uninterrupted)
    (missing,) = [t for t in got.tables if not t.same]
    assert missing.table == "safety" and missing.why == f"no table in {copy}"
    # A run of some units only: its tables against the same units' rows of the other.
    part = _copy(uninterrupted, tmp_path, "part")
    for path in (part / "tables").glob("*.parquet"):
        if path.stem not in ("flips", "profile_heads"):
            path.unlink()
    flips = pd.read_parquet(part / "tables" / "flips.parquet")
    kept = flips[flips["model"] == flips["model"].iloc[0]]
    kept.to_parquet(part / "tables" / "flips.parquet")
    got = compare(part, uninterrupted, subset=True)
    assert got.same and [t.table for t in got.tables] == ["flips", "profile_heads"]
    assert not compare(part, uninterrupted).same


def test_the_command_prints_the_verdict_and_exits_by_it(uninterrupted, tmp_path, capsys):
    assert main(["compare", str(uninterrupted), str(uninterrupted)]) == 0
    assert capsys.readouterr().out.startswith("same evidence within rounding: ")
    copy = _copy(uninterrupted, tmp_path)
    _edit(copy, "flips", 0, "n_fragile", lambda r: 2 * r["n_fragile"] + 4)
    assert main(["compare", str(copy), str(uninterrupted)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("different: 1 of ") and "flips[" in out and "allowed" in out
    assert main(["compare", str(tmp_path / "nothing")]) == 2
    assert "is not a run folder (no manifest.json)" in capsys.readouterr().err


def test_a_folder_that_is_not_a_finished_run_is_refused(tmp_path):
    with pytest.raises(AttncodaError, match="is not a run folder"):
        compare(tmp_path)


def test_the_demo_ends_by_the_comparison_and_fails_where_the_run_differs(tmp_path, capsys):
    from attncoda.report.headline import end_demo

    run = _copy(reference_run(), tmp_path)
    assert end_demo(run, 1.0) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith("same evidence within rounding: 16 tables")
    frame = pd.read_parquet(run / "tables" / "flips.parquet")
    row = int(frame["n_fragile"].idxmax())
    _edit(run, "flips", row, "flips", lambda r: r["flips"] + r["n_fragile"] + 1)
    assert end_demo(run, 1.0) == 1
    out = capsys.readouterr().out
    assert "different: 1 of 16 tables" in out and "flips[" in out and "allowed" in out


def test_a_demo_of_fewer_models_is_compared_on_what_it_holds(tmp_path, capsys):
    import json

    from attncoda.report.headline import end_demo

    run = _copy(reference_run(), tmp_path)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["config"]["models"] = manifest["config"]["models"][:1]  # as --models smollm2
    (run / "manifest.json").write_text(json.dumps(manifest))
    for path in (run / "tables").glob("*.parquet"):
        frame = pd.read_parquet(path)
        if "model" in frame.columns:
            frame[frame["model"] == manifest["config"]["models"][0]].to_parquet(path)
    assert end_demo(run, 1.0) == 0
    assert "same evidence within rounding" in capsys.readouterr().out
    # a model the reference never ran is not a part of it: every table is compared whole
    manifest["config"]["models"] = ["elsewhere"]
    (run / "manifest.json").write_text(json.dumps(manifest))
    assert end_demo(run, 1.0) == 1


def test_the_built_wheel_ships_the_reference_run(tmp_path):
    import subprocess
    import sys
    import zipfile

    root = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(root)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("attncoda-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        "attncoda/run/reference/" + p.relative_to(reference_run()).as_posix()
        for p in reference_run().rglob("*")
        if p.is_file()
    }
    assert "attncoda/run/reference/manifest.json" in shipped
    assert len(shipped) >= 17 and shipped <= names
