"""Executing a run: one unit at a time into its partition, then the run's tables.

:func:`run_unit` computes one unit from the run config alone: it provides the experiment's
inputs (:mod:`attncoda.run.provide`), calls ``Experiment.run``, puts the model family first
in every table, and writes the unit's partition of the run folder (its tables, its arrays,
then ``_done.json`` with the summary among the unit's facts). :func:`finalise` unions the
partitions into ``DIR/tables``, combines the units of a series experiment (collapse, its
summary kept in the manifest under ``combined``), and writes the ``units`` table and the
model facts. Executors (:mod:`attncoda.run.executors`)
decide where each :func:`run_unit` call happens.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import Tables, experiment
from attncoda.run.config import RunConfig, run_config
from attncoda.run.loaded import Loaded
from attncoda.run.plan import TRAIN, TRAIN_TABLES, Plan, plan
from attncoda.run.provide import model_info, provide, remember, source, with_family
from attncoda.run.stored import read_unit, write_arrays
from attncoda.store.lock import writer_lock
from attncoda.store.runs import NO_REVISION, RunStore, Unit

__all__ = ["RUN", "OpenRun", "finalise", "open_run", "run_unit", "writing"]

#: The command of a run folder made by reproduce or sweep (they share their folders).
RUN = "reproduce"


def run_unit(
    unit: Unit, config: RunConfig, root: str | Path, command: str = RUN, kept: Loaded | None = None
) -> dict[str, Any]:
    """Compute ``unit`` and write its partition into the run folder ``root``.

    The folder must already hold the run's manifest (made by :class:`RunStore` with
    ``command`` and ``config``). A finished unit is not redone. ``kept`` is what the runner
    keeps between units and was lent (:class:`~attncoda.run.loaded.Loaded`: the models it
    loaded, their rows, the tables of its units); None: the unit's own, forgotten after it.
    Returns the facts recorded with the unit: ``status`` (``"done"``, or ``"skipped"`` for a
    unit that does not apply to its model, with ``note``), ``seconds``, the model facts and
    the experiment's summary. A unit that raises leaves no partition behind (its folder is
    removed), so a rerun computes it from scratch.
    """
    store = RunStore(Path(root), command, config.to_json())
    if store.is_done(unit):
        return {**store.facts(unit), "resumed": True}
    folder = store.begin(unit)
    start = time.perf_counter()
    try:
        frames, facts = _compute(unit, config, store, folder, Loaded() if kept is None else kept)
        facts["seconds"] = round(time.perf_counter() - start, 3)
        store.finish(unit, frames, facts)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return facts


def _compute(
    unit: Unit, config: RunConfig, store: RunStore, folder: Path, kept: Loaded
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tables of ``unit`` and its facts (its arrays written into ``folder``), by the
    runner that keeps ``kept``."""
    facts: dict[str, Any] = {"status": "done", "note": ""}
    if unit.experiment == TRAIN:
        from attncoda.run.train import train_unit

        return train_unit(config, store.root), facts
    exp = experiment(unit.experiment)
    settings = config.settings[unit.experiment]
    info = model_info(source(unit, config, store.root, kept), config)
    found, device = info
    combined = exp.combine is not None  # parts of one series table: no model facts
    facts["device"] = device
    if not combined:
        facts["model_info"] = found.to_dict()
    reason = exp.skip(found) if exp.skip is not None else None
    if reason:
        facts["status"], facts["note"] = "skipped", reason
        return {}, facts
    provided = provide(unit, config, store, kept, info=info)
    facts.update(provided.facts)
    if not combined:
        # The forward the capture followed, in the manifest's model facts.
        for read in (facts.get("read"), facts.get("captured")):
            if isinstance(read, dict):
                for name in ("forward", "read_dtype"):
                    if name in read:
                        facts["model_info"][name] = read[name]
    tables = exp.run(provided.inputs, settings)
    if not combined:
        tables = with_family(tables, found.family)
    facts["summary"] = dict(tables.summary)
    facts["note"] = str(tables.summary.get("note", ""))
    if tables.arrays:
        write_arrays(tables.arrays, folder)
    remember(unit, config, store.root, kept, tables)
    return dict(tables.frames), facts


@dataclass(frozen=True)
class OpenRun:
    """A run folder opened: the run's config, its store, its plan, its unfinished units."""

    config: RunConfig
    store: RunStore
    plan: Plan
    todo: list[Unit]


def open_run(models: list[str], out: str | Path, *, command: str = RUN, **options: Any) -> OpenRun:
    """Open (or make) the run folder ``out`` for ``models`` and ``options`` (those of
    :func:`attncoda.run.config.run_config`)."""
    config = run_config(models, **options)
    store = RunStore(Path(out), command, config.to_json())
    found = plan(config)
    return OpenRun(config, store, found, [u for u in found.units if not store.is_done(u)])


@contextlib.contextmanager
def writing(store: RunStore, command: str) -> Iterator[None]:
    """Be the one writer of ``store``'s folder inside the block, and end cleanly on a signal.

    Holds the folder's writer lock (a second writer is refused, a stale lock taken over).
    SIGTERM is turned into ``KeyboardInterrupt`` (as Ctrl-C is), so the unit in progress is
    abandoned, its partial folder cleared, and the lock released: the next run resumes.
    """
    handler = None
    if threading.current_thread() is threading.main_thread():
        handler = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with writer_lock(store.root, command):
            try:
                yield
            except KeyboardInterrupt:
                store.clear_unfinished()
                raise
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def finalise(
    config: RunConfig, store: RunStore, run: Plan, failed: Mapping[str, str] | None = None
) -> None:
    """Union the partitions of the run of ``config`` into ``DIR/tables``, combine the units
    of a series experiment, and write the ``units`` table and the model facts into the
    manifest.

    Every unit must be finished, except those in ``failed`` (``{unit.key: error}``): they
    are left out of the tables and listed in ``units`` with status ``"failed"`` and their
    error. A series experiment is combined only when every one of its units finished.
    """
    failed = dict(failed or {})
    units = list(run.units)
    missing = [u.key for u in units if not store.is_done(u) and u.key not in failed]
    if missing:
        raise AttncodaError(
            f"{len(missing)} unit(s) of {str(store.root)!r} are not finished ({missing[0]}, "
            "...): run the same command again to finish them"
        )
    done = [u for u in units if u.key not in failed]
    names = [e for e in config.experiments if experiment(e).combine is None]
    for name in dict.fromkeys([t for e in names for t in experiment(e).tables] + [*TRAIN_TABLES]):
        store.write_union(name, done)
    combined = _combine(config, store, units, failed)
    if config.train is not None and config.train.retrain:
        from attncoda.run.train import retrain_table
        from attncoda.store.files import read_table

        paths = {
            name: store.root / "tables" / f"{name}.parquet" for name in ("collapse", "predictor")
        }
        found = {name: read_table(p) if p.is_file() else None for name, p in paths.items()}
        store.write_table("retrain", retrain_table(found))
    _write_units(store, units, failed, combined)


def _combine(
    config: RunConfig, store: RunStore, units: list[Unit], failed: Mapping[str, str]
) -> dict[str, Any]:
    """Write each series experiment whose units all finished; return their summaries."""
    combined: dict[str, Any] = {}
    for name in config.experiments:
        exp = experiment(name)
        parts = [u for u in units if u.experiment == name]
        if exp.combine is None or not parts or any(u.key in failed for u in parts):
            continue
        tables = exp.combine([read_unit(store, u) for u in parts], config.settings[name])
        _write_combined(store, tables)
        combined[name] = dict(tables.summary)
    return combined


def _write_units(
    store: RunStore, units: list[Unit], failed: Mapping[str, str], combined: dict[str, Any]
) -> None:
    """The ``units`` table, and the manifest's model facts, ``combined`` and devices."""
    import pandas as pd

    records = []
    infos: dict[str, Any] = {}
    devices: set[str] = set()
    for unit in units:
        facts = (
            {"status": "failed", "note": failed[unit.key]}
            if unit.key in failed
            else store.facts(unit)
        )
        if facts.get("device"):
            devices.add(str(facts["device"]))
        if facts.get("model_info"):
            infos.setdefault(f"{unit.model}@{unit.revision}", facts["model_info"])
        records.append(
            {
                "experiment": unit.experiment,
                "model": unit.model,
                "revision": unit.revision,
                "status": facts.get("status", "done"),
                "note": facts.get("note", ""),
            }
        )
    store.write_table("units", pd.DataFrame(records))
    store.update_manifest(
        model_info=infos,
        **({"combined": combined} if combined else {}),
        **_used_devices(devices),
    )


def _used_devices(devices: set[str]) -> dict[str, str]:
    """The manifest's ``device`` (the device types the units ran on, e.g. ``"cpu"``,
    ``"cuda"`` or ``"cpu, cuda"``) and, where CUDA ran and torch sees it here, ``gpu``: the
    GPU's name. Empty when no unit ran a model."""
    if not devices:
        return {}
    found = {"device": ", ".join(sorted(devices))}
    if "cuda" in devices:
        import torch

        if torch.cuda.is_available():
            found["gpu"] = torch.cuda.get_device_name(0)
    return found


def _write_combined(store: RunStore, tables: Tables) -> None:
    """The tables of a series experiment: the series has no revision of its own."""
    for name, frame in tables.frames.items():
        if "revision" not in frame.columns:
            frame = frame.copy()
            frame.insert(1, "revision", NO_REVISION)
        store.write_table(name, frame)
