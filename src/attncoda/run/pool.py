"""The units of a run in parallel on this machine: a pool of worker processes.

:class:`LocalPool` is an executor (:class:`attncoda.run.executors.Executor`), as
:class:`~attncoda.run.executors.InProcess` and :class:`~attncoda.run.executors.OnRay` are: a
unit cannot tell where it runs. Each worker is a process of its own (started with ``spawn``, so
it imports torch itself) with its share of the cores as torch threads, and keeps the model it
last loaded (its own :class:`~attncoda.run.loaded.Loaded`: :func:`serve`), so a model is loaded
once per worker, not once per unit. Its threads (torch's and numpy's BLAS) are ``cores() //
workers``: a unit computes there exactly as in one process with as many threads. When fewer
units are running than there are workers (the others have nothing ready), the running ones take
the idle cores too (:func:`shares`), from their next step of long work on
(:func:`attncoda._progress.between_steps`): the last long unit of a run (Gemma 3's prune in the
demo) does not run on one core while the other sits idle. A thread count changes no value the
tables hold: the test of the pool compares its tables with one process's.

:class:`Schedule` chooses what each idle worker runs next, in plan order:

- a unit waits for the units it runs after and for the unit that provides its inputs (the
  train unit of a series), as the plan says;
- a worker takes a unit of the model it holds first (no second load); among those, and
  otherwise, the longest unit first (:attr:`Experiment.cost
  <attncoda.experiments.contract.Experiment>`, then the largest model by peak), so that
  the long units start early and spread over the workers, and the short ones fill in
  around them;
- models never run together when their peaks (:func:`attncoda.models.peak.peak_bytes`)
  exceed the memory budget: a unit whose model would not fit beside the models of the
  busy workers waits (alone, it always runs).

A unit that fails, or whose worker dies (killed, out of memory), is retried ``retries`` times
and then reported; a fresh worker takes a dead one's place, and the other units carry on.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attncoda._errors import AttncodaError
from attncoda._progress import between_steps, shown
from attncoda.run.job import Job, Progress, describe, failed_before
from attncoda.run.loaded import Loaded
from attncoda.run.plan import TRAIN, unit_cost
from attncoda.store.runs import Unit

__all__ = ["LocalPool", "Schedule", "available_memory", "cores", "died", "serve", "shares"]


def cores() -> int:
    """The cores this process may use (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def available_memory() -> int:
    """The memory the pool may fill, in bytes: 90% of what the kernel calls available."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(int(line.split()[1]) * 1024 * 0.9)
    except OSError:
        pass
    pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
    return int(pages * os.sysconf("SC_PAGE_SIZE") * 0.5) if pages else 8 * 2**30


@dataclass
class Schedule:
    """Which ready unit each worker runs next (see the module docstring).

    Parameters
    ----------
    job : Job
        The plan and the units to compute.
    workers : int
        How many workers there are.
    spec_of : callable
        ``spec_of(unit)``: the model spec the unit loads (``None``: none, such as the train
        unit or given attention).
    peak_of : callable
        ``peak_of(spec)``: its peak memory in bytes.
    budget : int
        The memory the workers may fill together, in bytes.
    """

    job: Job
    workers: int
    spec_of: Callable[[Unit], str | None]
    peak_of: Callable[[str], int]
    budget: int
    pending: list[Unit] = field(init=False)
    running: dict[int, Unit] = field(default_factory=dict, init=False)
    held: dict[int, str | None] = field(default_factory=dict, init=False)
    finished: set[str] = field(default_factory=set, init=False)
    failed: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.pending = list(self.job.todo)
        todo = {u.key for u in self.job.todo}
        # units of the plan not in todo finished earlier
        self.finished = {u.key for u in self.job.plan.units if u.key not in todo}

    def _peak(self, spec: str | None) -> int:
        return 0 if spec is None else int(self.peak_of(spec))

    def blocked(self) -> list[tuple[Unit, str]]:
        """Pending units whose awaited unit failed, with their error; taken off the queue."""
        out = []
        for unit in list(self.pending):
            error = failed_before(unit, self.job, self.failed)
            if error is not None:
                self.pending.remove(unit)
                self.failed[unit.key] = error
                out.append((unit, error))
        return out

    def _ready(self, unit: Unit) -> bool:
        return all(p.key in self.finished for p in self.job.plan.waits_for(unit))

    def fits(self, worker: int, spec: str | None) -> bool:
        """Whether ``spec`` fits beside the models the other busy workers hold."""
        busy = [w for w in self.running if w != worker]
        if not busy:
            return True
        beside = sum(self._peak(self.held.get(w)) for w in busy)
        return beside + self._peak(spec) <= self.budget

    def next_for(self, worker: int) -> Unit | None:
        """The unit ``worker`` (idle) runs next, or ``None`` (nothing ready that fits)."""
        ready = [u for u in self.pending if self._ready(u)]
        if not ready:
            return None
        mine = self.held.get(worker)
        ranked = sorted(  # stable: plan order among equals
            ready,
            key=lambda u: (
                0 if self.spec_of(u) == mine else 1,
                -unit_cost(u),
                -self._peak(self.spec_of(u)),
            ),
        )
        for unit in ranked:
            spec = self.spec_of(unit)
            if self.fits(worker, spec):
                self.pending.remove(unit)
                self.running[worker] = unit
                if spec is not None:
                    self.held[worker] = spec
                return unit
        return None

    def finish(self, worker: int, error: str | None = None) -> Unit:
        """``worker``'s unit is done (or failed with ``error``); returns it."""
        unit = self.running.pop(worker)
        if error is None:
            self.finished.add(unit.key)
        else:
            self.failed[unit.key] = error
        return unit

    @property
    def over(self) -> bool:
        """Whether every unit finished or failed."""
        return not self.pending and not self.running


def died(code: int | None) -> str:
    """The failure of a unit whose worker process died with exit code ``code``."""
    import signal

    how = f"exit code {code}"
    if code is not None and code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return (
        f"{AttncodaError.__name__}: the worker process running it died ({how}): rerun the "
        "same command to run it again, with fewer --workers if memory ran out"
    )


def shares(running: Any, workers: int, total: int) -> dict[int, int]:
    """The torch threads of each worker: its share of the ``total`` cores, ``total //
    workers``; when fewer workers are busy than there are (the rest have nothing ready), the
    busy ones share the idle ones' cores, so the last long unit of a run uses them all."""
    base = max(1, total // workers)
    each = max(base, total // max(1, len(running)))
    return {w: each if w in running else base for w in range(workers)}


def _worker(
    index: int, threads: int, tasks: Any, results: Any, shown_progress: bool, allowed: Any
) -> None:  # pragma: no cover - runs in a child process
    """A worker: :func:`serve`, following its share of the cores between two steps of long
    work (``allowed[index]``, :func:`shares`)."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:  # numpy's BLAS was loaded before the variables above were set: limit it too
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        threadpool_limits(threads)
    current = [threads]

    def follow() -> None:
        want = int(allowed[index])
        # A unit that set its own thread count (a pinned block) keeps it.
        if want != current[0] and torch.get_num_threads() == current[0]:
            torch.set_num_threads(want)
            if threadpool_limits is not None:
                threadpool_limits(want)
            current[0] = want

    between_steps(follow)
    serve(index, tasks, results, shown_progress, follow)


def serve(index: int, tasks: Any, results: Any, shown_progress: bool, follow: Any) -> None:
    """Worker ``index``'s loop: the units of ``tasks`` (to None) with its own :class:`Loaded`."""
    from attncoda.run.execute import run_unit

    kept, held = Loaded(), None
    while True:
        task = tasks.get()
        if task is None:
            return
        unit, config, root, command, spec = task
        if spec is not None and held is not None and spec != held:
            kept.clear()  # one model per worker: the last one goes before the next loads
        held = spec if spec is not None else held
        start = time.perf_counter()
        follow()
        try:
            with shown(shown_progress):
                facts = run_unit(unit, config, root, command, kept)
        except BaseException as exc:  # reported to the parent, which decides
            results.put((index, "failed", describe(exc), isinstance(exc, AttncodaError)))
            if isinstance(exc, KeyboardInterrupt):
                return
        else:
            results.put((index, "done", facts, time.perf_counter() - start))


class LocalPool:
    """The units of a run on ``workers`` processes of this machine, each with its share of
    the cores (see the module docstring).

    Parameters
    ----------
    workers : int
        Worker processes (at least 1).
    keep_going : bool
        Carry on after a failed unit; ``False``: stop the pool and raise.
    retries : int
        Times a failed unit is run again before it is reported.
    budget : int, optional
        The memory the workers may fill together, in bytes (default
        :func:`available_memory`).
    peak_of : callable, optional
        ``peak_of(spec)`` in bytes (default :func:`attncoda.models.peak.peak_bytes`).
    """

    def __init__(
        self,
        workers: int,
        *,
        keep_going: bool = True,
        retries: int = 0,
        budget: int | None = None,
        peak_of: Callable[[str], int] | None = None,
    ):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise AttncodaError(f"workers must be a positive integer; got {workers!r}")
        self.workers = workers
        self.keep_going = keep_going
        self.retries = int(retries)
        self.budget = budget
        self.peak_of = peak_of

    def run(self, job: Job, log: Progress) -> dict[str, str]:  # long: one loop over its queues
        import multiprocessing

        from attncoda.models.peak import peak_bytes
        from attncoda.run.provide import source

        specs: dict[Unit, str | None] = {}

        def spec_of(unit: Unit) -> str | None:  # asked at every turn: found once a unit
            if unit not in specs and unit.experiment != TRAIN:  # the train unit loads none
                found = source(unit, job.config, job.root, Loaded())  # nothing lent to a pool
                specs[unit] = None if found.given else found.spec
            return specs.get(unit)

        n = min(self.workers, max(1, len(job.todo)))
        schedule = Schedule(
            job,
            n,
            spec_of,
            self.peak_of or peak_bytes,
            available_memory() if self.budget is None else self.budget,
        )
        total = cores()
        threads = max(1, total // n)
        context = multiprocessing.get_context("spawn")
        results = context.Queue()
        allowed = context.Array("i", [threads] * n, lock=False)

        def spawn(i: int) -> tuple[Any, Any]:
            queue_ = context.Queue()
            proc = context.Process(
                target=_worker,
                args=(i, threads, queue_, results, log.enabled, allowed),
                daemon=True,
            )
            proc.start()
            return proc, queue_

        started = [spawn(i) for i in range(n)]
        procs = [proc for proc, _ in started]
        tasks = [queue_ for _, queue_ in started]
        attempts: dict[str, int] = {}

        def failure(worker: int, error: str, expected: bool) -> None:
            """``worker``'s unit failed with ``error``: run it again while retries are
            left, else record it (or, without keep_going, raise)."""
            unit = schedule.running[worker]
            tries = attempts.get(unit.key, 0)
            if tries < self.retries:
                attempts[unit.key] = tries + 1
                log.retry(unit, error, tries + 1, self.retries)
                schedule.running.pop(worker)
                schedule.pending.insert(0, unit)
                return
            schedule.finish(worker, error)
            if not self.keep_going:
                message = error.split(": ", 1)[1] if expected and ": " in error else error
                raise AttncodaError(f"unit {unit.key} failed: {message}")
            log.failed(unit, error)

        try:
            while not schedule.over:
                for blocked, error in schedule.blocked():
                    log.failed(blocked, error)
                for worker in range(n):
                    if worker in schedule.running:
                        continue
                    chosen = schedule.next_for(worker)
                    if chosen is not None:
                        log.start(chosen)
                        spec = schedule.held.get(worker)
                        tasks[worker].put((chosen, job.config, job.root, job.command, spec))
                if schedule.over:
                    break
                if not schedule.running:
                    raise AttncodaError("the pool has units left but none can start")
                for worker, share in shares(schedule.running, n, total).items():
                    allowed[worker] = share
                try:
                    worker, kind, payload, extra = results.get(timeout=5)
                except queue.Empty:
                    # A worker that died (killed, out of memory) fails the unit it ran; a
                    # fresh one takes its place, and the other units carry on.
                    for dead in [i for i, p in enumerate(procs) if not p.is_alive()]:
                        code = procs[dead].exitcode
                        procs[dead], tasks[dead] = spawn(dead)
                        schedule.held.pop(dead, None)
                        if dead in schedule.running:
                            failure(dead, died(code), True)
                    continue
                if kind == "done":
                    unit = schedule.finish(worker)
                    log.done(unit, payload, extra)
                    continue
                failure(worker, payload, bool(extra))
        finally:
            for task in tasks:
                task.put(None)
            deadline = time.monotonic() + 30
            for proc in procs:
                proc.join(timeout=max(0.1, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=5)
        return dict(schedule.failed)

    def __repr__(self) -> str:
        return f"LocalPool(workers={self.workers})"

