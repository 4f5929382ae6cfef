"""The plan of a run: its units ``(experiment, model, revision)`` and what each waits for.

Units come from the run config (:mod:`attncoda.run.config`): every per-model experiment
on every model, in the order of :data:`attncoda.experiments.contract.EXPERIMENTS`; then,
for collapse, the unit that trains the default series, one unit per checkpoint, and the
experiments of :data:`SERIES_ENDS` on the first and last checkpoint and on the last
checkpoint of each run the predictor never saw (the series config's ``unseen``, trained by
the train unit). There is one unit per ``(experiment, model, revision)``: a checkpoint that
is also among the models (``--models bigram-backcopy@step2000``) is planned once, where it
is first named. A unit waits for

- the units of the experiments its own runs after (``Experiment.after``), same model and
  revision, when they are planned (one that is not is computed where the unit runs);
- the train unit, when it reads a checkpoint the run trains (a spec ``run:<path>``).

The order of :attr:`Plan.units` puts every unit after those it waits for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from attncoda._errors import AttncodaError
from attncoda.experiments.contract import experiment
from attncoda.models.series import SeriesPoint
from attncoda.models.spec import parse_spec
from attncoda.run.config import RunConfig
from attncoda.run.series import RUN_PREFIX
from attncoda.store.runs import NO_REVISION, Unit

__all__ = [
    "SERIES_ENDS",
    "TRAIN",
    "TRAIN_TABLES",
    "Plan",
    "model_revision",
    "plan",
    "reads_series",
    "resolve",
    "series_point",
    "unit_cost",
]

#: The unit that trains the run's default checkpoint series (it is no experiment: its
#: tables are the training curves).
TRAIN = "train"
#: The tables of the train unit.
TRAIN_TABLES = ("train", "train_heads")
#: Experiments a run also applies to the first and last checkpoint of its series: the
#: frozen predictor before and after a sink grows.
SERIES_ENDS = ("predictor",)


def unit_cost(unit: Unit) -> float:
    """How long ``unit`` is expected to take, for the order in which executors start units
    (longest first): the train unit (minutes of one core) before any other, else its
    experiment's :attr:`~attncoda.experiments.contract.Experiment.cost`."""
    return math.inf if unit.experiment == TRAIN else float(experiment(unit.experiment).cost)


@dataclass(frozen=True)
class Plan:
    """The units of a run and the units each one waits for.

    Attributes
    ----------
    units : tuple of Unit
        Every unit, each after the units it waits for.
    after : mapping of Unit to tuple of Unit
        The planned units each unit waits for (empty for most).
    """

    units: tuple[Unit, ...]
    after: Mapping[Unit, tuple[Unit, ...]]

    def waits_for(self, unit: Unit) -> tuple[Unit, ...]:
        """The units ``unit`` waits for."""
        return self.after.get(unit, ())

    def awaited(self) -> set[Unit]:
        """The units some other unit waits for."""
        return {u for deps in self.after.values() for u in deps}


def model_revision(spec: str, config: RunConfig) -> tuple[str, str]:
    """The ``(model, revision)`` of a unit of model ``spec`` (a given attention file is named
    by its file name and has no revision)."""
    if config.attentions is not None:
        return spec, NO_REVISION
    parsed = parse_spec(spec)
    return parsed.name, parsed.label


def resolve(root: str | Path, spec: str) -> str:
    """A series checkpoint spec; ``run:<path>`` is relative to the run folder ``root``."""
    return str(Path(root) / spec[len(RUN_PREFIX) :]) if spec.startswith(RUN_PREFIX) else spec


def _points(config: RunConfig, model: str) -> list[SeriesPoint]:
    """The checkpoints named ``model`` (specs as recorded): the series' points, or the last
    checkpoint of a run of the series' ``unseen``."""
    series = config.series
    if series is None:
        return []
    if model == series.name:
        return list(series.points)
    return [
        SeriesPoint(run.step, f"step{run.step}", run.spec)
        for run in series.unseen or ()
        if run.name == model
    ]


def series_point(
    config: RunConfig, root: str | Path, label: str, model: str | None = None
) -> SeriesPoint:
    """The checkpoint ``label`` of the run's series (or of the unseen run ``model``), its
    spec resolved under ``root``."""
    name = config.series.name if config.series is not None else ""
    for point in _points(config, model or name):
        if point.label == label:
            return replace(point, spec=resolve(root, point.spec))
    raise AttncodaError(f"the run's series has no checkpoint {label!r}")


def reads_series(unit: Unit, config: RunConfig) -> bool:
    """Whether ``unit`` reads a checkpoint of the run's series (or of an unseen run)."""
    return unit.revision != NO_REVISION and bool(_points(config, unit.model))


def _reads_trained(unit: Unit, config: RunConfig) -> bool:
    if not reads_series(unit, config):
        return False
    specs = {p.label: p.spec for p in _points(config, unit.model)}
    return specs.get(unit.revision, "").startswith(RUN_PREFIX)


def plan(config: RunConfig) -> Plan:
    """Every unit of the run of ``config``, and what each waits for."""
    names = config.experiments
    per_checkpoint = [e for e in names if "checkpoint" in experiment(e).needs]
    per_model = [e for e in names if e not in per_checkpoint]
    units: list[Unit] = []
    for spec in config.models:
        model, revision = model_revision(spec, config)
        units += [Unit(e, model, revision) for e in per_model]
    series = config.series
    if series is not None:
        labels = [p.label for p in series.points]
        if series.spec is None:
            units.append(Unit(TRAIN, series.name, NO_REVISION))
        for name in per_checkpoint:
            units += [Unit(name, series.name, label) for label in labels]
        ends = {labels[0], labels[-1]}
        for name in (e for e in SERIES_ENDS if e in per_model):
            units += [Unit(name, series.name, label) for label in labels if label in ends]
            units += [Unit(name, run.name, f"step{run.step}") for run in series.unseen or ()]
    # A model named twice (in the models, as a series point, among the unseen runs) is one
    # unit per experiment, where it is first named.
    units = list(dict.fromkeys(units))
    planned = set(units)
    train = next((u for u in units if u.experiment == TRAIN), None)
    after: dict[Unit, tuple[Unit, ...]] = {}
    for unit in units:
        if unit.experiment == TRAIN:
            continue
        deps = [Unit(name, unit.model, unit.revision) for name in experiment(unit.experiment).after]
        deps = [d for d in deps if d in planned]
        if train is not None and _reads_trained(unit, config):
            deps.insert(0, train)
        if deps:
            after[unit] = tuple(deps)
    order = {u: i for i, u in enumerate(units)}
    for unit, awaited in after.items():
        late = [d for d in awaited if order[d] > order[unit]]
        if late:  # EXPERIMENTS lists each experiment after those it runs after
            raise AttncodaError(f"unit {unit.key} is planned before {late[0].key}, which it reads")
    return Plan(units=tuple(units), after=after)
