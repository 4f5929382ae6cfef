"""Where the units of a run are computed: in this process, or as Ray tasks. One interface.

An executor takes a :class:`Job` (the plan, the units to compute, the config, the run
folder) and a :class:`Progress`, calls :func:`attncoda.run.execute.run_unit` for every unit
of ``job.todo`` after the units it waits for, and returns the units that failed, ``{unit.key:
"ExceptionType: message"}``. A unit whose awaited unit failed is not run: it fails with a
message that names that unit.

- :class:`InProcess`: one unit after another in this process (Ray is not imported). With
  ``keep_going=False`` (reproduce) the first failure ends the run with an
  :class:`AttncodaError` naming the unit; otherwise (sweep) failed units are retried
  ``retries`` times, reported, and the others carry on.
- :class:`OnRay`: one Ray task per unit on a private local instance or an existing
  cluster (:mod:`attncoda.run.ray_tasks`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from attncoda._errors import AttncodaError
from attncoda.run.plan import TRAIN, Plan
from attncoda.store.runs import Unit

__all__ = ["Executor", "InProcess", "Job", "OnRay", "Progress", "describe", "failed_before"]


@dataclass(frozen=True)
class Job:
    """The units an executor computes.

    Attributes
    ----------
    plan : Plan
        Every unit of the run and what each waits for.
    todo : list of Unit
        The units to compute, in plan order (the others are finished).
    config : dict
        The run config.
    root : Path
        The run folder.
    command : str
        The command the run folder belongs to (its manifest's).
    """

    plan: Plan
    todo: list[Unit]
    config: dict[str, Any]
    root: Path
    command: str


@runtime_checkable
class Executor(Protocol):
    """Computes the units of a job; returns those that failed."""

    def run(self, job: Job, log: Progress) -> dict[str, str]: ...


def describe(exc: BaseException) -> str:
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


def failed_before(unit: Unit, job: Job, failed: Mapping[str, str]) -> str | None:
    """The error of ``unit`` when a unit it waits for failed (naming that unit), else None."""
    for prior in job.plan.waits_for(unit):
        if prior.key in failed:
            what = "checkpoints" if prior.experiment == TRAIN else "tables"
            return (
                f"AttncodaError: unit {prior.key} failed, so its {what} are missing "
                f"({failed[prior.key]})"
            )
    return None


class InProcess:
    """Every unit in this process, one after another, in plan order.

    Parameters
    ----------
    retries : int
        Times a failed unit is run again before it is reported.
    keep_going : bool
        Carry on after a failed unit (reported in the returned dict); ``False``: raise.
    """

    def __init__(self, retries: int = 0, keep_going: bool = True):
        self.retries = int(retries)
        self.keep_going = keep_going

    def run(self, job: Job, log: Progress) -> dict[str, str]:
        from attncoda.run.execute import run_unit

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
                try:
                    facts = run_unit(unit, job.config, job.root, job.command)
                except AttncodaError as exc:
                    if not self.keep_going:
                        raise AttncodaError(f"unit {unit.key} failed: {exc}") from exc
                    error = describe(exc)
                except Exception as exc:  # a failed unit is reported; the others carry on
                    if not self.keep_going:
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
    """

    def __init__(self, address: str | None = None, local: int | None = None, retries: int = 2):
        if address is not None and local is not None:
            raise AttncodaError("give --ray-address or --ray-local, not both")
        if local is not None and int(local) < 1:
            raise AttncodaError(f"--ray-local {local} must be at least 1 (worker CPUs)")
        self.address = address
        self.local = None if local is None else int(local)
        self.retries = int(retries)

    def run(self, job: Job, log: Progress) -> dict[str, str]:
        from attncoda.run.ray_tasks import run_on_ray

        return run_on_ray(job, log, address=self.address, local=self.local, retries=self.retries)


class Progress:
    """One line per unit and an overall bar on stderr (nothing when ``enabled`` is false).

    The bar appears with the first line, so a run whose first unit fails prints its error
    alone.
    """

    def __init__(self, total: int, enabled: bool, desc: str):
        self.total = total
        self.count = 0
        self.enabled = enabled and total > 0
        self.desc = desc
        self.bar: Any = None

    def _line(self, unit: Unit, text: str, finished: bool) -> None:
        if finished:
            self.count += 1
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=self.total,
                initial=self.count - 1 if finished else self.count,
                desc=self.desc,
                unit="unit",
                file=sys.stderr,
            )
        width = len(str(self.total))
        head = f"[{self.count:>{width}}/{self.total}]" if finished else " " * (2 * width + 3)
        self.bar.write(f"{head} {unit.key}: {text}", file=sys.stderr)
        if finished:
            self.bar.update(1)

    def start(self, unit: Unit) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(unit.key)

    def redo(self, unit: Unit, damage: str) -> None:
        self._line(unit, f"its files do not match _done.json ({damage}), redone", False)

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
