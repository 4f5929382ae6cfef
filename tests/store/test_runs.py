"""The run store: units, atomic partitions, config refusal and the union of partitions."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.store.runs import RunStore, Unit, config_differences, read_run_tables, slug

CONFIG = {"models": ["a", "b"], "settings": {"n_boot": 10, "ks": [1, 2]}, "seed": 0}


def test_unit_key_and_folder():
    unit = Unit("flips", "owner/name", "step512")
    assert unit.key == "flips/owner/name@step512"
    assert unit.folder == "flips/owner_name@step512"
    assert Unit("profile", "smollm2").revision == "-"
    assert slug("/tmp/x y/step8") == "tmp_x_y_step8"


def test_config_differences_names_nested_keys():
    other = {"models": ["a", "b"], "settings": {"n_boot": 20, "ks": (1, 2)}, "seed": 0, "x": 1}
    assert config_differences(CONFIG, other) == ["settings.n_boot", "x"]
    assert config_differences(CONFIG, json.loads(json.dumps(CONFIG))) == []


def test_manifest_written_once_and_other_config_refused(tmp_path):
    store = RunStore(tmp_path / "run", "reproduce", CONFIG)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"] == CONFIG and manifest["command"] == "reproduce"
    assert "numpy" in manifest["packages"]
    RunStore(tmp_path / "run", "reproduce", dict(CONFIG))  # same config: reopened
    changed = {**CONFIG, "settings": {"n_boot": 11, "ks": [1, 2]}, "seed": 3}
    with pytest.raises(AttncodaError) as info:
        RunStore(tmp_path / "run", "reproduce", changed)
    message = str(info.value)
    assert "settings.n_boot (stored 10, given 11)" in message
    assert "seed (stored 0, given 3)" in message
    assert "ks" not in message
    with pytest.raises(AttncodaError, match="holds a run of 'reproduce', not 'other'"):
        RunStore(tmp_path / "run", "other", CONFIG)
    assert store.root == tmp_path / "run"


def test_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(AttncodaError, match="is a file: give a folder"):
        RunStore(tmp_path / "f", "reproduce", CONFIG)


def test_finish_marks_done_after_tables_and_keys_columns(tmp_path):
    store = RunStore(tmp_path, "reproduce", CONFIG)
    unit = Unit("flips", "a")
    assert not store.is_done(unit)
    folder = store.begin(unit)
    (folder / "flips.parquet").write_bytes(b"half")  # what a killed attempt leaves
    assert not store.is_done(unit)
    folder = store.begin(unit)  # a new attempt starts clean
    assert list(folder.iterdir()) == []
    frame = pd.DataFrame({"model": ["ignored"], "metric": ["jsd"], "flip_rate": [0.25]})
    store.finish(unit, {"flips": frame}, {"seconds": 1.5})
    assert store.is_done(unit)
    assert store.facts(unit) == {"seconds": 1.5}
    part = store.partition(unit, "flips")
    assert list(part.columns) == ["model", "revision", "metric", "flip_rate"]
    assert part.iloc[0].tolist() == ["a", "-", "jsd", 0.25]
    with pytest.raises(AttncodaError, match="lower_snake_case"):
        store.finish(unit, {"Bad-Name": frame})


def test_done_file_of_another_unit_does_not_count(tmp_path):
    store = RunStore(tmp_path, "reproduce", CONFIG)
    unit = Unit("flips", "a")
    store.finish(unit, {})
    done = store.unit_dir(unit) / "_done.json"
    done.write_text(json.dumps({"unit": ["flips", "b", "-"]}))
    assert not store.is_done(unit)
    done.write_text("{not json")
    assert not store.is_done(unit)


def test_union_in_unit_order_and_stale_tables_removed(tmp_path):
    store = RunStore(tmp_path, "reproduce", CONFIG)
    units = [Unit("flips", "b"), Unit("flips", "a"), Unit("profile", "a")]
    store.finish(units[0], {"flips": pd.DataFrame({"x": [1, 2]})})
    store.finish(units[1], {"flips": pd.DataFrame({"x": [3]})})
    store.finish(units[2], {"profile_heads": pd.DataFrame({"y": [0.5]})})
    store.write_union("flips", units)
    store.write_union("profile_heads", units)
    tables = read_run_tables(tmp_path)
    assert sorted(tables) == ["flips", "profile_heads"]
    assert tables["flips"]["model"].tolist() == ["b", "b", "a"]
    assert tables["flips"]["x"].tolist() == [1, 2, 3]
    assert store.write_union("profile_heads", units[:2]) is None
    assert sorted(read_run_tables(tmp_path)) == ["flips"]


def test_read_run_tables_without_tables(tmp_path):
    with pytest.raises(AttncodaError, match="holds no tables/ folder"):
        read_run_tables(tmp_path)


def test_result_files_are_readable_by_others(tmp_path):
    import os
    import stat

    from attncoda.store import atomic_write_bytes

    mask = os.umask(0o022)
    os.umask(mask)
    path = atomic_write_bytes(tmp_path / "report.html", b"<html></html>")
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
