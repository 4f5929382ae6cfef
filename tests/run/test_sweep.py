"""The sweep: one Ray task per unit on a real local Ray cluster, and its in-process path.

The cluster is a real ``ray start --head`` on 127.0.0.1 with two CPUs (``ray_cluster.py``),
started once for the module and always stopped. The models are two checkpoints of a tiny
model trained here; every table a sweep writes is compared, value for value, with an
in-process ``reproduce`` run of the same config.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from attncoda import AttncodaError
from attncoda.run.config import run_config
from attncoda.run.plan import plan
from attncoda.run.ray_tasks import TASK_CPUS
from attncoda.run.reproduce import reproduce
from attncoda.run.sweep import expand_models, sweep
from attncoda.store.runs import RunStore, Unit, read_run_tables

sys.path.insert(0, str(Path(__file__).parent))
from ray_cluster import Cluster, local_cluster  # noqa: E402

from tiny_runs import TINY_SETTINGS  # noqa: E402

if importlib.util.find_spec("ray") is None:  # not imported here: see ray_cluster.local_cluster
    pytest.skip("ray is not installed (pip install -e '.[ray]')", allow_module_level=True)

SETTINGS = TINY_SETTINGS
#: Key columns of each table: no two rows of a table may share them.
KEYS = {
    "profile_heads": ["model", "revision", "layer", "head"],
    "flips": ["model", "revision", "metric"],
    "flips_by_layer": ["model", "revision", "metric", "layer"],
    "predictor": ["model", "revision"],
    "train": ["step", "layer"],
    "units": ["experiment", "model", "revision"],
}


@contextmanager
def task_threads() -> Iterator[None]:
    """Torch at the threads of one Ray task (``TASK_CPUS``) inside, its own count restored.

    A Ray task sets ``torch.set_num_threads(TASK_CPUS)``; torch's CPU kernels split their
    reductions by thread, so another thread count may round differently. The in-process
    side of each comparison runs at the task's count, and the tables then agree exactly.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(TASK_CPUS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def reference(models, uninterrupted, tmp_path_factory) -> Path:
    """The in-process reproduce run every sweep is compared with (at one task's threads): the
    session's run where it was made at those threads (two test workers, one core each)."""
    if (uninterrupted.parent / "threads").read_text() == str(TASK_CPUS):
        return uninterrupted
    out = tmp_path_factory.mktemp("reference") / "run"
    with task_threads():
        reproduce(models, out, settings=SETTINGS, progress=False)
    return out


@pytest.fixture(scope="module")
def cluster(request):
    with local_cluster(num_cpus=2) as started:
        # Also stopped if the session is torn down some other way (stop() is idempotent).
        request.addfinalizer(started.stop)
        atexit.register(started.stop)
        yield started


def assert_same_tables(got: Path, expected: Path) -> None:
    a, b = read_run_tables(got), read_run_tables(expected)
    assert sorted(a) == sorted(b)
    for name in b:
        pd.testing.assert_frame_equal(a[name], b[name], check_exact=True, obj=name)


def assert_each_unit_once(out: Path, units: list[Unit]) -> None:
    store = RunStore(out, "reproduce", json.loads((out / "manifest.json").read_text())["config"])
    done = sorted((out / "units").rglob("_done.json"))
    assert len(done) == len(units)
    assert all(store.is_done(u) for u in units)
    tables = read_run_tables(out)
    for name, keys in KEYS.items():
        if name in tables:  # a sweep of some experiments writes some tables
            assert not tables[name].duplicated(subset=keys).any(), name
    listed = tables["units"]
    assert len(listed) == len(units)
    assert set(zip(listed["experiment"], listed["model"], listed["revision"], strict=True)) == {
        (u.experiment, u.model, u.revision) for u in units
    }
    assert set(listed["status"]) == {"done"}


# on the cluster ----------------------------------------------------------------------------


def _kill_one_busy_worker(cluster: Cluster, out: Path, killed: list[int]) -> None:
    """SIGKILL one Ray worker in the middle of a unit, once the sweep has finished one."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not killed:
        if any((out / "units").rglob("_done.json")):
            for pid in cluster.task_workers("attncoda_unit"):
                # Frozen, a worker cannot finish its task: if it still shows the task after
                # SIGSTOP, the SIGKILL lands in the middle of that task.
                try:
                    os.kill(pid, signal.SIGSTOP)
                    if pid in cluster.task_workers("attncoda_unit"):
                        os.kill(pid, signal.SIGKILL)
                        killed.append(pid)
                        return
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:  # it exited meanwhile
                    continue
        time.sleep(0.02)


def test_a_sweep_on_the_cluster_with_a_worker_killed_equals_the_in_process_run(
    cluster: Cluster, models, reference, tmp_path, capfd
):
    # One sweep of the 23 units shows both: its tables are the in-process run's, and a worker
    # killed in the middle of a unit has that unit retried, every unit made once.
    drivers = len(cluster.driver_logs())
    out = tmp_path / "sweep"
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_one_busy_worker, args=(cluster, out, killed), daemon=True
    )
    killer.start()
    result = sweep(
        models, out, settings=SETTINGS, ray_address=cluster.address, retries=2, progress=False
    )
    killer.join(timeout=5)
    # The sweep connected to this cluster as a driver (it did not start a Ray of its own).
    assert len(cluster.driver_logs()) == drivers + 1
    assert killed, "no worker was seen executing a unit"
    assert killed[0] not in cluster.session_pids()
    # Ray's own account (printed by its driver threads): the killed worker was executing a
    # task, and that task was retried.
    printed = "".join(capfd.readouterr())
    assert f"Worker PID: {killed[0]}" in printed and "will be retried" in printed
    assert result.failed == {}
    assert (result.ran, result.skipped) == (len(result.units), 0) == (23, 0)
    assert result.out == out
    assert_same_tables(out, reference)
    assert_each_unit_once(out, result.units)
    # Rerun: every unit is finished, nothing runs (Ray is not even contacted).
    again = sweep(models, out, settings=SETTINGS, ray_address=cluster.address, progress=False)
    assert (again.ran, again.skipped, again.failed) == (0, 23, {})
    assert len(cluster.driver_logs()) == drivers + 1
    assert_same_tables(out, reference)


def test_failing_unit_is_reported_and_others_finish(cluster: Cluster, models, tmp_path, capsys):
    from attncoda.cli import main

    out = tmp_path / "cli"
    missing = "nobody/missing-model"
    code = main(
        [
            "sweep",
            "--models",
            f"{models[0]},{missing}",
            "--experiments",
            "profile,flips",
            "--rows-docs",
            "2",
            "--n-boot",
            "10",
            "--ray-address",
            cluster.address,
            "--retries",
            "1",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 1
    for experiment in ("profile", "flips"):
        line = f"FAILED {experiment}/{missing}@-: AttncodaError: model spec '{missing}'"
        assert line in printed
    units = read_run_tables(out)["units"].set_index(["experiment", "model"])
    assert units.loc[("profile", models[0]), "status"] == "done"
    assert units.loc[("flips", models[0]), "status"] == "done"
    assert units.loc[("profile", missing), "status"] == "failed"
    assert "not in the local Hugging Face cache" in units.loc[("flips", missing), "note"]
    assert set(read_run_tables(out)["flips"]["model"]) == {models[0]}

    # A failing train unit: the collapse units that read its checkpoints fail, naming it.
    result = sweep(
        [],
        tmp_path / "train",
        experiments=["collapse"],
        settings={**SETTINGS, "train": {**SETTINGS["train"], "size": "bogus"}},
        ray_address=cluster.address,
        retries=0,
        progress=False,
    )
    train = "train/train-tiny@-"
    assert result.failed[train] == "AttncodaError: unknown model size 'bogus'; accepted: " + (
        "'tiny', 'small'"
    )
    collapse = [u.key for u in result.units if u.experiment == "collapse"]
    assert len(collapse) == 6 and set(result.failed) == {train, *collapse}
    assert all(f"unit {train} failed" in result.failed[k] for k in collapse)
    assert result.ran == 0

    # With fail_fast the first unit that fails ends the sweep, naming it.
    with pytest.raises(AttncodaError) as info:
        sweep(
            [missing],
            tmp_path / "fast",
            experiments=["profile"],
            ray_address=cluster.address,
            retries=0,
            progress=False,
            fail_fast=True,
        )
    assert str(info.value).startswith(f"unit profile/{missing}@- failed: model spec {missing!r}")


# in this process ---------------------------------------------------------------------------


def test_sweep_in_process_equals_reproduce(models, reference, tmp_path):
    out = tmp_path / "sweep"
    with task_threads():
        result = sweep(models, out, settings=SETTINGS, progress=False)
    assert (result.ran, result.skipped, result.failed) == (23, 0, {})
    assert_same_tables(out, reference)
    # A sweep and a reproduce of the same models share the folder: reproduce finds it done.
    again = reproduce(models, out, settings=SETTINGS, progress=False)
    assert (again.ran, again.skipped) == (0, 23)


def test_revisions_expand_every_model():
    assert expand_models(["a/x", "b/y"], ["step0", "step512"]) == [
        "a/x@step0",
        "a/x@step512",
        "b/y@step0",
        "b/y@step512",
    ]
    assert expand_models(["a/x@step1", "b"]) == ["a/x@step1", "b"]
    config = run_config(expand_models(["a/x"], ["step0", "step8"]), experiments=["profile"])
    assert plan(config).units == (Unit("profile", "a/x", "step0"), Unit("profile", "a/x", "step8"))
    with pytest.raises(AttncodaError, match="'a/x@step1' already names a revision"):
        expand_models(["a/x@step1"], ["step0"])


def test_sweep_validates_before_running(tmp_path):
    with pytest.raises(AttncodaError, match="already names a revision"):
        sweep(["a/x@step1"], tmp_path / "a", revisions=["step0"], progress=False)
    with pytest.raises(AttncodaError, match="not both"):
        sweep(["a"], tmp_path / "b", ray_address="auto", ray_local=2, progress=False)
    with pytest.raises(AttncodaError, match="at least 1"):
        sweep(["a"], tmp_path / "c", ray_local=0, progress=False)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_failures_in_process_are_retried_then_reported(tmp_path, capsys):
    missing = "nobody/missing-model"
    result = sweep(
        [missing],
        tmp_path / "run",
        revisions=["step1", "step2"],
        experiments=["profile"],
        retries=1,
        progress=True,
    )
    assert result.units == [Unit("profile", missing, "step1"), Unit("profile", missing, "step2")]
    assert sorted(result.failed) == [f"profile/{missing}@step1", f"profile/{missing}@step2"]
    assert all(e.startswith("AttncodaError: model spec") for e in result.failed.values())
    assert (result.ran, result.skipped) == (0, 0)
    err = capsys.readouterr().err
    assert "retry 1 of 1" in err and f"profile/{missing}@step2: FAILED: AttncodaError" in err
    units = read_run_tables(tmp_path / "run")["units"]
    assert list(units["status"]) == ["failed", "failed"]

    trained = sweep(
        [],
        tmp_path / "train",
        experiments=["collapse"],
        settings={**SETTINGS, "train": {**SETTINGS["train"], "size": "bogus"}},
        retries=0,
        progress=False,
    )
    assert len(trained.failed) == 7
    assert trained.failed["collapse/train-tiny@step16"].startswith(
        "AttncodaError: unit train/train-tiny@- failed"
    )


def test_unreachable_cluster_is_refused(models, tmp_path):
    from ray_cluster import free_port

    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(AttncodaError, match=f"no Ray cluster answers at --ray-address {address}"):
        sweep(models[:1], tmp_path / "x", experiments=["profile"], ray_address=address)
