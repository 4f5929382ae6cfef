"""``attncoda sweep``: a reproduce run over models x revisions, one Ray task per unit.

A sweep is a reproduce run (:mod:`attncoda.run.reproduce`) whose units
``(model, revision, experiment)`` run as separate Ray tasks. Each task calls
:func:`attncoda.run.execute.run_unit`, which writes the unit's own partition of the run folder
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
``--device`` is ``cuda`` or ``auto`` (Ray finds a node's CUDA devices when the node
starts; the task loads its model on the GPU it is given), so on a GPU cluster as many
units run at once as there are GPUs. With ``--device-map`` a task asks for one GPU too,
and the map spreads its model over that GPU, the node's CPU and its disk. A task that
raises, or whose worker dies, is retried ``retries`` times; a unit that still fails is
listed in :attr:`SweepResult.failed` with its error and in ``DIR/tables/units`` with
status ``failed``, and the other units carry on. The unit waits for the units of its plan
it reads (:mod:`attncoda.run.plan`: the ``train`` unit of the default series for the units
reading its checkpoints, flips for safety and predictor); when one of those fails, it
fails with a message naming it.

Numbers are identical to an in-process run: each task pins torch to the number of CPUs Ray
gives it (one), and the tables were checked equal, value for value, with a run in one
process at torch's default thread count (see ``tests/run/test_sweep.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import EXPERIMENTS
from attncoda.models.spec import join_spec, parse_spec
from attncoda.run.execute import RUN, open_run
from attncoda.run.executors import InProcess, OnRay
from attncoda.run.pool import LocalPool
from attncoda.run.ray_tasks import TASK_CPUS
from attncoda.run.reproduce import ReproduceResult, execute_run

__all__ = ["TASK_CPUS", "SweepResult", "expand_models", "sweep"]


@dataclass(frozen=True)
class SweepResult(ReproduceResult):
    """What a sweep left: a :class:`~attncoda.run.reproduce.ReproduceResult` whose
    ``failed`` lists each unit that still failed after its retries (or whose awaited unit
    failed), ``{unit.key: "ExceptionType: message"}``; ``ran`` does not count them."""


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
    pinned = [m for m in models if parse_spec(m).revision is not None]
    if pinned:
        raise AttncodaError(
            f"model {pinned[0]!r} already names a revision: give either model@revision or "
            f"--revisions {','.join(revisions)}, not both"
        )
    return [join_spec(model, revision) for model in models for revision in revisions]


def sweep(  # params: the options of attncoda sweep, which users type as keywords
    models: Sequence[str],
    out: str | Path,
    *,
    revisions: Sequence[str] | None = None,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    ray_address: str | None = None,
    ray_local: int | None = None,
    retries: int = 2,
    progress: bool = True,
    workers: int = 1,
    fail_fast: bool = False,
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
    series, experiments, scale, settings, text, options
        As for :func:`attncoda.run.reproduce.reproduce`. With the options' ``device="auto"``
        each task uses the GPU Ray gives it (one per task when the cluster has GPUs).
    ray_address : str, optional
        An existing Ray cluster: ``"auto"`` or ``"HOST:PORT"`` of its head.
    ray_local : int, optional
        Start a private Ray instance on this machine with this many worker CPUs.
    retries : int
        Times a failed unit is run again before it is reported (a dead worker counts as a
        failure).
    progress : bool
        Print one line per unit and an overall progress bar (on stderr).
    workers : int
        Without Ray: units at the same time on a local pool of processes
        (:class:`attncoda.run.pool.LocalPool`); 1: one after another in this process.
    fail_fast : bool
        Stop at the first unit that still fails after its retries, raising its error;
        default: keep going and list the failures.

    Returns
    -------
    SweepResult

    Raises
    ------
    AttncodaError
        Bad models, revisions, experiments or settings, a folder of another config, both
        ``ray_address`` and ``ray_local``, a Ray cluster that cannot be reached, or, with
        ``fail_fast``, the first unit that failed (named).
    """
    executor = _executor(ray_address, ray_local, retries, workers, keep_going=not fail_fast)
    opened = open_run(
        expand_models(models, revisions),
        out,
        series=series,
        experiments=experiments,
        scale=scale,
        settings=settings,
        text=text,
        options=options,
    )
    result = execute_run(opened, executor, command=RUN, progress=progress, label="sweep")
    if progress:
        print(
            f"sweep: {result.ran} units run, {result.skipped} already finished, "
            f"{len(result.failed)} failed",
            file=sys.stderr,
        )
    return SweepResult(**vars(result))


def _executor(
    ray_address: str | None, ray_local: int | None, retries: int, workers: int, *, keep_going: bool
) -> InProcess | OnRay | LocalPool:
    """Where a sweep's units run: on Ray when an address or a local instance is asked for,
    else on a pool of ``workers`` processes, or in this process when ``workers`` is 1."""
    if int(retries) < 0:
        raise AttncodaError(f"--retries {retries} must be 0 or more")
    retries = int(retries)
    if ray_address is not None or ray_local is not None:
        return OnRay(address=ray_address, local=ray_local, retries=retries, keep_going=keep_going)
    if workers != 1:
        return LocalPool(workers, retries=retries, keep_going=keep_going)
    return InProcess(retries=retries, keep_going=keep_going)
