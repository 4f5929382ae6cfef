"""How an experiment function runs: on model specs and live models through the runner, on
captures in this process (docs/design.md, "Runs")."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attncoda._errors import AttncodaError
from attncoda.api._result import GIVEN_FAMILY, Result
from attncoda.api._signatures import COMMON_OPTIONS, check_common, rows_settings
from attncoda.api._sources import capture_names, sources

if TYPE_CHECKING:
    import pandas as pd

    from attncoda.run.options import CaptureOptions

__all__ = ["call", "run_function"]


def _concat(
    units: Sequence[tuple[Mapping[str, pd.DataFrame], str, str]], family: str
) -> dict[str, Any]:
    """The tables of ``(frames, model, revision)`` units as a run stores them: ``model``,
    ``revision`` and ``family`` first, the units' rows in order."""
    import pandas as pd

    out: dict[str, Any] = {}
    for name in dict.fromkeys(n for frames, _, _ in units for n in frames):
        parts = []
        for frames, model, revision in units:
            if name not in frames:
                continue
            frame = frames[name].drop(
                columns=[c for c in ("model", "revision", "family") if c in frames[name]]
            )
            frame.insert(0, "family", family)
            frame.insert(0, "revision", revision)
            frame.insert(0, "model", model)
            parts.append(frame)
        out[name] = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out


def _on_captures(
    name: str,
    captures: Sequence[Any],
    names: Sequence[str],
    settings: Any,
    *,
    sink: str,
    seed: int,
    device: str,
    steps: Sequence[int] | None = None,
) -> Result:
    from attncoda.experiments.contract import Inputs, experiment, head_rows
    from attncoda.models.spec import NO_REVISION

    exp = experiment(name)
    model_free = not {"model", "windows"} & set(exp.needs)
    if not model_free and exp.given is None:
        raise AttncodaError(
            f"{name} needs the model itself, which a capture does not hold: pass a model "
            "spec instead"
        )
    needs = set(exp.needs if model_free else exp.given or ())
    for dep in exp.after:
        needs.update(experiment(dep).needs)

    def inputs_for(cap: Any, label: str, **extra: Any) -> Any:
        return Inputs(
            model=label,
            seed=seed,
            sink=sink,
            device=device,
            rows=head_rows(cap, label) if "rows" in needs else None,
            capture=cap if "capture" in needs else None,
            **extra,
        )

    def with_after(base: Any, target: Any) -> Any:
        """``base`` with the tables of ``target``'s ``after`` experiments (their defaults)."""
        from dataclasses import replace

        after = {}
        for dep in target.after:
            dep_exp = experiment(dep)
            after[dep] = dep_exp.run(with_after(base, dep_exp), dep_exp.settings())
        return replace(base, after=after)

    if exp.combine is not None:
        from attncoda.models.series import SeriesPoint

        if steps is None:
            steps = list(range(len(captures)))
        if len(steps) != len(captures):
            raise AttncodaError(
                f"steps {list(steps)!r} must give one training step per capture "
                f"({len(captures)} captures)"
            )
        series_name = names[0]
        units = [
            exp.run(
                inputs_for(
                    cap,
                    series_name,
                    checkpoint=SeriesPoint(step=int(s), label=f"step{int(s)}", spec=label),
                    revision=f"step{int(s)}",
                ),
                settings,
            )
            for cap, label, s in zip(captures, names, steps, strict=True)
        ]
        combined = exp.combine(units, settings)
        series = _concat([(combined.frames, series_name, NO_REVISION)], GIVEN_FAMILY)
        return Result(name, series, {"series": dict(combined.summary)}, None, sink)

    frames: list[tuple[Mapping[str, Any], str, str]] = []
    summary: dict[str, dict[str, Any]] = {}
    for cap, label in zip(captures, names, strict=True):
        tables = exp.run(with_after(inputs_for(cap, label), exp), settings)
        frames.append((tables.frames, label, NO_REVISION))
        summary[label] = dict(tables.summary)
    return Result(name, _concat(frames, GIVEN_FAMILY), summary, None, sink)


def _on_specs(
    name: str,
    specs: Sequence[str],
    settings: Any,
    *,
    out: str | Path | None,
    text: str | None,
    options: CaptureOptions,
    rows: Mapping[str, Any] | None = None,
) -> Result:
    """Run ``name`` on model specs through the runner into ``out`` (or a temporary folder),
    with ``options``, and read its tables back."""
    from attncoda.experiments.contract import experiment, settings_dict
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

    sink = options.sink

    def run(folder: Path) -> Result:
        run_experiment(
            name,
            [] if series is not None else list(specs),
            folder,
            settings={name: settings_dict(settings), **({"rows": dict(rows)} if rows else {})},
            series=series,
            progress=False,
            text=text,
            options=options,
        )
        stored = read_run_tables(folder)
        tables = {t: stored[t] for t in own if t in stored}
        if not tables:
            units = stored["units"]
            notes = "; ".join(str(n) for n in units[units["experiment"] == name]["note"] if n)
            raise AttncodaError(f"{name} wrote no table: {notes or 'every unit was skipped'}")
        return Result(name, tables, {}, None if out is None else Path(out), sink)

    if out is None:
        with tempfile.TemporaryDirectory(prefix="attncoda-") as folder:
            return run(Path(folder) / "run")
    return run(Path(out))


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
    options = check_common(common)  # the CaptureOptions, built once
    if common.get("steps") is not None and exp.combine is None:
        raise AttncodaError(
            f"steps= is for an experiment over a checkpoint series' captures, not for {name}"
        )
    items, kind = sources(source)
    sink, seed, device = options.sink, options.seed, options.device
    if kind == "live":
        return _on_live(name, items, chosen, common, options, windows)
    if kind == "capture":
        if windows is not None and windows != settings_dict(Rows()):
            raise AttncodaError(
                f"docs= and max_tokens= say which windows of a model spec {name} reads: a "
                "capture holds its own rows; capture other windows instead"
            )
        given = common.get("names")
        if exp.combine is not None:  # one series: one name for every checkpoint's capture
            if given is not None and not isinstance(given, str):
                raise AttncodaError(f"names={given!r}: give the series one name (a str)")
            labels = [given or "series"] * len(items)
        else:
            labels = capture_names(items, given)
        return _on_captures(
            name,
            items,
            labels,
            chosen,
            sink=sink,
            seed=seed,
            device=device,
            steps=common.get("steps"),
        )
    if common.get("steps") is not None or common.get("names") is not None:
        raise AttncodaError(
            "steps= and names= are for captures: a run names its models by their specs and "
            "reads a series' steps from its spec"
        )
    specs = [str(s) for s in items]
    return _on_specs(
        name,
        specs,
        chosen,
        out=common.get("out"),
        text=common.get("text"),
        options=options,
        rows=windows,
    )


def _on_live(
    name: str,
    items: Sequence[Any],
    settings: Any,
    common: Mapping[str, Any],
    options: CaptureOptions,
    rows: Mapping[str, Any] | None = None,
) -> Result:
    """Run ``name`` on live models through the runner with ``options``, as on specs (the
    runner is lent them: :func:`attncoda.run.provide.lend`)."""
    from attncoda.api._sources import live_entries
    from attncoda.run.provide import lend

    entries = live_entries(items, common.get("names"), name)
    for option, default in (("device", "cpu"), ("dtype", None), ("device_map", None)):
        if getattr(options, option) != default:
            raise AttncodaError(
                f"{option}={getattr(options, option)!r} is for model specs: a live model runs "
                "where and in the dtype it is"
            )
    with lend(entries):
        return _on_specs(
            name,
            list(entries),
            settings,
            out=common.get("out"),
            text=common.get("text"),
            options=options,
            rows=rows,
        )


def run_function(name: str, values: Mapping[str, Any]) -> Result:
    """Call ``name`` with an API function's parameters ``values`` (its ``locals()``)."""
    import dataclasses

    values = dict(values)
    source = values.pop("source")
    common = {k: values.pop(k, None) for k in COMMON_OPTIONS if k != "source"}
    group = rows_settings(name)
    rows = {f.name: values.pop(f.name) for f in dataclasses.fields(group)} if group else None
    return call(name, source, values, common, rows)
