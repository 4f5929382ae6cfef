"""TrainConfig: the one set of train-tiny defaults, resolved per task, and what a series records."""

from __future__ import annotations

import dataclasses
import re

import pytest

from attncoda._errors import AttncodaError
from attncoda.data.tasks import BigramBackcopy
from attncoda.training.config import TASK_DEFAULTS, ResolvedTrainConfig, TrainConfig


def test_text_defaults_resolve_to_the_task_values():
    assert TrainConfig().resolved() == ResolvedTrainConfig(
        task="text",
        steps=1000,
        seed=0,
        size="small",
        window=128,
        batch_size=16,
        lr=2e-3,
        warmup=100,
        weight_decay=0.1,
        vocab_size=1024,
        val_fraction=0.05,
        corpus=None,
        triggers=3,
    )


def test_the_resolved_config_has_the_same_fields():
    names = [f.name for f in dataclasses.fields(TrainConfig)]
    assert [f.name for f in dataclasses.fields(ResolvedTrainConfig)] == names


def test_task_defaults_resolve_to_the_task_values():
    got = TrainConfig(task="bigram-backcopy").resolved()
    assert (got.steps, got.size, got.window, got.batch_size, got.lr, got.warmup) == (
        2000,
        "tiny",
        64,
        32,
        1e-2,
        100,
    )


def test_given_fields_win_and_warmup_follows_the_steps():
    got = TrainConfig(steps=20, size="tiny", lr=0.5).resolved()
    assert (got.steps, got.size, got.lr, got.warmup, got.window) == (20, "tiny", 0.5, 2, 128)
    assert TrainConfig(steps=20, warmup=0).resolved().warmup == 0
    assert TrainConfig(steps=5000).resolved().warmup == 100


def test_none_fields_are_exactly_the_task_defaults():
    nones = {f.name for f in dataclasses.fields(TrainConfig) if f.default is None} - {
        "warmup",
        "corpus",
    }
    assert all(set(values) == nones for values in TASK_DEFAULTS.values())


def test_the_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().steps = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        TrainConfig().resolved().steps = 3  # type: ignore[misc]


def test_the_task_record_is_what_series_folders_hold():
    # The config recorded in attncoda_series.json by the default Bigram-Backcopy series.
    recorded = {
        "format": 1,
        "task": "bigram-backcopy",
        "task_config": {
            "n_tokens": 64,
            "n_triggers": 3,
            "seq_len": 64,
            "concentration": 0.1,
            "task_seed": 0,
        },
        "size": "tiny",
        "steps": 2000,
        "seed": 0,
        "window": 64,
        "batch_size": 32,
        "lr": 0.01,
        "warmup": 100,
        "weight_decay": 0.1,
        "threads": 1,
    }
    config = TrainConfig(task="bigram-backcopy").resolved()
    got = config.record(1, task=BigramBackcopy(seq_len=config.window))
    assert got == recorded
    assert list(got) == list(recorded)


def test_the_text_record():
    got = (
        TrainConfig(steps=20, size="tiny", window=64, batch_size=8)
        .resolved()
        .record(2, corpus_sha256="abc")
    )
    assert got == {
        "format": 1,
        "size": "tiny",
        "steps": 20,
        "seed": 0,
        "window": 64,
        "batch_size": 8,
        "lr": 2e-3,
        "warmup": 2,
        "weight_decay": 0.1,
        "vocab_size": 1024,
        "val_fraction": 0.05,
        "threads": 2,
        "corpus_sha256": "abc",
    }


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"task": "copy"}, "unknown task 'copy'; accepted: 'text', 'bigram-backcopy'"),
        ({"size": "huge"}, "unknown model size 'huge'; accepted: 'tiny', 'small'"),
        ({"steps": 0}, "steps must be an integer of at least 1, got 0"),
        ({"window": 7}, "window must be an integer of at least 8, got 7"),
    ],
)
def test_resolving_refuses_bad_fields(fields, message):
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        TrainConfig(**fields).resolved()
