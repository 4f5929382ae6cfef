"""The units of a run as Ray tasks (the :class:`attncoda.run.executors.OnRay` executor).

Each task calls :func:`attncoda.run.execute.run_unit`, which writes the unit's own partition
of the run folder atomically, so the folder is exactly that of an in-process run. A task
waits for the tasks of the units its unit waits for (the plan's dependencies, passed as
arguments so Ray holds it back until they finish). Units others wait for are handed to Ray
first, then the rest, longest first (:func:`attncoda.run.plan.unit_cost`), so that no
worker is left with a long unit while the others have nothing to do.

Each task asks for one CPU (torch runs with one thread), and for one GPU when the cluster
has GPUs and the run's device is ``cuda`` or ``auto``. A task that raises, or whose worker
dies, is retried ``retries`` times.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.run.job import describe, failed_before
from attncoda.run.plan import unit_cost
from attncoda.store.runs import Unit

if TYPE_CHECKING:
    from attncoda.run.config import RunConfig
    from attncoda.run.job import Job, Progress

__all__ = ["TASK_CPUS", "connect", "run_on_ray", "task_gpus"]

#: CPUs each Ray task asks for (and torch threads it runs with).
TASK_CPUS = 1


def _unit_task(
    unit: Unit, config: RunConfig, root: str, command: str, *after: Any
) -> dict[str, Any]:
    """Body of one Ray task: compute ``unit`` into the run folder ``root``, with a
    :class:`~attncoda.run.loaded.Loaded` of its own (it loads its model itself).

    ``after`` holds the results of the units this one waits for (Ray passes them once they
    are finished); they are not used.
    """
    import torch

    from attncoda.run.execute import run_unit
    from attncoda.run.loaded import Loaded

    torch.set_num_threads(TASK_CPUS)
    start = time.perf_counter()
    facts = run_unit(unit, config, root, command, Loaded())
    return {**facts, "_wall": time.perf_counter() - start}


def connect(address: str | None, local: int | None) -> bool:
    """Connect to (or start) Ray; ``True`` when this call started the connection (and so
    shuts it down). A Ray session this process already holds is used as it is."""
    import logging

    # For a local instance: no usage statistics, and the loopback address. Ray replaces a
    # node address of 127.0.0.1 with the machine's network address unless this switch (read
    # when ray is imported) is off; the instance's processes inherit it from ``ray.init``.
    local_env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    saved = {key: os.environ.get(key) for key in local_env}
    if local is not None and "ray" not in sys.modules:
        for key, value in local_env.items():
            os.environ.setdefault(key, value)
    try:
        import ray

        if ray.is_initialized():
            return False
        options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False}
        try:
            if local is not None:
                ray.init(
                    address="local",
                    num_cpus=int(local),
                    include_dashboard=False,
                    _node_ip_address="127.0.0.1",
                    **options,
                )
            else:
                _check_reachable(address)
                ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = f"--ray-address {address}" if local is None else f"--ray-local {local}"
            raise AttncodaError(f"could not start Ray for {where}: {exc}") from exc
        return True
    finally:
        for key, before in saved.items():
            if before is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = before


def _check_reachable(address: str | None) -> None:
    """Refuse a ``HOST:PORT`` where nothing listens (``ray.init`` would retry for minutes)."""
    import socket

    host, _, port = (address or "").rpartition(":")
    if not host or not port.isdigit() or "://" in host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise AttncodaError(
            f"no Ray cluster answers at --ray-address {address} ({exc}): start one there with "
            "`ray start --head`, or use --ray-local N"
        ) from exc


def task_gpus(config: RunConfig, resources: dict[str, float]) -> int:
    """GPUs each Ray task asks for: one when the cluster has GPUs and the run's device is
    ``cuda`` or ``auto`` (the task then loads its model on the GPU Ray gives it), or a device
    map places its models (the map then spreads each over that GPU, the CPU and the disk),
    else 0."""
    options = config.options
    wants = options.device in ("cuda", "auto") or bool(options.device_map)
    return 1 if wants and resources.get("GPU", 0) >= 1 else 0


def _submission_order(job: Job) -> list[Unit]:
    """Units others wait for first, then the rest; longest first within each group, and
    every unit after those it waits for."""
    awaited = job.plan.awaited()

    def rank(unit: Unit) -> float:
        return -unit_cost(unit)

    order: list[Unit] = []
    placed: set[Unit] = set()
    pending = set(job.todo)
    for group in (
        sorted((u for u in job.todo if u in awaited), key=rank),
        sorted((u for u in job.todo if u not in awaited), key=rank),
    ):
        while group:
            ready = [
                u
                for u in group
                if all(d in placed or d not in pending for d in job.plan.waits_for(u))
            ]
            if not ready:
                raise AttncodaError(f"the units {[u.key for u in group]} wait for each other")
            for unit in ready:
                order.append(unit)
                placed.add(unit)
            group = [u for u in group if u not in placed]
    return order


def run_on_ray(
    job: Job,
    log: Progress,
    *,
    address: str | None,
    local: int | None,
    retries: int,
    keep_going: bool = True,
) -> dict[str, str]:
    """Compute ``job``'s units as Ray tasks; the units that failed, by key. Without
    ``keep_going`` the first unit that fails (after its retries) cancels the tasks left and
    raises an :class:`AttncodaError` naming it."""
    import ray

    started = connect(address, local)
    try:
        gpus = task_gpus(job.config, ray.cluster_resources())
        task = ray.remote(_unit_task).options(
            name="attncoda_unit",
            num_cpus=TASK_CPUS,
            num_gpus=gpus,
            max_retries=retries,
            retry_exceptions=True,
        )
        refs: dict[Any, Unit] = {}
        by_unit: dict[Unit, Any] = {}
        for unit in _submission_order(job):
            after = [by_unit[d] for d in job.plan.waits_for(unit) if d in by_unit]
            ref = task.remote(unit, job.config, str(job.root), job.command, *after)
            refs[ref] = unit
            by_unit[unit] = ref
        failed: dict[str, str] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                unit = refs[ref]
                try:
                    facts = ray.get(ref)
                except Exception as exc:  # a failed unit is reported; the others carry on
                    failed[unit.key] = _failure(job, unit, exc, by_unit)
                    log.failed(unit, failed[unit.key])
                    if not keep_going:
                        for left in pending:
                            ray.cancel(left)
                        message = failed[unit.key].removeprefix(f"{AttncodaError.__name__}: ")
                        raise AttncodaError(f"unit {unit.key} failed: {message}") from None
                else:
                    log.done(unit, facts, facts.get("_wall", 0.0))
        return {u.key: failed[u.key] for u in job.todo if u.key in failed}
    finally:
        if started:
            ray.shutdown()


def _failure(job: Job, unit: Unit, exc: BaseException, by_unit: dict[Unit, Any]) -> str:
    """What a failed task reports: the failure of a unit it waits for, else its own."""
    import ray

    # A dependant fails only once the unit it waits for has finished, so these gets do not
    # wait; that unit may come later out of ray.wait.
    earlier: dict[str, str] = {}
    for prior in job.plan.waits_for(unit):
        if prior in by_unit:
            try:
                ray.get(by_unit[prior])
            except Exception as prior_exc:
                earlier[prior.key] = describe(prior_exc)
    return failed_before(unit, job, earlier) or describe(exc)
