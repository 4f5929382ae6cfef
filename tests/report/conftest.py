"""Fixtures of the report tests: one small ``reproduce`` run folder, shared by the session."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_runs import TINY_SETTINGS


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished ``reproduce`` run folder of two tiny trained checkpoints (its report included).

    Treat it as read-only: copy it (:func:`copy_run` in ``test_html``) before changing it.
    """
    from attncoda.run.reproduce import reproduce
    from attncoda.training.train import TrainConfig, train_tiny

    root = tmp_path_factory.mktemp("tiny-run")
    series = root / "tt"
    train_tiny(series, TrainConfig(steps=16, size="tiny"), progress=False)
    out = root / "run"
    reproduce(
        [str(series / "step8"), str(series / "step16")],
        out,
        settings=TINY_SETTINGS,
        progress=False,
    )
    return out
