"""The series folder: store temporaries are no foreign files, and a config diff names keys."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.store.files import TEMP_PREFIX  # noqa: E402
from attncoda.training.checkpoints import CHECKPOINT_META, SERIES_META  # noqa: E402
from attncoda.training.train import TrainConfig, train_tiny  # noqa: E402

TASK = {"task": "bigram-backcopy", "steps": 1, "window": 16, "batch_size": 2}


def test_leftovers_of_killed_writes_are_cleared(tmp_path: Path) -> None:
    out = tmp_path / "series"
    first = train_tiny(out, TrainConfig(**TASK), progress=False)
    (out / SERIES_META).unlink()  # unfinished
    (out / f".{SERIES_META}.k3j2.tmp").write_text("{")  # a killed atomic file write
    (out / f"{TEMP_PREFIX}step1-99").mkdir()  # a killed checkpoint folder write
    again = train_tiny(out, TrainConfig(**TASK), progress=False)
    assert again.trained and again.train_loss == first.train_loss
    assert sorted(p.name for p in out.iterdir()) == [SERIES_META, "step0", "step1"]


def test_records_are_json_written_whole(tmp_path: Path) -> None:
    result = train_tiny(tmp_path / "s", TrainConfig(**TASK), threads=1, progress=False)
    series = json.loads((result.out_dir / SERIES_META).read_text(encoding="utf-8"))
    meta = json.loads((result.checkpoints[-1] / CHECKPOINT_META).read_text(encoding="utf-8"))
    assert series["config"] == meta["config"]
    assert series["config"]["threads"] == 1 and series["config"]["window"] == 16
    assert [c["step"] for c in series["checkpoints"]] == [0, 1]


def test_another_config_is_named_by_its_dotted_keys(tmp_path: Path) -> None:
    out = tmp_path / "series"
    train_tiny(out, TrainConfig(**TASK), progress=False)
    msg = (
        f"output folder '{out}' holds checkpoints of another training configuration "
        "(differs in: task_config.seq_len, threads, window); pass overwrite=True to replace "
        "them"
    )
    with pytest.raises(AttncodaError, match=re.escape(msg)):
        train_tiny(out, TrainConfig(**{**TASK, "window": 32}), threads=2, progress=False)
