"""What an executor (:mod:`attncoda.run.executors`) is handed and reports with: the
:class:`Job`, its :class:`Progress` lines, and how a unit's failure reads
(:func:`describe`, :func:`failed_before`). Its own module, so that the Ray tasks
(:mod:`attncoda.run.ray_tasks`) read it without importing the executors back.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda.run.config import RunConfig
from attncoda.run.plan import TRAIN, Plan
from attncoda.store.runs import Unit

__all__ = ["Job", "Progress", "describe", "failed_before"]


@dataclass(frozen=True)
class Job:
    """The units an executor computes.

    Attributes
    ----------
    plan : Plan
        Every unit of the run and what each waits for.
    todo : list of Unit
        The units to compute, in plan order (the others are finished).
    config : RunConfig
        The run config, handed whole to each unit.
    root : Path
        The run folder.
    command : str
        The command the run folder belongs to (its manifest's).
    """

    plan: Plan
    todo: list[Unit]
    config: RunConfig
    root: Path
    command: str


def describe(exc: BaseException) -> str:
    """``"ExceptionType: message"`` of what a unit raised (a Ray task error unwrapped), on one
    line."""
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
    # One line, as the units table and the failure list show it.
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
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


class Progress:
    """One line per unit and an overall bar on stderr (nothing when ``enabled`` is false).

    The bar appears with the first line. With ``hold``, the failures before the first unit
    that finishes are held back until it does, so a run none of whose units finish prints
    nothing here and its caller's error line stands alone (an experiment command's).
    """

    def __init__(self, total: int, enabled: bool, desc: str, hold: bool = False):
        self.total = total
        self.count = 0
        self.enabled = enabled and total > 0
        self.desc = desc
        self.bar: Any = None
        self.finished = not hold
        self.held: list[tuple[Unit, str]] = []

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
        self.finished = True
        for failed, error in self.held:
            self._line(failed, f"FAILED: {error}", True)
        self.held = []
        note = f" ({facts['note']})" if facts.get("note") else ""
        self._line(unit, f"{facts.get('status', 'done')} in {seconds:.1f} s{note}", True)

    def retry(self, unit: Unit, error: str, attempt: int, retries: int) -> None:
        self._line(unit, f"failed ({error}); retry {attempt} of {retries}", False)

    def failed(self, unit: Unit, error: str) -> None:
        if not self.finished:
            self.held.append((unit, error))
            return
        self._line(unit, f"FAILED: {error}", True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
