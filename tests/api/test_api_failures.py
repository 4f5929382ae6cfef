"""An experiment function keeps going past a model that cannot be read: its ``Result`` lists
the failed units and holds the other models' tables; it raises only when no unit finished."""

from __future__ import annotations

import shutil

import pytest

import attncoda
from attncoda import AttncodaError


@pytest.fixture
def broken(tmp_path, tiny_models):
    """A copy of a tiny checkpoint whose ``model.safetensors`` lost its second half."""
    folder = tmp_path / "broken"
    shutil.copytree(tiny_models[1], folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


def test_a_result_lists_the_failed_units_beside_the_others_tables(tiny_models, broken):
    result = attncoda.profile([tiny_models[0], str(broken)], docs=2, max_tokens=32)
    weights = str((broken / "model.safetensors").resolve())
    assert list(result.failed) == [f"profile/{broken}@-"]
    assert result.failed[f"profile/{broken}@-"].startswith(
        f"AttncodaError: model file {weights!r} cannot be read (SafetensorError: "
    )
    assert set(result.table["model"]) == {tiny_models[0]}
    assert list(result.summary) == [tiny_models[0]]
    assert repr(result).endswith(", 1 unit(s) failed)")


def test_a_call_where_no_unit_finished_raises_the_first_failure(broken, tmp_path):
    weights = str((broken / "model.safetensors").resolve())
    out = tmp_path / "out"
    with pytest.raises(AttncodaError) as info:
        attncoda.profile(str(broken), docs=2, max_tokens=32, out=out)
    assert str(info.value).startswith(
        f"unit profile/{broken}@- failed: model file {weights!r} cannot be read (SafetensorError: "
    )
    assert str(info.value).endswith(
        "): it is truncated or damaged; re-download the model, re-save it with "
        "save_pretrained, or check the path"
    )
    assert not out.exists(), "the run folder the call made was left behind"
