"""Where the units of a run are computed: in this process, or as Ray tasks. One interface.

An executor takes a :class:`Job` (the plan, the units to compute, the config, the run
folder) and a :class:`Progress`, calls :func:`attncoda.run.execute.run_unit` for every unit
of ``job.todo`` after the units it waits for, and returns the units that failed, ``{unit.key:
"ExceptionType: message"}``. A unit whose awaited unit failed is not run: it fails with a
message that names that unit.

- :class:`InProcess`: one unit after another in this process (Ray is not imported), with
  one :class:`~attncoda.run.loaded.Loaded` per run (or the one it is given).
- :class:`OnRay`: one Ray task per unit on a private local instance or an existing
  cluster (:mod:`attncoda.run.ray_tasks`).

Each keeps going by default (docs/design.md, "A run keeps going"): a failed unit is retried
``retries`` times, then reported, and the others carry on. With ``keep_going=False``
(``--fail-fast``) the first unit that still fails ends the run with an
:class:`AttncodaError` naming it (an unexpected exception is raised as it is).
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from attncoda._errors import AttncodaError
from attncoda.run.job import Job, Progress, describe, failed_before
from attncoda.run.loaded import Loaded

__all__ = ["Executor", "InProcess", "Job", "OnRay", "Progress", "describe", "failed_before"]


@runtime_checkable
class Executor(Protocol):
    """Computes the units of a job; returns those that failed."""

    def run(self, job: Job, log: Progress) -> dict[str, str]: ...


class InProcess:
    """Every unit in this process, one after another, in plan order.

    Parameters
    ----------
    retries : int
        Times a failed unit is run again before it is reported.
    keep_going : bool
        Carry on after a failed unit (reported in the returned dict); ``False``: raise.
    kept : Loaded, optional
        What the units keep and are lent (live models, captures); None: one for each run.
    """

    def __init__(self, retries: int = 0, keep_going: bool = True, kept: Loaded | None = None):
        self.retries = int(retries)
        self.keep_going = keep_going
        self.kept = kept

    def run(self, job: Job, log: Progress) -> dict[str, str]:
        from attncoda._progress import shown
        from attncoda.run.execute import run_unit

        kept = Loaded() if self.kept is None else self.kept
        failed: dict[str, str] = {}
        for unit in job.todo:
            log.start(unit)
            error = failed_before(unit, job, failed)
            if error is not None:
                failed[unit.key] = error
                log.failed(unit, error)
                continue
            for attempt in range(self.retries + 1):
                start = time.perf_counter()
                last = attempt == self.retries
                try:
                    with shown(log.enabled):  # progress inside the unit, as the run's
                        facts = run_unit(unit, job.config, job.root, job.command, kept)
                except AttncodaError as exc:
                    if not self.keep_going and last:
                        raise AttncodaError(f"unit {unit.key} failed: {exc}") from exc
                    error = describe(exc)
                except Exception as exc:  # a failed unit is reported; the others carry on
                    if not self.keep_going and last:
                        raise
                    error = describe(exc)
                else:
                    log.done(unit, facts, time.perf_counter() - start)
                    break
                if attempt < self.retries:
                    log.retry(unit, error, attempt + 1, self.retries)
                    continue
                failed[unit.key] = error
                log.failed(unit, error)
        return failed


class OnRay:
    """One Ray task per unit (see :mod:`attncoda.run.ray_tasks`).

    Parameters
    ----------
    address : str, optional
        An existing cluster: ``"auto"`` or ``"HOST:PORT"`` of its head.
    local : int, optional
        Start a private Ray instance on this machine with this many worker CPUs.
    retries : int
        Times a failed task is run again (a dead worker counts as a failure).
    keep_going : bool
        Carry on after a failed unit (reported in the returned dict); ``False``: cancel the
        tasks left and raise.
    """

    def __init__(
        self,
        address: str | None = None,
        local: int | None = None,
        retries: int = 2,
        keep_going: bool = True,
    ):
        if address is not None and local is not None:
            raise AttncodaError("give --ray-address or --ray-local, not both")
        if local is not None and int(local) < 1:
            raise AttncodaError(f"--ray-local {local} must be at least 1 (worker CPUs)")
        self.address = address
        self.local = None if local is None else int(local)
        self.retries = int(retries)
        self.keep_going = keep_going

    def run(self, job: Job, log: Progress) -> dict[str, str]:
        from attncoda.run.ray_tasks import run_on_ray

        return run_on_ray(
            job,
            log,
            address=self.address,
            local=self.local,
            retries=self.retries,
            keep_going=self.keep_going,
        )
