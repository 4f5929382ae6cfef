"""Fixtures of the model tests: no hub, and a fresh attncoda cache."""

from __future__ import annotations

import pytest

huggingface_hub = pytest.importorskip("huggingface_hub")


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    # The hub library reads HF_HUB_OFFLINE at import; patch the constant too, so that no test
    # waits on network retries even when run without the variable.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # (By dotted name: the package loads ``constants`` lazily, and a test that loads nothing
    # may run first.)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "attncoda-cache"
    monkeypatch.setenv("ATTNCODA_CACHE", str(folder))
    return folder
