"""``attncoda sweep``: a reproduce run over models x revisions, one Ray task per unit.

A sweep is a reproduce run (:mod:`attncoda.run.reproduce`) whose units
``(model, revision, experiment)`` run as separate Ray tasks. Each task calls
:func:`attncoda.run.units.run_unit`, which writes the unit's own partition of the run folder
atomically (``_done.json`` last), so the folder, its config check and its tables are exactly
those of ``reproduce``: a sweep and a reproduce of the same models share a folder, finished
units are skipped on rerun, and the final tables are the union of the partitions.

Where the units run:

- no ``ray_address`` and no ``ray_local``: in this process, one after another (Ray is not
  imported);
- ``ray_local=N``: a private Ray instance on this machine with ``N`` worker CPUs, bound to
  127.0.0.1, shut down at the end;
- ``ray_address="auto"`` or ``"HOST:PORT"``: an existing cluster.

Running on an existing cluster::

    # on the head machine
    ray start --head --port 6379
    # on every other machine
    ray start --address HEAD:6379
    # then, on any machine of the cluster
    attncoda sweep --models owner/a,owner/b --revisions step0,step512 \\
        --ray-address auto --out /shared/runs/sweep1

Every machine needs attncoda installed in the Python that ``ray start`` ran from (with the
same package versions, so every unit computes what the others would), the models reachable
(hub cache or network, or the same local paths) and the run folder on a filesystem all of
them share: the tasks write their partitions there and the driver unions them. From a
machine outside the cluster use ``--ray-address HEAD:6379``.

Each task asks for one CPU, and for one GPU when the cluster has GPUs and the run's
``--device`` is ``cuda`` or ``auto`` (Ray finds a node's CUDA devices when the node starts;
the task loads its model on the GPU it is given), so on a GPU cluster as many units run at
once as there are GPUs. A task that raises, or whose worker dies, is retried ``retries``
times; a unit that still fails is listed in :attr:`SweepResult.failed` with its error and
in ``DIR/tables/units`` with status ``failed``, and the other units carry on. The
``train`` unit of the default series runs before the ``collapse`` and ``predictor`` units
of that series, which read its checkpoints; when it fails, they fail with a message naming
it.

Numbers are identical to an in-process run: each task pins torch to the number of CPUs Ray
gives it (one), and the tables were checked equal, value for value, with a run in one
process at torch's default thread count (see ``tests/run/test_sweep.py``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.run.reproduce import ReproduceResult, finalise, open_run, writing
from attncoda.run.units import EXPERIMENTS, split_spec
from attncoda.store.runs import NO_REVISION, Unit

#: CPUs each Ray task asks for (and torch threads it runs with).
TASK_CPUS = 1


@dataclass(frozen=True)
class SweepResult(ReproduceResult):
    """What a sweep left: :class:`~attncoda.run.reproduce.ReproduceResult` (``ran`` does
    not count failed units) and

    Attributes
    ----------
    failed : dict
        ``{unit.key: "ExceptionType: message"}`` for each unit that still failed after its
        retries (or whose ``train`` unit failed).
    """

    failed: dict[str, str]


def expand_models(models: Sequence[str], revisions: Sequence[str] | None = None) -> list[str]:
    """Model specs of a sweep: every model at every revision (``owner/name@rev``).

    Raises
    ------
    AttncodaError
        A model already names a revision (``owner/name@rev``) while ``revisions`` is given.
    """
    models = [m.strip() for m in models if m and m.strip()]
    revisions = [r.strip() for r in (revisions or ()) if r and r.strip()]
    if not revisions:
        return models
    pinned = [m for m in models if split_spec(m)[1] != NO_REVISION]
    if pinned:
        raise AttncodaError(
            f"model {pinned[0]!r} already names a revision: give either model@revision or "
            f"--revisions {','.join(revisions)}, not both"
        )
    return [f"{model}@{revision}" for model in models for revision in revisions]


def sweep(
    models: Sequence[str],
    out: str | Path,
    *,
    revisions: Sequence[str] | None = None,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Any] | None = None,
    text: str | None = None,
    sink: str = "first",
    seed: int = 0,
    ray_address: str | None = None,
    ray_local: int | None = None,
    retries: int = 2,
    progress: bool = True,
    report: bool = True,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
) -> SweepResult:
    """Run every experiment on every model at every revision, one unit at a time or on Ray.

    Parameters
    ----------
    models : sequence of str
        Model specs, as for :func:`attncoda.run.reproduce.reproduce`.
    out : path-like
        The run folder (the store of ``reproduce``: a folder holding a run of this config is
        resumed, one holding another config is refused).
    revisions : sequence of str, optional
        Revisions run for every model (``step0``, ``step512``, a commit); then no model may
        name its own ``@revision``.
    series, experiments, scale, settings, text, sink, seed, device, dtype, method
        As for :func:`attncoda.run.reproduce.reproduce`. With ``device="auto"`` each task
        uses the GPU Ray gives it (one per task when the cluster has GPUs).
    ray_address : str, optional
        An existing Ray cluster: ``"auto"`` or ``"HOST:PORT"`` of its head.
    ray_local : int, optional
        Start a private Ray instance on this machine with this many worker CPUs.
    retries : int
        Times a failed unit is run again before it is reported (a dead worker counts as a
        failure).
    progress : bool
        Print one line per unit and an overall progress bar (on stderr).
    report : bool
        Render ``out/report.html`` at the end.

    Returns
    -------
    SweepResult

    Raises
    ------
    AttncodaError
        Bad models, revisions, experiments or settings, a folder of another config, both
        ``ray_address`` and ``ray_local``, or a Ray cluster that cannot be reached.
    """
    if ray_address is not None and ray_local is not None:
        raise AttncodaError("give --ray-address or --ray-local, not both")
    if ray_local is not None and int(ray_local) < 1:
        raise AttncodaError(f"--ray-local {ray_local} must be at least 1 (worker CPUs)")
    if int(retries) < 0:
        raise AttncodaError(f"--retries {retries} must be 0 or more")
    config, store, units, todo = open_run(
        expand_models(models, revisions),
        out,
        series=series,
        experiments=experiments,
        scale=scale,
        settings=settings,
        text=text,
        sink=sink,
        seed=seed,
        device=device,
        dtype=dtype,
        method=method,
    )
    root = store.root
    skipped = len(units) - len(todo)
    log = _Progress(len(todo), progress)
    with writing(store, "sweep"):
        try:
            if not todo:
                failed = {}
            elif ray_address is None and ray_local is None:
                failed = _run_in_process(todo, config, root, int(retries), log)
            else:
                failed = _run_on_ray(
                    todo, config, root, int(retries), log, address=ray_address, local=ray_local
                )
        finally:
            log.close()
        path = finalise(store, units, report=report, failed=failed)
    if progress:
        print(
            f"sweep: {len(todo) - len(failed)} units run, {skipped} already finished, "
            f"{len(failed)} failed",
            file=sys.stderr,
        )
    return SweepResult(
        out=root,
        report=path,
        units=units,
        ran=len(todo) - len(failed),
        skipped=skipped,
        failed=failed,
    )


# dependencies ------------------------------------------------------------------------------


def _train_unit(units: Sequence[Unit]) -> Unit | None:
    return next((u for u in units if u.experiment == "train"), None)


def _needs_train(unit: Unit, config: Mapping[str, Any]) -> bool:
    """Whether ``unit`` reads the checkpoints of the run's ``train`` unit."""
    series = config.get("series") or {}
    if not series or series.get("spec") is not None:
        return False
    if unit.experiment == "collapse":
        return True
    return (
        unit.experiment == "predictor"
        and unit.model == series.get("name")
        and unit.revision != NO_REVISION
    )


def _train_failed(train: Unit, error: str) -> str:
    return f"AttncodaError: unit {train.key} failed, so its checkpoints are missing ({error})"


# in this process ---------------------------------------------------------------------------


def _run_in_process(
    todo: list[Unit], config: dict[str, Any], root: Path, retries: int, log: _Progress
) -> dict[str, str]:
    from attncoda.run.units import run_unit

    train = _train_unit(todo)
    failed: dict[str, str] = {}
    for unit in todo:
        log.start(unit)
        if train is not None and train.key in failed and _needs_train(unit, config):
            failed[unit.key] = _train_failed(train, failed[train.key])
            log.failed(unit, failed[unit.key])
            continue
        for attempt in range(retries + 1):
            start = time.perf_counter()
            try:
                facts = run_unit(unit, config, root)
            except Exception as exc:  # a failed unit is reported; the others carry on
                error = _describe(exc)
                if attempt < retries:
                    log.retry(unit, error, attempt + 1, retries)
                    continue
                failed[unit.key] = error
                log.failed(unit, error)
            else:
                log.done(unit, facts, time.perf_counter() - start)
            break
    return failed


# on Ray ------------------------------------------------------------------------------------


#: The order in which a sweep hands units to Ray (after the train and flips units, which
#: others wait for): longest first. Measured at the demo scale
#: on a small train-tiny model, each unit in a process of its own (as on Ray, where flips,
#: cluster, safety and predictor each capture their model's rows): cluster 1.6 s, safety
#: 0.9 s, flips and predictor 0.8 s, prune 0.7 s, profile 0.4 s. Prune runs dozens of full
#: forward passes, so it grows fastest with the model and goes first.
_COST_RANK = {
    name: rank
    for rank, name in enumerate(
        ("train", "prune", "cluster", "safety", "flips", "predictor", "profile", "collapse")
    )
}


def _unit_task(unit: Unit, config: dict[str, Any], root: str, *after: Any) -> dict[str, Any]:
    """Body of one Ray task: compute ``unit`` into the run folder ``root``.

    ``after`` holds the results of the units this one waits for (Ray passes them once they
    are finished); they are not used.
    """
    import torch

    from attncoda.run.units import run_unit

    torch.set_num_threads(TASK_CPUS)
    start = time.perf_counter()
    facts = run_unit(unit, config, root)
    return {**facts, "_wall": time.perf_counter() - start}


def _connect(address: str | None, local: int | None) -> bool:
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


def task_gpus(config: dict[str, Any], resources: dict[str, float]) -> int:
    """GPUs each Ray task asks for: one when the cluster has GPUs and the run's device is
    ``cuda`` or ``auto`` (the task then loads its model on the GPU Ray gives it), else 0."""
    wants = config.get("device", "cpu") in ("cuda", "auto")
    return 1 if wants and resources.get("GPU", 0) >= 1 else 0


def _run_on_ray(
    todo: list[Unit],
    config: dict[str, Any],
    root: Path,
    retries: int,
    log: _Progress,
    *,
    address: str | None,
    local: int | None,
) -> dict[str, str]:
    import ray

    started = _connect(address, local)
    try:
        gpus = task_gpus(config, ray.cluster_resources())
        task = ray.remote(_unit_task).options(
            name="attncoda_unit",
            num_cpus=TASK_CPUS,
            num_gpus=gpus,
            max_retries=retries,
            retry_exceptions=True,
        )
        # Longest units first (the train unit, whose series' units wait for it, leads), so
        # that no worker is left with a long unit while the others have nothing to do.
        train = _train_unit(todo)
        train_ref = None if train is None else task.remote(train, config, str(root))
        refs: dict[Any, Unit] = {} if train is None else {train_ref: train}
        # The flips units go next: the safety and predictor units of the same model wait for
        # them and read their stored distances instead of computing them again.
        flips_refs = {}
        for unit in todo:
            if unit.experiment == "flips":
                after = [train_ref] if train_ref is not None and _needs_train(unit, config) else []
                ref = task.remote(unit, config, str(root), *after)
                refs[ref] = unit
                flips_refs[(unit.model, unit.revision)] = ref
        for unit in sorted(todo, key=lambda u: _COST_RANK.get(u.experiment, len(_COST_RANK))):
            if unit != train and unit.experiment != "flips":
                after = [train_ref] if train_ref is not None and _needs_train(unit, config) else []
                if unit.experiment in ("safety", "predictor"):
                    flips_ref = flips_refs.get((unit.model, unit.revision))
                    after += [flips_ref] if flips_ref is not None else []
                refs[task.remote(unit, config, str(root), *after)] = unit
        failed: dict[str, str] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                unit = refs[ref]
                try:
                    facts = ray.get(ref)
                except Exception as exc:  # a failed unit is reported; the others carry on
                    error = _describe(exc)
                    if train_ref is not None and _needs_train(unit, config):
                        # A dependant fails only once its train unit has finished, so this
                        # does not wait; the train unit may come later out of ray.wait.
                        try:
                            ray.get(train_ref)
                        except Exception as train_exc:
                            assert train is not None
                            error = _train_failed(train, _describe(train_exc))
                    failed[unit.key] = error
                    log.failed(unit, error)
                else:
                    log.done(unit, facts, facts.get("_wall", 0.0))
        return {u.key: failed[u.key] for u in todo if u.key in failed}
    finally:
        if started:
            ray.shutdown()


def _describe(exc: BaseException) -> str:
    """``"ExceptionType: message"`` of what a unit raised (a Ray task error unwrapped)."""
    cause = exc
    seen = 0
    while seen < 8:
        inner = getattr(cause, "cause", None)
        if not isinstance(inner, BaseException) or inner is cause:
            break
        cause, seen = inner, seen + 1
    message = str(cause).strip()
    if cause is exc and type(exc).__module__.startswith("ray"):
        # A Ray error without a Python cause (a worker that died): its first line says why.
        message = message.splitlines()[0] if message else ""
    return f"{type(cause).__name__}: {message}" if message else type(cause).__name__


# progress ----------------------------------------------------------------------------------


class _Progress:
    """One line per unit and an overall bar on stderr (nothing when ``enabled`` is false)."""

    def __init__(self, total: int, enabled: bool):
        self.total = total
        self.count = 0
        self.bar = None
        if enabled and total:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="sweep", unit="unit", file=sys.stderr)

    def _line(self, unit: Unit, text: str, finished: bool) -> None:
        if finished:
            self.count += 1
        if self.bar is None:
            return
        width = len(str(self.total))
        head = f"[{self.count:>{width}}/{self.total}]" if finished else " " * (2 * width + 3)
        self.bar.write(f"{head} {unit.key}: {text}", file=sys.stderr)
        if finished:
            self.bar.update(1)

    def start(self, unit: Unit) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(unit.key)

    def done(self, unit: Unit, facts: Mapping[str, Any], seconds: float) -> None:
        note = f" ({facts['note']})" if facts.get("note") else ""
        self._line(unit, f"{facts.get('status', 'done')} in {seconds:.1f} s{note}", True)

    def retry(self, unit: Unit, error: str, attempt: int, retries: int) -> None:
        self._line(unit, f"failed ({error}); retry {attempt} of {retries}", False)

    def failed(self, unit: Unit, error: str) -> None:
        self._line(unit, f"FAILED: {error}", True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


__all__ = ["TASK_CPUS", "SweepResult", "expand_models", "sweep"]
