"""``attncoda reproduce``: every experiment on a list of models, resumable, with a report.

The run is a list of units ``(model, revision, experiment)`` (:mod:`attncoda.run.units`)
over one run folder (:class:`attncoda.store.runs.RunStore`). Finished units are skipped on
rerun; a killed run resumes and ends with the same tables. At the end the partitions are
unioned into ``DIR/tables``, the collapse split is assembled from the checkpoints' partitions,
and ``DIR/report.html`` is rendered from the tables alone.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.run.units import EXPERIMENTS, MODEL_EXPERIMENTS, run_unit, split_spec
from attncoda.store.lock import writer_lock
from attncoda.store.runs import DONE, NO_REVISION, RunStore, Unit

#: The models ``attncoda demo`` (and ``reproduce`` without ``--models``) runs: three
#: families, a Llama decoder, a Gemma 3 decoder with sliding-window layers, and a BERT
#: encoder, all embedded (``attncoda models``). ``mpnet`` joins them with ``--models``.
DEMO_MODELS = ("smollm2", "gemma3", "minilm")

#: Settings of each scale. ``demo`` fits a 2-core CPU in minutes; ``full`` is what the
#: README's results were measured with. Both read 128-token windows for the recorded rows,
#: as the shipped predictor was fitted on (sink statistics depend on the window length).
_DEMO: dict[str, Any] = {
    "profile_docs": 8,
    "profile_tokens": 128,
    "rows_docs": 4,
    "rows_tokens": 128,
    "n_boot": 200,
    "clusters": 4,
    "safety_bins": 5,
    "safe_threshold": None,  # None: attncoda.experiments.safety.DEFAULT_SAFE_THRESHOLD (5%)
    # The series of collapse: Bigram-Backcopy, where a sink grows ("text" when asked). None:
    # the task's own default (attncoda.training.train.TASK_DEFAULTS).
    "train_task": "bigram-backcopy",
    "train_size": None,
    "train_steps": None,
    "train_window": None,
    "train_batch_size": None,
    "train_lr": None,
    "collapse_docs": 16,
    "collapse_tokens": 128,
    "prune_channels": [
        "sink_mass",
        "sink_balance",
        "content_entropy",
        "full_entropy",
        "random",
    ],
    "prune_orders": ["high", "low"],
    "prune_ablations": ["zero"],
    "prune_ks": [4, 16, 64],
    "prune_profile_docs": 8,
    "prune_eval_docs": 4,
    "prune_tokens": 128,
}
SCALES: dict[str, dict[str, Any]] = {
    "demo": _DEMO,
    "full": {
        **_DEMO,
        "profile_docs": 32,
        "rows_docs": 16,
        "n_boot": 1000,
        "collapse_docs": 32,
        "prune_ks": [1, 2, 4, 8, 16, 32, 64],
        "prune_profile_docs": 16,
        "prune_eval_docs": 16,
    },
}

#: Tables unioned over the units into ``DIR/tables``, in this order.
UNIT_TABLES = (
    "profile_heads",
    "flips",
    "flips_by_layer",
    "cluster",
    "cluster_summary",
    "cluster_agreement",
    "safety",
    "safety_grid",
    "predictor",
    "prune",
    "prune_heads",
    "train",
    "train_heads",
)


@dataclass(frozen=True)
class ReproduceResult:
    """What a reproduce run left.

    Attributes
    ----------
    out : Path
        The run folder.
    report : Path or None
        ``out/report.html`` (``None`` when not rendered).
    units : list of Unit
        Every unit of the run, in order.
    ran, skipped : int
        Units computed in this call, and units found finished.
    """

    out: Path
    report: Path | None
    units: list[Unit]
    ran: int
    skipped: int


def run_config(
    models: Sequence[str],
    *,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Any] | None = None,
    text: str | None = None,
    sink: str = "first",
    seed: int = 0,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
) -> dict[str, Any]:
    """The config of a reproduce run: everything that determines its tables.

    ``device`` (``cpu``, ``cuda`` or ``auto``), ``dtype`` (the models' parameters) and
    ``method`` (``exact`` or ``fast`` capture) change the numbers, so they are part of the
    config (and of the manifest); each unit's facts also name the device it ran on.

    Raises
    ------
    AttncodaError
        No model, an unknown experiment, scale or setting, or a bad series.
    """
    from attncoda.capture.capture import METHODS
    from attncoda.data.corpus import corpus_source
    from attncoda.run.common import DEVICES, check_dtype

    if device not in DEVICES:
        raise AttncodaError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
    if method not in METHODS:
        raise AttncodaError(f"unknown method {method!r}: use one of {', '.join(METHODS)}")
    check_dtype(dtype)
    models = [m.strip() for m in models if m and m.strip()]
    if not models and "collapse" not in experiments:
        raise AttncodaError("give at least one model (e.g. --models smollm2,gemma3,minilm)")
    if len(set(models)) != len(models):
        raise AttncodaError(f"a model is listed twice in {models}")
    unknown = [e for e in experiments if e not in EXPERIMENTS]
    if unknown or not experiments:
        raise AttncodaError(
            f"unknown experiment(s) {unknown or list(experiments)}: use a comma list of "
            f"{', '.join(EXPERIMENTS)}"
        )
    if scale not in SCALES:
        raise AttncodaError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    merged = dict(SCALES[scale])
    for key, value in (settings or {}).items():
        if key not in merged:
            raise AttncodaError(f"unknown setting {key!r}: use one of {', '.join(merged)}")
        merged[key] = list(value) if isinstance(value, tuple) else value
    return {
        "models": models,
        "experiments": [e for e in EXPERIMENTS if e in experiments],
        "scale": scale,
        "settings": merged,
        "series": _series_config(series, merged) if "collapse" in experiments else None,
        "sink": str(sink),
        "seed": int(seed),
        "corpus": {"text": text, **corpus_source(text)},
        "device": device,
        "dtype": dtype,
        "method": method,
    }


def _series_config(series: str | None, settings: Mapping[str, Any]) -> dict[str, Any]:
    if series is None:
        from attncoda.data.tasks import TASKS
        from attncoda.training.train import TASK_DEFAULTS, checkpoint_steps

        task = settings["train_task"]
        if task not in TASKS:
            raise AttncodaError(f"unknown train_task {task!r}: use one of {', '.join(TASKS)}")
        n_steps = settings["train_steps"] or TASK_DEFAULTS[task]["steps"]
        steps = checkpoint_steps(int(n_steps))
        return {
            "name": "train-tiny",
            "spec": None,
            "task": task,
            "points": [[s, f"step{s}", f"run:series/train-tiny/step{s}"] for s in steps],
        }
    from attncoda.models.series import parse_series

    points = parse_series(series)
    repo, at, _ = points[0].spec.partition("@")
    name = repo if at else Path(series).name
    return {
        "name": name,
        "spec": series,
        "points": [[p.step, p.label, p.spec] for p in points],
    }


def plan(config: Mapping[str, Any]) -> list[Unit]:
    """Every unit of a run, in the order they run."""
    units = []
    experiments = config["experiments"]
    for spec in config["models"]:
        model, revision = split_spec(spec)
        units += [Unit(e, model, revision) for e in MODEL_EXPERIMENTS if e in experiments]
    series = config.get("series")
    if series:
        if series["spec"] is None:
            units.append(Unit("train", series["name"], NO_REVISION))
        units += [Unit("collapse", series["name"], label) for _, label, _ in series["points"]]
        if "predictor" in experiments:
            ends = {series["points"][0][1], series["points"][-1][1]}
            units += [
                Unit("predictor", series["name"], label)
                for _, label, _ in series["points"]
                if label in ends
            ]
    return units


def open_run(
    models: Sequence[str], out: str | Path, **options: Any
) -> tuple[dict[str, Any], RunStore, list[Unit], list[Unit]]:
    """Open (or make) the run folder ``out`` for ``models`` and ``options`` (those of
    :func:`run_config`).

    Returns
    -------
    config, store, units, todo
        The run config, its store, every unit in order, and the units not yet finished.
    """
    config = run_config(models, **options)
    store = RunStore(Path(out), "reproduce", config)
    units = plan(config)
    return config, store, units, [u for u in units if not store.is_done(u)]


def reproduce(
    models: Sequence[str],
    out: str | Path,
    *,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Any] | None = None,
    text: str | None = None,
    sink: str = "first",
    seed: int = 0,
    progress: bool = True,
    report: bool = True,
    device: str = "cpu",
    dtype: str | None = None,
    method: str = "exact",
) -> ReproduceResult:
    """Run every experiment on ``models`` into the run folder ``out``, then the report.

    Parameters
    ----------
    models : sequence of str
        Model specs (``smollm2``, ``minilm``, ``owner/name[@revision]``, a folder).
    out : path-like
        The run folder. A folder holding a run of this config resumes it (finished units are
        skipped); one holding another config is refused.
    series : str, optional
        The checkpoint series of ``collapse`` (``owner/name@step0,step512`` or a folder of
        ``stepN`` checkpoints); default: a ``train-tiny`` series trained into
        ``out/series/train-tiny`` on the task of the ``train_task`` setting
        (``"bigram-backcopy"``, where a sink grows; ``"text"`` for the corpus).
    experiments : sequence of str
        A subset of :data:`attncoda.run.units.EXPERIMENTS`.
    scale : str
        ``"demo"`` or ``"full"`` (:data:`SCALES`); ``settings`` overrides single settings.
    text, sink, seed
        The corpus (default: the embedded one), the sink spec and the seed of every
        experiment.
    device, dtype, method
        Where the models run (``cpu``, ``cuda``, ``auto``), their parameter dtype and the
        capture method (:func:`run_config`).
    progress : bool
        Print one line per unit and an overall progress bar (on stderr).
    report : bool
        Render ``out/report.html`` at the end.

    Returns
    -------
    ReproduceResult
    """
    config, store, units, todo = open_run(
        models,
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
    with writing(store, "reproduce"):
        _run_in_process(units, config, root, store, progress)
        path = finalise(store, units, report=report)
    if progress:
        print(f"reproduce: {len(todo)} units run, {skipped} already finished", file=sys.stderr)
    return ReproduceResult(out=root, report=path, units=units, ran=len(todo), skipped=skipped)


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


def _run_in_process(
    units: list[Unit], config: dict[str, Any], root: Path, store: RunStore, progress: bool
) -> None:
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(units), desc="reproduce", unit="unit", file=sys.stderr)
    try:
        for index, unit in enumerate(units, 1):
            head = f"[{index:>{len(str(len(units)))}}/{len(units)}] {unit.key}"
            if store.is_done(unit):
                _say(bar, f"{head}: finished earlier, skipped")
            else:
                damage = store.damage(unit) if (store.unit_dir(unit) / DONE).is_file() else None
                if damage:
                    _say(bar, f"{head}: its files do not match _done.json ({damage}), redone")
                if bar is not None:
                    bar.set_postfix_str(unit.key)
                start = time.perf_counter()
                try:
                    facts = run_unit(unit, config, root)
                except AttncodaError as exc:
                    raise AttncodaError(f"unit {unit.key} failed: {exc}") from exc
                note = f" ({facts['note']})" if facts.get("note") else ""
                _say(bar, f"{head}: {facts['status']} in {time.perf_counter() - start:.1f} s{note}")
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()


def _say(bar: Any, line: str) -> None:
    if bar is None:
        return
    bar.write(line, file=sys.stderr)


def finalise(
    store: RunStore,
    units: list[Unit],
    *,
    report: bool = True,
    failed: Mapping[str, str] | None = None,
) -> Path | None:
    """Union the partitions into ``DIR/tables``, assemble collapse, write the unit list and
    the model facts, and render the report.

    Every unit must be finished, except those in ``failed`` (``{unit.key: error}``, from a
    sweep): they are left out of the tables and listed in ``units`` with status
    ``"failed"`` and their error. Collapse is assembled only when every checkpoint finished.
    """
    import pandas as pd

    failed = dict(failed or {})
    missing = [u.key for u in units if not store.is_done(u) and u.key not in failed]
    if missing:
        raise AttncodaError(
            f"{len(missing)} unit(s) of {str(store.root)!r} are not finished ({missing[0]}, "
            "...): run the same command again to finish them"
        )
    done = [u for u in units if u.key not in failed]
    for name in UNIT_TABLES:
        store.write_union(name, done)
    series = store.config.get("series")
    if series and not any(u.experiment in ("train", "collapse") for u in units if u not in done):
        _assemble_collapse(store, units, series)
    records = []
    facts_by_unit = {}
    for unit in units:
        if unit.key in failed:
            facts = {"status": "failed", "note": failed[unit.key]}
        else:
            facts = store.facts(unit)
        facts_by_unit[unit.key] = facts.get("model_info")
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
    infos = {k: v for k, v in facts_by_unit.items() if v}
    models: dict[str, Any] = {}
    for key, info in infos.items():
        models.setdefault(key.split("/", 1)[1], info)
    store.update_manifest(model_info=models)
    if not report:
        return None
    from attncoda.report.html import render_report

    return render_report(store.root)


def _assemble_collapse(store: RunStore, units: list[Unit], series: Mapping[str, Any]) -> None:
    from attncoda.experiments.collapse import collapse_from_stats, stats_from_frames
    from attncoda.models.series import SeriesPoint
    from attncoda.run.units import resolve, series_windows

    points = [
        SeriesPoint(step=int(s), label=label, spec=resolve(store.root, spec))
        for s, label, spec in series["points"]
    ]
    by_label = {u.revision: u for u in units if u.experiment == "collapse"}

    def stats():
        for point in points:
            unit = by_label[point.label]
            yield stats_from_frames(
                point.step,
                point.label,
                store.partition(unit, "collapse_rows"),
                store.partition(unit, "collapse_sinks"),
            )

    windows = series_windows(store.config, store.root)
    result = collapse_from_stats(
        stats(),
        windows,
        points=points,
        model=series["name"],
        sink=store.config["sink"],
    )
    for name, frame in (("collapse", result.table), ("collapse_checkpoints", result.checkpoints)):
        frame = frame.copy()
        frame.insert(1, "revision", NO_REVISION)
        store.write_table(name, frame)


__all__ = [
    "DEMO_MODELS",
    "SCALES",
    "UNIT_TABLES",
    "ReproduceResult",
    "finalise",
    "plan",
    "reproduce",
    "run_config",
]
