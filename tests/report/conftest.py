"""Fixtures of the report tests: tiny trained checkpoints, and one small run of every
experiment on two of them (its report rendered), shared by the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_runs import TINY_SETTINGS


@pytest.fixture(scope="session")
def tiny_series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of tiny train-tiny checkpoints ``step0`` .. ``step16``."""
    from attncoda.training.train import TrainConfig, train_tiny

    series = tmp_path_factory.mktemp("tiny-series") / "tt"
    train_tiny(series, TrainConfig(steps=16, size="tiny"), progress=False)
    return series


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_series: Path) -> Path:
    """A finished ``reproduce`` run folder of two tiny trained checkpoints (its report
    rendered).

    Treat it as read-only: copy it (:func:`copy_run` in ``test_html``) before changing it.
    """
    from attncoda.report.html import render_report
    from attncoda.run.reproduce import reproduce

    out = tmp_path_factory.mktemp("tiny-run") / "run"
    reproduce(
        [str(tiny_series / "step8"), str(tiny_series / "step16")],
        out,
        settings=TINY_SETTINGS,
        progress=False,
    )
    render_report(out)
    return out
