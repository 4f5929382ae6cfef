"""Shared test configuration: Hypothesis profiles, no model hub, the embedded models, and the
tiny trained series and run that the run and report tests share.

``ci`` (the default) is deterministic (``derandomize=True``) so a failure in CI reproduces
exactly; ``dev`` draws fresh examples each run. Choose with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from attncoda._errors import MissingWheelError
from tiny_runs import TINY_SETTINGS

# Tests use the embedded models and models built from configs only; a hub lookup would
# wait on retries where there is no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def embedded_model():
    """``load_model`` for an embedded model that skips the test only when a wheel is missing.

    Only :class:`attncoda.MissingWheelError` (the model's wheel, or one of its parts, is not
    installed) becomes a skip, with the error's ``pip install`` line as the reason; any other
    failure of the load (a damaged wheel, a transformers error) fails the test.
    """

    def load(name: str, **kwargs: Any) -> tuple[Any, Any, Any]:
        from attncoda.models.load import load_model  # imports torch: only when a test loads

        try:
            return load_model(name, **kwargs)
        except MissingWheelError as err:
            pytest.skip(str(err))

    return load


# The tiny series and the run on two of its checkpoints are made once for the session: the
# report tests and the run tests (reproduce, faults, sweep) read the same ones. A module
# fixture trained and ran them again for each of those modules.


@pytest.fixture(scope="session")
def tiny_series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder ``tt`` of tiny train-tiny checkpoints ``step0`` .. ``step16``."""
    from attncoda.training.train import TrainConfig, train_tiny

    series = tmp_path_factory.mktemp("tiny-series") / "tt"
    train_tiny(series, TrainConfig(steps=16, size="tiny"), progress=False)
    return series


@pytest.fixture(scope="session")
def tiny_models(tiny_series: Path) -> list[str]:
    """Two checkpoints of :func:`tiny_series` as model specs: ``step8`` and ``step16``."""
    return [str(tiny_series / "step8"), str(tiny_series / "step16")]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_models: list[str]) -> Path:
    """A finished, uninterrupted ``reproduce`` run of every experiment on
    :func:`tiny_models` (``TINY_SETTINGS``), its report rendered.

    Treat it as read-only: copy it before changing it. A test that reruns into it must
    leave it as it was (a rerun that skips every unit, a report rendered again).
    """
    from attncoda.report.html import render_report
    from attncoda.run.reproduce import reproduce

    out = tmp_path_factory.mktemp("tiny-run") / "run"
    result = reproduce(tiny_models, out, settings=TINY_SETTINGS, progress=False)
    assert result.ran == len(result.units) and result.skipped == 0
    render_report(out)
    return out
