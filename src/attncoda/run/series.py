"""The checkpoint series of a run's collapse (docs/design.md, "Runs"): the one given, the
shipped Bigram-Backcopy checkpoints by default (:mod:`attncoda.models.shipped`), or a
``train-tiny`` series the run trains (:class:`TrainSeries` with ``retrain``); and the
Bigram-Backcopy runs the predictor never saw, to whose last checkpoints a run applies it
(:class:`UnseenRun`). A run config holds them (:mod:`attncoda.run.config`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.models.series import SeriesPoint
from attncoda.models.spec import parse_spec
from attncoda.run.loaded import Loaded

__all__ = [
    "RUN_PREFIX",
    "SERIES_FOLDER",
    "UNSEEN_FOLDER",
    "Series",
    "TrainSeries",
    "UnseenRun",
    "series_of",
]

#: A series point's spec under the run folder (a checkpoint the run trains).
RUN_PREFIX = "run:"
#: Where a run trains its default series, under the run folder.
SERIES_FOLDER = Path("series") / "train-tiny"
#: Where a run trains the unseen runs, under the run folder.
UNSEEN_FOLDER = Path("series") / "unseen"


@dataclass(frozen=True)
class TrainSeries:
    """The collapse series of a run when none is given: the shipped Bigram-Backcopy
    checkpoints (:mod:`attncoda.models.shipped`), or, with ``retrain``, a ``train-tiny``
    series trained on this machine. The other fields apply to a retrained series; ``None``:
    the task's own default (``attncoda.training.train.TASK_DEFAULTS``)."""

    retrain: bool = field(
        default=False,
        metadata={
            "help": "train the series and the unseen runs on this machine instead of reading "
            "the shipped checkpoints, and report what that changed (minutes of one core)"
        },
    )
    task: str = field(
        default="bigram-backcopy",
        metadata={"help": "bigram-backcopy (a sink grows) or text (the corpus; none grows)"},
    )
    size: str | None = None
    steps: int | None = None
    window: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    unseen: bool = field(
        default=True,
        metadata={
            "help": "apply the predictor to the Bigram-Backcopy runs it never saw "
            "(attncoda.models.shipped.UNSEEN)"
        },
    )


@dataclass(frozen=True)
class UnseenRun:
    """A Bigram-Backcopy run the predictor never saw, to whose last checkpoint a run applies
    it: its ``name``, last ``step``, the ``spec`` of that checkpoint (shipped, or ``run:...``
    under the run folder when the run trains it) and its ``recipe``
    (:class:`attncoda.training.train.TrainConfig` fields)."""

    name: str
    step: int
    spec: str
    recipe: Mapping[str, Any]


@dataclass(frozen=True)
class Series:
    """The checkpoint series of collapse.

    Attributes
    ----------
    name : str
        The series' name: the tables name its checkpoints by it (``train-tiny`` for one the
        run trains).
    spec : str or None
        The series as given (``None``: the run trains it).
    points : tuple of SeriesPoint
        Its checkpoints in step order; a spec ``run:<path>`` is relative to the run folder.
    task : str or None
        The task of a series the run trains, else None.
    unseen : tuple of UnseenRun or None
        The runs the predictor never saw, for the shipped or a retrained Bigram-Backcopy
        series (empty when the run does not apply the predictor); None for another series.
    """

    name: str
    spec: str | None
    points: tuple[SeriesPoint, ...]
    task: str | None = None
    unseen: tuple[UnseenRun, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The series as the manifest records it."""
        return {
            "name": self.name,
            "spec": self.spec,
            **({"task": self.task} if self.task is not None else {}),
            "points": [[p.step, p.label, p.spec] for p in self.points],
            **(
                {"unseen": [[u.name, u.step, u.spec, dict(u.recipe)] for u in self.unseen]}
                if self.unseen is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> Series:
        """The series a manifest records (:meth:`to_json`)."""
        unseen = stored.get("unseen")
        return cls(
            name=stored["name"],
            spec=stored["spec"],
            points=tuple(SeriesPoint(*p) for p in stored["points"]),
            task=stored.get("task"),
            unseen=None if unseen is None else tuple(UnseenRun(*u) for u in unseen),
        )


def series_of(
    series: str | None, wanted: TrainSeries, experiments: Sequence[str], lent: Loaded
) -> tuple[TrainSeries | None, Series | None]:
    """The series a run of ``experiments`` trains (``wanted``, when it retrains) and the
    checkpoint series of its collapse (None without collapse): ``series`` as given (a series
    of captures ``lent`` to the run's runner, or checkpoints), else the one it trains, else
    the shipped one; the unseen runs join it when the run applies the predictor to the
    shipped or a retrained Bigram-Backcopy series.

    Raises
    ------
    AttncodaError
        Train settings that would be ignored, an unknown train task, or a bad series.
    """
    from attncoda.models.shipped import SERIES

    _check_retrain(wanted, series)
    if "collapse" not in experiments:
        return None, None
    trains = series is None and wanted.retrain
    series = SERIES if series is None and not trains else series
    unseen = "predictor" in experiments and wanted.unseen and (trains or series == SERIES)
    train = wanted if trains else None
    return train, _series(series, train, lent, unseen=unseen)


def _check_retrain(wanted: TrainSeries, series: str | None) -> None:
    """Refuse train settings that would be ignored: they shape a series the run trains."""
    if wanted.retrain and series is not None:
        raise AttncodaError(
            f"retrain trains the default series, but the series {series!r} is given: drop "
            "--series to retrain, or drop --retrain to read the series given"
        )
    if wanted.retrain:
        return
    defaults = TrainSeries()
    for f in dataclasses.fields(TrainSeries):
        if f.name not in ("retrain", "unseen") and getattr(wanted, f.name) != getattr(
            defaults, f.name
        ):
            raise AttncodaError(
                f"train setting {f.name}={getattr(wanted, f.name)!r} shapes a series the run "
                "trains: add --retrain (retrain=True) to train one, or leave it out to read "
                "the shipped checkpoints"
            )


def _unseen_runs(steps: int | None) -> tuple[UnseenRun, ...]:
    """The runs of :data:`attncoda.models.shipped.UNSEEN`, as a series lists them.

    Parameters
    ----------
    steps : int or None
        None: the shipped checkpoints (spec ``name@stepN``). Otherwise the steps of a series
        the run trains: each unseen run is trained under the run folder (spec ``run:...``)
        for at most that many steps, so a short run stays short.
    """
    from attncoda.models.shipped import UNSEEN

    runs = []
    for name, fields in UNSEEN.items():
        if steps is None:
            recipe = dict(fields)
            spec = f"{name}@step{recipe['steps']}"
        else:
            recipe = {**fields, "steps": min(fields["steps"], steps)}
            spec = f"{RUN_PREFIX}{(UNSEEN_FOLDER / name).as_posix()}/step{recipe['steps']}"
        runs.append(UnseenRun(name, recipe["steps"], spec, recipe))
    return tuple(runs)


def _series(
    series: str | None, train: TrainSeries | None, lent: Loaded, *, unseen: bool = False
) -> Series:
    """The series of collapse: one the run trains (``series`` None, ``train`` its settings),
    a series of captures ``lent`` to the runner, or the checkpoints ``series`` names."""
    if series is None:
        from attncoda.data.tasks import TASKS
        from attncoda.training.train import TASK_DEFAULTS, checkpoint_steps

        assert train is not None
        task = train.task
        if task not in TASKS:
            raise AttncodaError(f"unknown train task {task!r}: use one of {', '.join(TASKS)}")
        n_steps = int(train.steps or TASK_DEFAULTS[task]["steps"])
        folder = f"{RUN_PREFIX}{SERIES_FOLDER.as_posix()}"
        return Series(
            name="train-tiny",
            spec=None,
            task=task,
            points=tuple(
                SeriesPoint(s, f"step{s}", f"{folder}/step{s}") for s in checkpoint_steps(n_steps)
            ),
            # models the predictor never saw, trained beside the series (run/train.py)
            unseen=(
                _unseen_runs(n_steps)
                if unseen and train.unseen and task == "bigram-backcopy"
                else ()
            ),
        )
    handed = lent.lent_series(series)
    if handed is not None:  # captures of a series, handed in (Loaded.lend)
        return Series(
            name=series,
            spec=series,
            points=tuple(SeriesPoint(step, f"step{step}", label) for step, label in handed),
        )
    from attncoda.models.series import parse_series
    from attncoda.models.shipped import SERIES

    points = tuple(parse_series(series))
    first = parse_spec(points[0].spec)
    shipped = series == SERIES
    return Series(
        name=first.name if first.revision is not None else Path(series).name,
        spec=series,
        points=points,
        unseen=(_unseen_runs(None) if unseen else ()) if shipped else None,
    )
