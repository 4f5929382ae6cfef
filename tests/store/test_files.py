"""Atomic writes of files and folders, and what a killed write leaves behind."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from attncoda.store.files import (
    TEMP_PREFIX,
    atomic_folder,
    atomic_write_bytes,
    atomic_write_json,
    is_temporary,
    jsonable,
)


def test_atomic_folder_replaces_the_target_in_one_rename(tmp_path: Path) -> None:
    target = tmp_path / "step4"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_folder(target) as temp:
        assert temp == tmp_path / f"{TEMP_PREFIX}step4-{os.getpid()}"
        (temp / "new.txt").write_text("new")
        assert (target / "old.txt").is_file()  # untouched until the block ends
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step4"]


def test_atomic_folder_keeps_the_target_on_an_error(tmp_path: Path) -> None:
    target = tmp_path / "step4"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="killed"), atomic_folder(target) as temp:
        (temp / "half.txt").write_text("half")
        raise RuntimeError("killed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step4"]
    assert (target / "old.txt").read_text() == "old"


def test_atomic_folder_empties_a_leftover_of_the_same_process(tmp_path: Path) -> None:
    leftover = tmp_path / f"{TEMP_PREFIX}out-{os.getpid()}"
    leftover.mkdir()
    (leftover / "stale.txt").write_text("stale")
    with atomic_folder(tmp_path / "out") as temp:
        assert list(temp.iterdir()) == []
    assert (tmp_path / "out").is_dir() and not leftover.exists()


def test_is_temporary_names_what_the_writers_leave(tmp_path: Path) -> None:
    assert is_temporary(f"{TEMP_PREFIX}step2-1")
    assert is_temporary(".attncoda_series.json.k3j2.tmp")
    assert not is_temporary("step2")
    assert not is_temporary("notes.tmp")  # not hidden: no writer here makes it
    assert not is_temporary(".hidden")


def test_a_write_that_fails_leaves_no_temporary(tmp_path: Path) -> None:
    # A value json cannot encode fails before anything is written.
    with pytest.raises(TypeError, match="set is not JSON serialisable"):
        atomic_write_json(tmp_path / "a.json", {"x": {1}})
    assert list(tmp_path.iterdir()) == []
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert [p.name for p in tmp_path.iterdir()] == ["b.bin"]
    assert not any(is_temporary(p.name) for p in tmp_path.iterdir())


def test_jsonable_turns_numpy_scalars_and_paths_into_json() -> None:
    text = json.dumps({"a": np.int64(3), "b": np.float32(0.5), "c": Path("x/y")}, default=jsonable)
    assert json.loads(text) == {"a": 3, "b": 0.5, "c": "x/y"}
    with pytest.raises(TypeError, match="object is not JSON serialisable"):
        jsonable(object())
