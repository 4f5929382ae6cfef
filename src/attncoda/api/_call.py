"""How an experiment function runs: on model specs, live models and captures, all through
the one runner in this process (docs/design.md, "Runs"); live models and captures are lent
to its :class:`~attncoda.run.loaded.Loaded` (:meth:`~attncoda.run.loaded.Loaded.lend`) under
their labels, one per call."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.api._result import Result
from attncoda.api._signatures import COMMON_OPTIONS, check_common, rows_settings
from attncoda.api._sources import capture_names, sources
from attncoda.run.loaded import Loaded

if TYPE_CHECKING:
    from attncoda.capture.options import CaptureOptions

__all__ = ["call", "run_function"]


def _on_specs(
    name: str,
    specs: Sequence[str],
    groups: Mapping[str, Any],
    options: CaptureOptions,
    common: Mapping[str, Any],
    kept: Loaded | None = None,
) -> Result:
    """Run ``name`` on model specs through the runner into ``common["out"]`` (or a temporary
    folder) with the settings ``groups`` (``{group: values}``), ``options``, the corpus
    ``common["text"]`` and what the runner is lent (``kept``), and read its tables back."""
    from attncoda.experiments.contract import experiment
    from attncoda.run.reproduce import run_experiment
    from attncoda.store.runs import read_run_tables

    exp = experiment(name)
    own = exp.combined or exp.tables
    series = specs[0] if exp.combine is not None else None
    if series is not None and len(specs) != 1:
        raise AttncodaError(
            f"{name} reads one checkpoint series, got {len(specs)} specs: pass one series "
            "spec (owner/name@step0,step512 or a folder of stepN checkpoints)"
        )

    sink, out = options.sink, common.get("out")

    def run(folder: Path) -> Result:
        ran = run_experiment(
            name,
            [] if series is not None else list(specs),
            folder,
            settings=groups,
            series=series,
            progress=False,
            text=common.get("text"),
            options=options,
            kept=kept,
        )
        stored = read_run_tables(folder)
        tables = {t: stored[t] for t in own if t in stored}
        if not tables:
            units = stored["units"]
            notes = "; ".join(str(n) for n in units[units["experiment"] == name]["note"] if n)
            raise AttncodaError(f"{name} wrote no table: {notes or 'every unit was skipped'}")
        summary = _summaries(folder, name, series, stored["units"])
        where = None if out is None else Path(out)
        return Result(name, tables, summary, where, sink, dict(ran.failed))

    if out is None:
        with tempfile.TemporaryDirectory(prefix="attncoda-") as folder:
            return run(Path(folder) / "run")
    return run(Path(out))


def _summaries(
    folder: Path, name: str, series: str | None, units: Any
) -> dict[str, dict[str, Any]]:
    """Each model's summary of ``name`` in the run folder (``units``: its ``units`` table):
    its units' facts, or for a series experiment the combined summary the manifest keeps
    (as ``"series"``)."""
    from attncoda.store import read_json
    from attncoda.store.manifest import MANIFEST
    from attncoda.store.runs import DONE, NO_REVISION, Unit

    if series is not None:
        combined = read_json(folder / MANIFEST).get("combined", {})
        return {"series": dict(combined.get(name, {}))}
    done = units[(units["experiment"] == name) & (units["status"] == "done")]
    out: dict[str, dict[str, Any]] = {}
    for model, revision in zip(done["model"], done["revision"], strict=True):
        unit = Unit(name, str(model), str(revision))
        facts = read_json(folder / "units" / unit.folder / DONE).get("facts", {})
        label = str(model) if revision == NO_REVISION else f"{model}@{revision}"
        out[label] = dict(facts.get("summary", {}))
    return out


def call(
    name: str,
    source: Any,
    settings: Mapping[str, Any],
    common: Mapping[str, Any],
    rows: Mapping[str, Any] | None = None,
) -> Result:
    """Run experiment ``name`` on ``source`` with its ``settings``, the common options and,
    for an experiment that reads rows, the ``rows`` windows (``docs``, ``max_tokens``)."""
    from attncoda.experiments.contract import experiment, settings_dict, settings_from
    from attncoda.run.config import Rows

    exp = experiment(name)
    chosen = settings_from(exp.settings, settings)  # every value checked: nothing loaded yet
    windows = None if rows is None else settings_dict(settings_from(Rows, rows))
    groups = {name: settings_dict(chosen), **({"rows": windows} if windows else {})}
    options = check_common(common)  # the CaptureOptions, built once
    if common.get("steps") is not None and exp.combine is None:
        raise AttncodaError(
            f"steps= is for an experiment over a checkpoint series' captures, not for {name}"
        )
    items, kind = sources(source)
    if kind == "live":
        return _on_live(name, items, groups, common, options)
    if kind == "capture":
        if windows is not None and windows != settings_dict(Rows()):
            raise AttncodaError(
                f"docs= and max_tokens= say which windows of a model spec {name} reads: a "
                "capture holds its own rows; capture other windows instead"
            )
        return _on_captures(name, items, {name: groups[name]}, common, options)
    if common.get("steps") is not None or common.get("names") is not None:
        raise AttncodaError(
            "steps= and names= are for captures: a run names its models by their specs and "
            "reads a series' steps from its spec"
        )
    return _on_specs(name, [str(s) for s in items], groups, options, common)


def _on_live(
    name: str,
    items: Sequence[Any],
    groups: Mapping[str, Any],
    common: Mapping[str, Any],
    options: CaptureOptions,
) -> Result:
    """Run ``name`` on live models through the runner with ``options``, as on specs (the
    runner is lent them: :meth:`Loaded.lend <attncoda.run.loaded.Loaded.lend>`)."""
    from attncoda.api._sources import live_entries

    entries = live_entries(items, common.get("names"), name)
    defaults = {f.name: f.default for f in dataclasses.fields(options)}
    for option in ("device", "dtype", "device_map"):
        if getattr(options, option) != defaults[option]:
            raise AttncodaError(
                f"{option}={getattr(options, option)!r} is for model specs: a live model runs "
                "where and in the dtype it is"
            )
    with Loaded().lend(entries) as kept:
        return _on_specs(name, list(entries), groups, options, common, kept)


def _on_captures(
    name: str,
    captures: Sequence[Any],
    groups: Mapping[str, Any],
    common: Mapping[str, Any],
    options: CaptureOptions,
) -> Result:
    """Run ``name`` on captures through the runner, as on specs: each capture is lent to
    it under its label (a series experiment's as the checkpoints of one series, at
    ``steps``) and read as attention handed in."""
    from attncoda.experiments.contract import experiment
    from attncoda.run.captured import handed_in

    exp = experiment(name)
    model_free = not {"model", "windows"} & set(exp.needs)
    if not model_free and exp.given is None:
        raise AttncodaError(
            f"{name} needs the model itself, which a capture does not hold: pass a model "
            "spec instead"
        )
    given = common.get("names")
    if exp.combine is None:
        labels = capture_names(captures, given)
        entries = {label: handed_in(c, label) for label, c in zip(labels, captures, strict=True)}
        with Loaded().lend(entries) as kept:
            return _on_specs(name, labels, groups, options, {**common, "text": None}, kept)
    # One series: one name for every checkpoint's capture, a step for each.
    if given is not None and not isinstance(given, str):
        raise AttncodaError(f"names={given!r}: give the series one name (a str)")
    series = given or "series"
    steps = common.get("steps")
    steps = list(range(len(captures))) if steps is None else list(steps)
    if len(steps) != len(captures):
        raise AttncodaError(
            f"steps {steps!r} must give one training step per capture ({len(captures)} "
            "captures)"
        )
    labels = [f"{series}@step{int(s)}" for s in steps]
    entries = {label: handed_in(c, label) for label, c in zip(labels, captures, strict=True)}
    points = [(int(s), label) for s, label in zip(steps, labels, strict=True)]
    with Loaded().lend(entries, {series: points}) as kept:
        return _on_specs(name, [series], groups, options, {**common, "text": None}, kept)


def run_function(name: str, values: Mapping[str, Any]) -> Result:
    """Call ``name`` with an API function's parameters ``values`` (its ``locals()``)."""
    values = dict(values)
    source = values.pop("source")
    common = {k: values.pop(k, None) for k in COMMON_OPTIONS if k != "source"}
    group = rows_settings(name)
    rows = {f.name: values.pop(f.name) for f in dataclasses.fields(group)} if group else None
    return call(name, source, values, common, rows)
