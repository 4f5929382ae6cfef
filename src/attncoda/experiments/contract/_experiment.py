"""The one contract every experiment keeps (docs/design.md, "The experiment contract").

An experiment module declares one :class:`Experiment`:

- ``name``: the unit name of a run (``"flips"``);
- ``needs``: the inputs the runner must provide (:data:`NEEDS` lists them);
- ``after``: the experiments whose tables it reads, of the same model and revision;
- ``settings``: a frozen dataclass whose defaults are the only defaults, each field made by
  :func:`attncoda.experiments.contract.setting` with its help and the values it allows (the
  API's signatures and the CLI's options are built from its fields, a run config stores it
  with :func:`settings_dict`);
- ``run(inputs, settings) -> Tables``: the computation. It loads nothing, captures nothing
  (the runner makes its captures, with the run's options), writes nothing and keeps no
  state: the same inputs and settings give the same tables;
- ``tables``: the names of the tables ``run`` returns, in order;
- ``held``: how the columns of those tables are held when two runs are compared, where a
  column's type does not say it (:mod:`attncoda.experiments.contract._held`);
- ``combine``: for an experiment over a checkpoint series (collapse), how the tables of all
  its units become the run's tables (``None`` for the others);
- ``view``: how the report and a result object show it (:class:`View`): its section's title
  and builder, the tables the section needs, and its figure with the tables it is drawn
  from. The report iterates :data:`EXPERIMENTS` and names no experiment itself;
- ``command``: how ``attncoda <name>`` takes its sources and what it prints
  (:class:`Command`). The command line builds one subcommand per experiment from it.

The runner (:mod:`attncoda.run`) plans the units, provides :class:`Inputs`, runs the
experiment and stores the :class:`Tables`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from attncoda._errors import AttncodaError
from attncoda.experiments.contract._command import Command, View
from attncoda.experiments.contract._held import Held
from attncoda.experiments.contract._inputs import HeadRows, Reading
from attncoda.experiments.contract._settings import check_settings

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from attncoda.capture import Capture

T = TypeVar("T")

__all__ = [
    "EXPERIMENTS",
    "NEEDS",
    "REGISTRY",
    "RUN_COLUMNS",
    "Experiment",
    "Inputs",
    "Tables",
    "experiment",
    "settings_dict",
    "settings_from",
    "without_run_columns",
]

#: What an experiment may need from the runner:
#:
#: - ``"rows"``: :class:`attncoda.experiments.contract.HeadRows`, the recorded full rows of every
#:   head (one capture shared by every experiment of the model that needs rows);
#: - ``"capture"``: an :class:`attncoda.Capture` of statistics over every row, made by the
#:   runner with the run's options (method, kernel, sink, seed, dtype, device): of the
#:   corpus windows ``(docs, max_tokens)`` of the experiment's settings (profile), or, for an
#:   experiment that also needs ``windows``, of those of its windows that
#:   :attr:`Experiment.captures` picks (prune: its profiling windows; collapse: every window,
#:   at each checkpoint). An experiment never captures itself;
#: - ``"model"``: the loaded ``(model, tokenizer, ModelInfo)`` (prune; :attr:`Inputs.loaded`);
#: - ``"windows"``: token-id windows of the run's corpus, ``(docs, max_tokens)`` from the
#:   experiment's settings fields ``docs`` and ``max_tokens`` (prune, collapse);
#: - ``"checkpoint"``: the series point a collapse unit reads.
NEEDS = ("rows", "capture", "model", "windows", "checkpoint")

#: The registry: every experiment (``attncoda.experiments.<name>`` declares it), in the order
#: a run computes them for one model, with the name of its Python function
#: (``attncoda.<function>``). The runner, the command line, the Python API and the report
#: iterate it; the top-level package reads the function names from it without importing an
#: experiment (the core install has no pandas).
REGISTRY = {
    "profile": "profile",
    "flips": "flips",
    "cluster": "cluster",
    "safety": "safety",
    "predictor": "predict",
    "prune": "prune",
    "collapse": "collapse",
    "sink_rate": "sink_rate",
}

#: Every experiment, in the order a run computes them for one model.
EXPERIMENTS = tuple(REGISTRY)

#: Columns a run adds to an experiment's frames when it stores them (``model`` the frames
#: carry themselves): :func:`without_run_columns` takes them off a stored frame.
RUN_COLUMNS = ("revision", "family")


@dataclass(frozen=True)
class Tables:
    """What an experiment returns: tidy tables, a JSON summary and arrays kept beside them.

    Attributes
    ----------
    frames : dict of str to pandas.DataFrame
        The experiment's tables by name (each a partition of the run's table of that name).
    summary : dict
        JSON-able facts of the unit (headline numbers, notes); stored with the unit. Its
        ``note`` (a str), when there is one, is the unit's note in the run's ``units`` table
        (prune's ks that did not fit the model).
    arrays : dict of str to ndarray
        Arrays a later experiment of the same model reads (flips keeps its pooled head
        distances for safety and predictor); stored beside the unit's tables.
    """

    frames: Mapping[str, pd.DataFrame]
    summary: Mapping[str, Any] = field(default_factory=dict)
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)


class Provided(Generic[T]):
    """An input the runner provides when the experiment needs it (:data:`NEEDS`, by the name
    ``need``): a field of :class:`Inputs` read as a ``T``, ``None`` (its default) where the
    runner gave none; read then, an error names the input and the unit's model."""

    def __init__(self, need: str = "") -> None:
        self.need = need

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.need = name, self.need or name

    def __get__(self, inputs: Inputs | None, owner: type) -> T:
        if inputs is None:
            return cast(T, None)  # the field's default: not provided
        value = inputs.__dict__.get(self.name)
        if value is None:
            raise AttncodaError(f"the runner gave no {self.need!r} input for {inputs.model!r}")
        return value

    def __set__(self, inputs: Inputs, value: T | None) -> None:
        inputs.__dict__[self.name] = value


# An input the runner did not give cannot be read: no repr or comparison reads them all.
@dataclass(frozen=True, repr=False, eq=False)
class Inputs:
    """What the runner provides to one unit. Only the inputs the experiment needs are set.

    Attributes
    ----------
    model : str
        The name the tables carry (a series checkpoint carries its series name).
    revision : str
        The unit's revision (``"-"`` for none; ``"step512"`` for a checkpoint).
    seed : int
        The run's seed.
    sink : str
        The run's sink spec (docs/design.md, "Sinks").
    device : str
        Where tensors of the unit live (``"cpu"`` or ``"cuda"``).
    rows, capture, loaded, windows, checkpoint
        The inputs of :data:`NEEDS` (``loaded`` is ``"model"``), each typed (:class:`Provided`):
        one the runner did not give is an error, naming it, where it is read.
    after : dict of str to Tables
        The tables of the experiments named in ``after``, same model and revision.
    read : Reading or None
        What ``rows`` were read from, when the runner read them from a model: the windows
        of a corpus. ``None`` for attention handed in.
    shared_rows : bool
        Whether ``rows`` are the run's rows, which the ``after`` experiments read too, or
        the experiment's own (:attr:`Experiment.rows_at`).
    given : bool
        Whether the attention was handed in (a file or a capture): the inputs of
        :attr:`Experiment.given` stand in for the model and its windows.
    """

    model: str
    revision: str = "-"
    seed: int = 0
    sink: str = "first"
    device: str = "cpu"
    rows: Provided[HeadRows] = Provided()
    capture: Provided[Capture] = Provided()
    loaded: Provided[tuple[Any, Any, Any]] = Provided("model")
    windows: Provided[Sequence[Any]] = Provided()
    checkpoint: Provided[Any] = Provided()
    after: Mapping[str, Tables] = field(default_factory=dict)
    read: Reading | None = None
    shared_rows: bool = True
    given: bool = False

    def tables_of(self, name: str) -> Tables:
        """The tables of the experiment ``name`` this unit runs after; an error names it."""
        if name not in self.after:
            raise AttncodaError(
                f"the runner gave no {name!r} tables for {self.model!r}: run {name} first"
            )
        return self.after[name]


@dataclass(frozen=True)
class Experiment:
    """One experiment's declaration (see the module docstring)."""

    name: str
    needs: tuple[str, ...]
    after: tuple[str, ...]
    settings: type
    run: Callable[[Inputs, Any], Tables]
    tables: tuple[str, ...]
    combine: Callable[[Sequence[Tables], Any], Tables] | None = None
    #: The run's tables ``combine`` makes from its units' tables (collapse: ``collapse``
    #: and ``collapse_checkpoints``); what a result of the experiment holds.
    combined: tuple[str, ...] = ()
    #: For an experiment that needs a model or windows, the inputs that stand in for them
    #: when the attention is handed in (collapse: one capture per checkpoint); ``None``: it
    #: needs the model itself (prune).
    given: tuple[str, ...] | None = None
    #: For an experiment that needs both ``windows`` and ``capture``: ``captures(windows,
    #: settings)``, the windows of its ``windows`` input the runner captures for it, with
    #: the run's options (prune: its profiling windows; collapse: all of them).
    captures: Callable[[Sequence[Any], Any], Sequence[Any]] | None = None
    #: When set, a reason the experiment does not apply to a model, from its ModelInfo
    #: (prune needs a causal language model); the runner records the unit as skipped.
    skip: Callable[[Any], str | None] | None = None
    #: When set, the windows ``{"docs", "max_tokens"}`` this experiment's ``rows`` are read at,
    #: from its settings, instead of the run's (the predictor reads its fitted protocol's);
    #: ``None`` from it: the run's rows.
    rows_at: Callable[[Any], Mapping[str, int] | None] | None = None
    #: Whether the runner attaches the model's identity (weights hash, ``train-tiny``
    #: recipe) to its ``rows`` (:attr:`HeadRows.identity`): hashed only for the experiments
    #: that need it (the predictor, which recognises its training models by content).
    identifies: bool = False
    #: Seconds one unit takes at the demo scale on SmolLM2 (2-core CPU), as measured: a
    #: hint only, by which the executors start the longest units first, so that no worker is
    #: left with a long unit while the others have nothing to do (0: a short one).
    cost: float = 0.0
    #: How the report and a result object show the experiment (:class:`View`).
    view: View | None = None
    #: How ``attncoda <name>`` takes its sources and what it prints (:class:`Command`).
    command: Command | None = None
    #: ``{table: {column: rule}}``: how a column of its tables is held when two runs are
    #: compared, where the column's type does not say it (a count held to a stated bound,
    #: a share through its parts, MDS coordinates through their distances;
    #: :mod:`attncoda.experiments.contract._held`).
    held: Mapping[str, Mapping[str, Held]] = field(default_factory=dict)

    @property
    def shared_rows(self) -> bool:
        """Whether the experiment reads the run's shared rows, whose windows the options
        ``docs`` and ``max_tokens`` of the shared rows set (flips, cluster, safety, the
        predictor); an experiment whose own settings have ``docs`` and ``max_tokens`` reads
        its rows at those windows (through :attr:`rows_at`) and takes no shared-rows
        options."""
        own = {f.name for f in dataclasses.fields(self.settings)}
        return "rows" in self.needs and not {"docs", "max_tokens"} <= own


def experiment(name: str) -> Experiment:
    """The :class:`Experiment` declared by ``attncoda.experiments.<name>``."""
    if name not in EXPERIMENTS:
        raise AttncodaError(f"unknown experiment {name!r}: use one of {', '.join(EXPERIMENTS)}")
    module = importlib.import_module(f"attncoda.experiments.{name}")
    return module.EXPERIMENT


def settings_dict(settings: Any) -> dict[str, Any]:
    """A settings dataclass as a JSON-able dict (tuples become lists)."""
    return {
        f.name: list(v) if isinstance(v := getattr(settings, f.name), tuple) else v
        for f in dataclasses.fields(settings)
    }


def settings_from(cls: type, values: Mapping[str, Any] | None = None) -> Any:
    """``cls(**values)``, each value checked against its field
    (:func:`attncoda.experiments.contract.check_settings`: lists made tuples); an unknown key
    or a value the field does not allow is an error that names it."""
    return cls(**check_settings(cls, values))


def without_run_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the columns of :data:`RUN_COLUMNS` a stored partition carries."""
    return frame.drop(columns=[c for c in RUN_COLUMNS if c in frame.columns])
