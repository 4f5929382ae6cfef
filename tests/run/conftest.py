"""Fixtures of the run tests: two tiny checkpoints as models, and one uninterrupted run.

Both are the session's (``tiny_models`` and ``tiny_run`` in ``tests/conftest.py``), shared
with the report tests, so they are trained and run once.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def models(tiny_models: list[str]) -> list[str]:
    """``step8`` and ``step16`` of a tiny series ``tt`` (step0 .. step16)."""
    return tiny_models


@pytest.fixture(scope="session")
def uninterrupted(tiny_run: Path) -> Path:
    """A finished run of every experiment on ``models``, its report rendered (read-only)."""
    return tiny_run
