"""Fixtures of the run tests: two tiny checkpoints as models, and one uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import pytest

from attncoda.report.html import render_report
from attncoda.run.reproduce import reproduce
from attncoda.training.train import TrainConfig, train_tiny
from tiny_runs import TINY_SETTINGS


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("series") / "tt"
    train_tiny(folder, TrainConfig(steps=16, size="tiny"), progress=False)
    return [str(folder / "step8"), str(folder / "step16")]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, models) -> Path:
    """A finished run of every experiment on ``models``, its report rendered."""
    out = tmp_path_factory.mktemp("runs") / "whole"
    result = reproduce(models, out, settings=TINY_SETTINGS, progress=False)
    assert result.ran == len(result.units) and result.skipped == 0
    render_report(out)
    return out
