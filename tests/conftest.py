"""Shared test configuration: Hypothesis profiles, and no model hub.

``ci`` (the default) is deterministic (``derandomize=True``) so a failure in CI reproduces
exactly; ``dev`` draws fresh examples each run. Choose with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

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
