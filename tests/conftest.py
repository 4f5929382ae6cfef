"""Shared test configuration: Hypothesis profiles, no model hub, and the embedded models.

``ci`` (the default) is deterministic (``derandomize=True``) so a failure in CI reproduces
exactly; ``dev`` draws fresh examples each run. Choose with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from attncoda._errors import MissingWheelError

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
