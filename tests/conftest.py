"""Shared test configuration: Hypothesis profiles, no model hub, the embedded models, and the
tiny trained series and run that the run and report tests share.

``ci`` (the default) is deterministic (``derandomize=True``) so a failure in CI reproduces
exactly; ``dev`` draws fresh examples each run. Choose with ``HYPOTHESIS_PROFILE=dev``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from attncoda._errors import MissingWheelError
from tiny_runs import TINY_SETTINGS

# Tests use the embedded models and models built from configs only; a hub lookup would
# wait on retries where there is no network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Under pytest-xdist (``make test`` runs ``-n 2``) each worker gets its share of the cores,
# so two workers do not each start a thread per core. Set before torch is imported; a test
# that needs a thread count sets its own (training's pinned worker, the bit-identity checks).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _THREADS = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_name, _THREADS)

# The files that take longest (a fixture that trains or dequantises for minutes) are collected
# first. ``make test`` hands whole files to two workers in collection order (``--dist
# loadfile``), so these start at once and the short files fill the other worker around them;
# collected last, the 2,000-step training series alone kept one worker busy for the suite's
# final three minutes. Measured with ``pytest --durations`` (docs/design.md, "Tests").
FIRST = (
    "tests/test_threshold_units.py",  # the demo's threshold units under portable kernels
    "tests/run/test_sweep.py",  # a real Ray cluster, killed workers
    "tests/models/test_zoo_models.py",  # Qwen2.5-Coder's and Gemma 3's first loads
    "tests/test_code_paths.py",  # the committed outputs under two other code paths
    "tests/run/test_faults.py",
    "tests/run/test_reproduce.py",
    "tests/report/test_html.py",
    "tests/run/test_keep_going.py",
    "tests/training/test_bit_identity.py",
    "tests/capture/kernels/test_fast_bounds.py",
    "tests/capture/kernels/test_cpp_long_rows.py",
    "tests/capture/kernels/test_fused.py",  # the Triton kernel interpreted on real weights
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests of :data:`FIRST` to the front, in that order; the rest keep theirs."""
    root = Path(str(config.rootpath))

    def rank(item: pytest.Item) -> int:
        path = Path(str(item.path)).relative_to(root).as_posix()
        return FIRST.index(path) if path in FIRST else len(FIRST)

    items.sort(key=rank)


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
# report tests and the run tests (reproduce, faults, sweep) read the same ones. Under
# pytest-xdist the first worker to ask makes them in the folder the workers share, and the
# other waits for it and reads them (each worker made its own before: 30 s twice).


def _made_once(factory: pytest.TempPathFactory, name: str, make) -> Path:
    """``make(folder)`` once per test session, whatever the workers; returns ``folder``.

    The folder is ``name`` in the session's temporary folder: the one all xdist workers
    share (the parent of each worker's own), or this process's without xdist. A lock makes
    the first caller make it and every other wait for it; a folder whose making failed is
    made again by the next caller.
    """
    from attncoda.models._folders import one_writer

    root = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's own folder is in the shared one
        root = root.parent
    folder = root / name
    with one_writer(root / f"{name}.lock"):
        if not (root / f"{name}.done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            (root / f"{name}.done").touch()
    return folder


@pytest.fixture(scope="session")
def tiny_series(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder ``tt`` of tiny train-tiny checkpoints ``step0`` .. ``step16`` (read-only)."""
    from attncoda.training.train import TrainConfig, train_tiny

    def make(folder: Path) -> None:
        train_tiny(folder / "tt", TrainConfig(steps=16, size="tiny"), progress=False)

    return _made_once(tmp_path_factory, "tiny-series", make) / "tt"


@pytest.fixture(scope="session")
def tiny_models(tiny_series: Path) -> list[str]:
    """Two checkpoints of :func:`tiny_series` as model specs: ``step8`` and ``step16``."""
    return [str(tiny_series / "step8"), str(tiny_series / "step16")]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory, tiny_models: list[str]) -> Path:
    """A finished, uninterrupted ``reproduce`` run of every experiment on
    :func:`tiny_models` (``TINY_SETTINGS``), its report rendered.

    Read-only, and read by both workers at once: a test that writes into a run (a rerun, a
    report rendered again) copies it first. ``threads`` beside it says at how many torch
    threads it was made (a comparison made at other threads makes its own).
    """
    import torch

    from attncoda.report.html import render_report
    from attncoda.run.reproduce import reproduce

    def make(folder: Path) -> None:
        result = reproduce(tiny_models, folder / "run", settings=TINY_SETTINGS, progress=False)
        assert result.ran == len(result.units) and result.skipped == 0
        render_report(folder / "run")
        (folder / "threads").write_text(str(torch.get_num_threads()))

    return _made_once(tmp_path_factory, "tiny-run", make) / "run"
