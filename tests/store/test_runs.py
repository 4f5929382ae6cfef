"""The run store: units, atomic partitions, config refusal and the union of partitions."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.store.guard import check_run_folder, new_folders, remove_created
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


# --------------------------------------------------------------------------- what --out accepts


def _tree(folder):
    """Every path under ``folder`` with its bytes (None for a folder): the whole state."""
    return {
        str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
    }


def test_a_new_an_empty_and_a_run_folder_are_accepted(tmp_path):
    assert check_run_folder(tmp_path / "new") is False
    assert not (tmp_path / "new").exists()  # nothing is written by the check
    (tmp_path / "empty").mkdir()
    assert check_run_folder(tmp_path / "empty") is True
    RunStore(tmp_path / "run", "reproduce", CONFIG)
    assert check_run_folder(tmp_path / "run") is True
    # A run's damaged manifest is the store's to name (test_faults.py), not a user's file.
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text('{"command": ')
    assert check_run_folder(tmp_path / "broken") is True


def test_a_folder_of_other_files_is_refused_and_left_as_it_was(tmp_path):
    user = tmp_path / "mine"
    (user / "photos").mkdir(parents=True)
    (user / "photos" / "cat.jpg").write_bytes(b"\xff\xd8\xff")
    (user / "todo.txt").write_text("buy milk\n")
    before = _tree(user)
    message = (
        f"--out {str(user)!r} is not empty ('photos' and 1 more) and is no attncoda run "
        f"folder: give a new or empty folder, or the folder of an earlier attncoda run"
    )
    for call in (lambda: check_run_folder(user), lambda: RunStore(user, "flips", CONFIG)):
        with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
            call()
    assert _tree(user) == before


@pytest.mark.parametrize(
    "text", ['{"name": "app", "icons": []}', "[1, 2]", '{"command": "flips", "config": {}}']
)
def test_a_manifest_json_attncoda_did_not_write_is_refused(tmp_path, text):
    (tmp_path / "manifest.json").write_text(text)
    message = (
        f"--out {str(tmp_path)!r} holds a manifest.json that attncoda did not write: give a "
        f"new or empty folder, or the folder of an earlier attncoda run"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        RunStore(tmp_path, "flips", CONFIG)
    assert (tmp_path / "manifest.json").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_a_store_says_whether_it_made_the_folder(tmp_path):
    assert RunStore(tmp_path / "run", "reproduce", CONFIG).made is True
    assert RunStore(tmp_path / "run", "reproduce", CONFIG).made is False  # reopened


def test_remove_created_takes_exactly_what_the_run_made(tmp_path):
    keep = tmp_path / "kept"
    keep.mkdir()
    (keep / "other.txt").write_text("not the run's")
    out = keep / "a" / "b" / "run"
    created = new_folders(out)
    assert created == (out, out.parent, out.parent.parent)
    RunStore(out, "reproduce", CONFIG).finish(Unit("flips", "a"), {})
    remove_created(out, created)
    assert _tree(tmp_path) == {"kept": None, "kept/other.txt": b"not the run's"}
    # A folder that was empty before the run keeps existing, emptied.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert new_folders(empty) == ()
    RunStore(empty, "reproduce", CONFIG)
    remove_created(empty, ())
    assert empty.is_dir() and list(empty.iterdir()) == []
    # A parent another writer filled meanwhile stays, with what it holds.
    out = tmp_path / "shared" / "run"
    created = new_folders(out)
    RunStore(out, "reproduce", CONFIG)
    (tmp_path / "shared" / "theirs").mkdir()
    remove_created(out, created)
    assert _tree(tmp_path / "shared") == {"theirs": None}


def test_the_api_refuses_a_user_folder_before_loading_anything(tmp_path):
    import attncoda as ac

    (tmp_path / "notes.txt").write_text("mine\n")
    before = _tree(tmp_path)
    with pytest.raises(AttncodaError, match=r"is not empty \('notes.txt'\)"):
        ac.profile("minilm", out=tmp_path)
    assert _tree(tmp_path) == before


def test_a_failed_run_removes_the_folder_it_made_and_only_that(tmp_path):
    """A real run that fails in its unit (an attention file with a pickled object):
    ``run_experiment`` removes the new folder and its new parents, empties a folder that
    was empty, and keeps a run folder that held a finished run."""
    import fractions

    torch = pytest.importorskip("torch")
    from attncoda.run.reproduce import run_experiment

    bad = tmp_path / "files" / "bad.pt"
    bad.parent.mkdir()
    torch.save({"attentions": fractions.Fraction(1, 3)}, bad)
    for out in (tmp_path / "x" / "new", tmp_path / "empty"):
        if out.name == "empty":
            out.mkdir()
        with pytest.raises(AttncodaError, match="holds a pickled object"):
            run_experiment("profile", [], out, attentions=[str(bad)], progress=False)
    assert _tree(tmp_path) == {"empty": None, "files": None, "files/bad.pt": bad.read_bytes()}
    # A folder holding this run's manifest before (an earlier attempt) is left to resume:
    # its manifest as it was, the unfinished unit to be redone by the next attempt.
    from attncoda.run.config import run_config

    resumed = tmp_path / "resumed"
    config = run_config([], experiments=["profile"], attentions=[str(bad)])
    RunStore(resumed, "profile", config.to_json())
    before = _tree(resumed)
    with pytest.raises(AttncodaError, match="holds a pickled object"):
        run_experiment("profile", [], resumed, attentions=[str(bad)], progress=False)
    after = _tree(resumed)
    assert after["manifest.json"] == before["manifest.json"]
    assert not any(name.endswith("_done.json") for name in after)
