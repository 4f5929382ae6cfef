"""``attncoda reproduce`` and the single-experiment commands: runs computed in this process.

A run is a plan of units ``(experiment, model, revision)`` (:mod:`attncoda.run.plan`) over
one run folder (:class:`attncoda.store.runs.RunStore`). Finished units are skipped on rerun;
a killed run resumes and ends with the same tables. At the end the partitions are unioned
into ``DIR/tables`` and the collapse units combined (:func:`attncoda.run.execute.finalise`).

A run keeps going (docs/design.md, "A run keeps going"): a unit that fails is recorded in the
``units`` table (status ``failed``, its one-line reason) and left out of the tables, every
unit that does not wait for it still runs, and the result lists the failures
(:attr:`ReproduceResult.failed`); a rerun of the same command runs only the failed units
(and those that waited for them). ``fail_fast`` stops at the first failure instead.
``attncoda flips`` and the other single-experiment commands are runs of one experiment
(and those it runs after): the same units, the same tables. The report is rendered from
the stored tables afterwards (``attncoda report DIR``), by the command line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import EXPERIMENTS
from attncoda.run.execute import RUN, OpenRun, finalise, open_run, writing
from attncoda.run.executors import Executor, InProcess, Job, Progress
from attncoda.run.loaded import Loaded
from attncoda.run.pool import LocalPool
from attncoda.store.guard import check_run_folder, new_folders, remove_created
from attncoda.store.runs import DONE, RunStore, Unit

__all__ = [
    "ReproduceResult",
    "check_models",
    "execute_run",
    "nothing_ran",
    "reproduce",
    "run_experiment",
]


@dataclass(frozen=True)
class ReproduceResult:
    """What a run left.

    Attributes
    ----------
    out : Path
        The run folder.
    units : list of Unit
        Every unit of the run, in order.
    ran, skipped : int
        Units computed in this call (failed ones not counted), and units found finished.
    failed : dict
        ``{unit.key: "ExceptionType: message"}`` for each unit that failed in this call (a
        unit whose awaited unit failed names it); empty when every unit finished.
    """

    out: Path
    units: list[Unit]
    ran: int
    skipped: int
    failed: dict[str, str] = field(default_factory=dict)


def execute_run(
    opened: OpenRun,
    executor: Executor,
    *,
    command: str,
    progress: bool,
    label: str | None = None,
    nothing_ran_raises: bool = False,
) -> ReproduceResult:
    """Compute the units ``opened`` has to do with ``executor`` as the one writer of its
    store (whose manifest is ``command``'s), then finalise. ``label`` names the writer in
    the lock and the progress bar (default: ``command``). With ``nothing_ran_raises`` a run
    none of whose units finished raises its first failure before it is finalised
    (:func:`nothing_ran`), its progress holding back the failures before the first unit
    that finishes (:class:`~attncoda.run.job.Progress`)."""
    config, store, run, todo = opened.config, opened.store, opened.plan, opened.todo
    with writing(store, label or command):
        log = Progress(len(todo), progress, label or command, hold=nothing_ran_raises)
        try:
            for unit in todo:
                damage = store.damage(unit) if (store.unit_dir(unit) / DONE).is_file() else None
                if damage:
                    log.redo(unit, damage)
            job = Job(plan=run, todo=todo, config=config, root=store.root, command=command)
            failed = executor.run(job, log) if todo else {}
        finally:
            log.close()
        store.clear_unfinished()  # what a worker that died mid-unit left
        result = ReproduceResult(
            out=store.root,
            units=list(run.units),
            ran=len(todo) - len(failed),
            skipped=len(run.units) - len(todo),
            failed=failed,
        )
        if nothing_ran_raises:
            nothing_ran(result)
        finalise(config, store, run, failed)
    return result


def check_models(models: Sequence[str], series: str | None = None, *, cache: bool = True) -> None:
    """Refuse a model spec or series checkpoint that cannot load, before a run folder is
    made (:func:`attncoda.models.resolve.check_spec`; with ``cache``, a hub id must be in
    the local Hugging Face cache while ``HF_HUB_OFFLINE`` is set)."""
    specs = [m.strip() for m in models if m and m.strip()]
    if not specs and series is None:
        return
    from attncoda.models.resolve import check_spec

    for spec in specs:
        check_spec(spec, cache=cache)
    if series is not None:
        from attncoda.models.series import parse_series

        for point in parse_series(series):
            check_spec(point.spec, cache=cache)


def _made_here(store: RunStore | None) -> bool:
    """Whether this call made its run folder: the store wrote the manifest, so the folder
    was new or empty before (:func:`check_run_folder`) and all it holds is this run's. A
    second writer refused by the lock of a run it found there made nothing."""
    return store is not None and store.made


def reproduce(  # params: the options of attncoda reproduce, which users type as keywords
    models: Sequence[str],
    out: str | Path,
    *,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    progress: bool = True,
    workers: int = 1,
    fail_fast: bool = False,
) -> ReproduceResult:
    """Run every experiment on ``models`` into the run folder ``out``, in this process or
    on a pool of ``workers`` processes.

    The run keeps going past a unit that fails: the failure is recorded (the ``units``
    table's status ``failed`` and its reason), every unit that does not wait for it runs,
    and :attr:`ReproduceResult.failed` lists them; the same call again runs only what
    failed (and what waited for it). With ``fail_fast`` the first failure ends the run.

    Parameters
    ----------
    models : sequence of str
        Model specs (``smollm2``, ``minilm``, ``owner/name[@revision]``, a folder).
    out : path-like
        The run folder: new, empty, or a run folder. A folder holding a run of this config
        resumes it (finished units are skipped); one holding another config, or any other
        files, is refused before anything is written.
    series : str, optional
        The checkpoint series of ``collapse`` (``owner/name@step0,step512`` or a folder of
        ``stepN`` checkpoints); default: the shipped ``bigram-backcopy`` series
        (:mod:`attncoda.models.shipped`), or, with the ``train`` setting ``retrain``, a
        ``train-tiny`` series trained into ``out/series/train-tiny`` on the task of the
        ``train`` settings (``"bigram-backcopy"``, where a sink grows; ``"text"`` for the
        corpus).
    experiments : sequence of str
        A subset of :data:`attncoda.experiments.contract.EXPERIMENTS` (those they run after
        join them).
    scale, settings
        ``"demo"`` or ``"full"`` (:data:`attncoda.run.config.SCALES`), and overrides by
        group (:func:`attncoda.run.config.run_config`).
    text : str, optional
        The corpus file or folder (default: the embedded one).
    options : CaptureOptions, optional
        How models load and capture: device or device map, dtype, method, kernel, sink and
        seed (:class:`attncoda.capture.options.CaptureOptions`). Weights a device map puts on the
        disk go to its ``offload_folder``, by default ``out/offload``; the manifest's config
        records the map.
    progress : bool
        Print one line per unit and an overall progress bar (on stderr), and progress
        inside each long unit.
    workers : int
        Units run at the same time, each in a process of its own with its share of the
        cores (:class:`attncoda.run.pool.LocalPool`), as their dependencies and the
        machine's memory allow; 1 (the default): one after another in this process. The
        tables equal those of one process with as many threads as a worker has, bit for
        bit (other thread counts may differ at float32 rounding); the run config does not
        record it, so a run may resume with another number.
    fail_fast : bool
        Stop at the first unit that fails, raising its error (the units finished before it
        are kept, to resume); default: keep going and list the failures.

    Returns
    -------
    ReproduceResult
        With ``failed`` listing the units that failed (empty when every unit finished).

    Raises
    ------
    AttncodaError
        A bad config or model spec, a folder of another config or of a user's files, or,
        with ``fail_fast``, the first unit that failed (named). A folder this call made is
        removed again when the run fails before any unit finished; one that held files
        before is never touched.
    """
    return _run_here(
        RUN,
        models,
        out,
        keep_finished=True,
        progress=progress,
        workers=workers,
        fail_fast=fail_fast,
        series=series,
        experiments=experiments,
        scale=scale,
        settings=settings,
        text=text,
        options=options,
    )


def run_experiment(  # params: the run's config, each keyword a user or the API sets
    name: str,
    models: Sequence[str],
    out: str | Path,
    *,
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    series: str | None = None,
    attentions: Sequence[str] | None = None,
    tokens: str | None = None,
    kind: str | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    progress: bool = True,
    kept: Loaded | None = None,
) -> ReproduceResult:
    """Run experiment ``name`` (and those it runs after) on ``models`` into ``out``.

    The folder belongs to the command ``name`` (its manifest says so); it is resumed as a
    reproduce folder is. ``settings`` overrides the defaults by group, as for
    :func:`reproduce`; ``attentions`` (with ``tokens`` and ``kind``) reads attention files
    instead of models; ``series`` is the checkpoint series of collapse. ``kept`` is what
    the run's units keep and are lent (:class:`~attncoda.run.loaded.Loaded`: a caller's live
    models and captures, by label); None: a fresh one, forgotten when the run returns.

    Like :func:`reproduce` it keeps going past a unit that fails and lists the failures in
    the result, unless no unit finished at all: then it raises the first failure,
    ``unit KEY failed: MESSAGE``, an :class:`AttncodaError`.

    ``out`` must be new, empty or a run folder (:func:`attncoda.store.guard.check_run_folder`),
    and every model spec must resolve (:func:`check_models`), before anything is written.
    When the run fails, what this call made goes again (the folder and the parents it
    created, or the contents of a folder that was empty); a folder that held a run before
    is left as it is, to resume.
    """
    return _run_here(
        name,
        models,
        out,
        keep_finished=False,
        progress=progress,
        nothing_ran_raises=True,
        kept=kept,
        series=series,
        experiments=[name],
        settings=settings,
        text=text,
        options=options,
        attentions=attentions,
        tokens=tokens,
        kind=kind,
    )


def _run_here(  # params: the run's own switches, keyword-only; the config's pass through
    command: str,
    models: Sequence[str],
    out: str | Path,
    *,
    keep_finished: bool,
    progress: bool,
    workers: int = 1,
    fail_fast: bool = False,
    nothing_ran_raises: bool = False,
    kept: Loaded | None = None,
    **run_args: Any,
) -> ReproduceResult:
    """Run ``command``'s units on ``models`` into ``out`` in this process (``run_args``:
    those of :func:`attncoda.run.config.run_config`).

    The folder and the model specs (unless attention files are read) are checked before
    anything is written. Units that fail are listed in the result; with ``fail_fast`` the
    first one raises, and with ``nothing_ran_raises`` a run none of whose units finished
    raises its first failure (:func:`nothing_ran`). When the run fails, what this call
    made goes again, unless ``keep_finished`` and a unit finished: finished units of a long
    run are worth resuming; a run that finished none left nothing but its own manifest and
    lock. ``kept``: what the units keep and are lent (None: a fresh one per run).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise AttncodaError(f"workers must be a positive integer; got {workers!r}")
    check_run_folder(out)
    created = new_folders(out)
    kept = Loaded() if kept is None else kept
    if not run_args.get("attentions"):  # a live model or a series of captures lent is no spec
        series = run_args.get("series")
        series = None if series is not None and kept.lent(series) else series
        check_models([m for m in models if not kept.lent(m)], series)
    store: RunStore | None = None
    try:
        opened = open_run(list(models), out, command=command, lent=kept, **run_args)
        store = opened.store
        going = not fail_fast
        executor: Executor = (
            InProcess(keep_going=going, kept=kept)
            if workers == 1
            else LocalPool(workers, keep_going=going)
        )
        result = execute_run(
            opened,
            executor,
            command=command,
            progress=progress,
            nothing_ran_raises=nothing_ran_raises,
        )
    except Exception:
        finished = keep_finished and any((Path(out) / "units").glob(f"*/*/{DONE}"))
        if _made_here(store) and not finished:
            remove_created(out, created)
        raise
    _said(progress, command, result)
    return result


def nothing_ran(result: ReproduceResult) -> None:
    """Raise the first failure of a run none of whose units finished (in this call or
    before), as ``unit KEY failed: MESSAGE``; return when a unit finished or none failed."""
    if not result.failed or result.ran or result.skipped:
        return
    key, error = next(iter(result.failed.items()))
    error = error.removeprefix(f"{AttncodaError.__name__}: ")
    more = len(result.failed) - 1
    also = f" (and {more} more unit(s) failed)" if more else ""
    raise AttncodaError(f"unit {key} failed: {error}{also}")


def _said(progress: bool, command: str, result: ReproduceResult) -> None:
    if progress:
        import sys

        failed = f", {len(result.failed)} failed" if result.failed else ""
        print(
            f"{command}: {result.ran} units run, {result.skipped} already finished{failed}",
            file=sys.stderr,
        )
