"""The config of a run: everything that determines its tables (docs/design.md, "Runs").

A run config is a frozen :class:`RunConfig`, built once where a run starts
(:func:`run_config`) and handed whole to every unit, in this process, a worker process or a
Ray task. JSON only at the run folder: :meth:`RunConfig.to_json` is the manifest's
``config`` and :meth:`RunConfig.from_json` reads it back. Its keys are the attributes of
:class:`RunConfig` (``settings``: ``{experiment: settings_dict(Settings)}``), its
``options`` spread out:

- ``sink``, ``seed``, ``device``, ``dtype``, ``method``; ``kernel`` (the fast path's,
  resolved: ``triton``, ``cpp`` or ``sdpa``) for ``method="fast"`` only;
- ``device_map`` (a strategy such as ``"auto"``, or ``{module: device}``) and
  ``max_memory`` (``{device: size}``, keys as text) only when a device map places the
  models (docs/design.md, "Models over several devices"); ``offload_folder`` (absolute)
  only when one is given: the weights a map puts on the disk go there, by default to
  ``<run folder>/offload`` (:meth:`RunConfig.options_at`).

A run folder holds one config: resuming it with another is refused, naming the keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions, resolve_device
from attncoda.experiments.contract import (
    EXPERIMENTS,
    experiment,
    setting,
    settings_dict,
    settings_from,
)
from attncoda.models.series import SeriesPoint
from attncoda.models.spec import parse_spec

__all__ = [
    "DEMO_MODELS",
    "RUN_PREFIX",
    "SCALES",
    "SERIES_FOLDER",
    "UNSEEN_FOLDER",
    "Attentions",
    "Corpus",
    "Rows",
    "RunConfig",
    "Series",
    "TrainSeries",
    "UnseenRun",
    "closure",
    "run_config",
    "unseen_runs",
]

#: The models ``attncoda demo`` (and ``reproduce`` without ``--models``) runs: three
#: families, a Llama decoder, a Gemma 3 decoder with sliding-window layers, and a BERT
#: encoder, all embedded (``attncoda models``). ``mpnet`` joins them with ``--models``.
DEMO_MODELS = ("smollm2", "gemma3", "minilm")
#: A series point's spec under the run folder (a checkpoint the run trains).
RUN_PREFIX = "run:"
#: Where a run trains its default series, under the run folder.
SERIES_FOLDER = Path("series") / "train-tiny"
#: Where a run trains the unseen runs, under the run folder.
UNSEEN_FOLDER = Path("series") / "unseen"


@dataclass(frozen=True)
class Rows:
    """The windows of the corpus whose full rows are recorded, once per model, for every
    experiment that needs ``"rows"`` (flips, cluster, safety, predictor). 16 windows of 128
    tokens, as the shipped predictor was fitted on (sink statistics depend on the window
    length): enough documents for flips' bootstrap interval, which needs at least
    :data:`~attncoda.experiments.contract.MIN_BOOTSTRAP_N` (docs/design.md, "Intervals")."""

    docs: int = setting(16, "windows of the corpus whose rows are read", at_least=1)
    max_tokens: int = setting(128, "tokens per window (the window length)", at_least=1)


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


@dataclass(frozen=True)
class Attentions:
    """Attention files a run reads instead of models: their absolute paths, the token ids'
    file (absolute, or None: the ids each file holds) and what the saved numbers are
    (``kind``; None: as each file says; see :func:`attncoda.run.captured.capture_file`)."""

    files: tuple[str, ...]
    tokens: str | None
    kind: str | None


@dataclass(frozen=True)
class Corpus:
    """The corpus a run reads: ``text`` as given (None: the embedded one) and what
    :func:`attncoda.data.corpus.corpus_source` records of it (``spec``, ``source``,
    ``n_documents``, ``sha256``)."""

    text: str | None
    spec: str
    source: str
    n_documents: int
    sha256: str


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's tables (the module docstring says its JSON).

    Attributes
    ----------
    models : tuple of str
        The model specs (or the names of given attention files), in order.
    experiments : tuple of str
        The experiments asked for and those they run after, in the order of
        :data:`~attncoda.experiments.contract.EXPERIMENTS`.
    scale : str
        ``"demo"`` or ``"full"`` (:data:`SCALES`).
    settings : mapping of str to Settings
        Each experiment's own frozen ``Settings``, parsed once.
    rows : Rows or None
        The windows whose full rows every experiment that needs ``"rows"`` shares, or None
        when none does.
    train : TrainSeries or None
        The train-tiny series the run trains for collapse (with ``retrain``), or None when
        it reads a series: the shipped ``bigram-backcopy`` by default
        (:mod:`attncoda.models.shipped`), or the one given.
    series : Series or None
        The checkpoint series of collapse, or None without collapse.
    attentions : Attentions or None
        Attention files read instead of models.
    corpus : Corpus
        The corpus read.
    options : CaptureOptions
        How models load and capture, as recorded: the fast path's kernel resolved, a device
        map's limits with text keys, a given offload folder absolute.
    """

    models: tuple[str, ...]
    experiments: tuple[str, ...]
    scale: str
    settings: Mapping[str, Any]
    rows: Rows | None
    train: TrainSeries | None
    series: Series | None
    attentions: Attentions | None
    corpus: Corpus
    options: CaptureOptions

    def options_at(self, root: str | Path) -> CaptureOptions:
        """How the run in the folder ``root`` loads and captures: :attr:`options`, where a
        device map without an offload folder puts the weights it sends to the disk in
        ``<root>/offload`` (the working folder never)."""
        options = self.options
        if options.device_map is None or options.offload_folder is not None:
            return options
        return dataclasses.replace(options, offload_folder=str(Path(root) / "offload"))

    def to_json(self) -> dict[str, Any]:
        """The config as the manifest records it (see the module docstring for its keys)."""
        o = self.options
        files = self.attentions
        return {
            "models": list(self.models),
            "experiments": list(self.experiments),
            "scale": self.scale,
            "settings": {e: settings_dict(s) for e, s in self.settings.items()},
            "rows": None if self.rows is None else settings_dict(self.rows),
            "train": None if self.train is None else settings_dict(self.train),
            "series": None if self.series is None else self.series.to_json(),
            "attentions": (
                None
                if files is None
                else {"files": list(files.files), "tokens": files.tokens, "kind": files.kind}
            ),
            "sink": o.sink,
            "seed": o.seed,
            "corpus": dataclasses.asdict(self.corpus),
            "device": o.device,
            "dtype": o.dtype,
            "method": o.method,
            **({"kernel": o.kernel} if o.method == "fast" else {}),
            **({"device_map": _copied(o.device_map)} if o.device_map is not None else {}),
            **({"max_memory": dict(o.max_memory)} if o.max_memory else {}),
            **({"offload_folder": o.offload_folder} if o.offload_folder else {}),
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> RunConfig:
        """The config a manifest records (:meth:`to_json`).

        Its options are read as recorded, not checked again: they were when the run was
        made, and a manifest is also read where the run's device is absent (the report of
        a GPU run, rendered on a laptop); a model's load checks its device where it runs.
        """
        method = stored["method"]
        options = object.__new__(CaptureOptions)
        vars(options).update(
            device=stored["device"],
            dtype=stored["dtype"],
            method=method,
            kernel=stored["kernel"] if method == "fast" else "auto",
            device_map=stored.get("device_map"),
            max_memory=stored.get("max_memory"),
            offload_folder=stored.get("offload_folder"),
            sink=stored["sink"],
            seed=stored["seed"],
        )
        given = stored["attentions"]
        return cls(
            models=tuple(stored["models"]),
            experiments=tuple(stored["experiments"]),
            scale=stored["scale"],
            settings={
                e: settings_from(experiment(e).settings, values)
                for e, values in stored["settings"].items()
            },
            rows=None if stored["rows"] is None else settings_from(Rows, stored["rows"]),
            train=None if stored["train"] is None else settings_from(TrainSeries, stored["train"]),
            series=None if stored["series"] is None else Series.from_json(stored["series"]),
            attentions=(
                None
                if given is None
                else Attentions(tuple(given["files"]), given["tokens"], given["kind"])
            ),
            corpus=Corpus(**stored["corpus"]),
            options=options,
        )


def _copied(device_map: str | Mapping[str, Any]) -> str | dict[str, Any]:
    return device_map if isinstance(device_map, str) else dict(device_map)


#: Each scale as overrides of the defaults (the experiments' Settings, :class:`Rows`,
#: :class:`TrainSeries`). ``demo`` fits a 2-core CPU in minutes (the README's reference
#: run): prune, whose every evaluation is a forward pass over its windows and a language-
#: model head (Gemma 3's has 262,144 rows), evaluates its 16 windows at 64 tokens and two
#: head counts; ``full`` is the paper's grid.
SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "demo": {"prune": {"ks": [16, 64], "max_tokens": 64}},
    "full": {
        "rows": {"docs": 16},
        "profile": {"docs": 32},
        "flips": {"n_boot": 1000},
        "collapse": {"docs": 32},
        "prune": {"ks": [1, 2, 4, 8, 16, 32, 64], "profile_docs": 16, "eval_docs": 16},
    },
}
_GROUPS = {"rows": Rows, "train": TrainSeries}


def closure(experiments: Sequence[str]) -> list[str]:
    """``experiments`` and every experiment they run after, in the order of
    :data:`~attncoda.experiments.contract.EXPERIMENTS`."""
    wanted: set[str] = set()
    stack = list(experiments)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(experiment(name).after)
    return [e for e in EXPERIMENTS if e in wanted]


def _group_class(name: str) -> type:
    return _GROUPS[name] if name in _GROUPS else experiment(name).settings


def _merged(scale: str, settings: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict]:
    """The overrides of ``scale`` updated by ``settings``, group by group."""
    merged = {k: dict(v) for k, v in SCALES[scale].items()}
    for group, values in (settings or {}).items():
        if group not in _GROUPS and group not in EXPERIMENTS:
            raise AttncodaError(
                f"unknown settings group {group!r}: use one of "
                f"{', '.join((*EXPERIMENTS, *_GROUPS))}"
            )
        if not isinstance(values, Mapping):
            raise AttncodaError(
                f"settings[{group!r}] is {values!r}: give a mapping of setting names to values"
            )
        known = sorted(f.name for f in dataclasses.fields(_group_class(group)))
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise AttncodaError(
                f"unknown setting {unknown[0]!r} of {group}: use one of {', '.join(known)}"
            )
        merged.setdefault(group, {}).update(values)
    return merged


def run_config(
    models: Sequence[str],
    *,
    series: str | None = None,
    experiments: Sequence[str] = EXPERIMENTS,
    scale: str = "demo",
    settings: Mapping[str, Mapping[str, Any]] | None = None,
    text: str | None = None,
    options: CaptureOptions | None = None,
    attentions: Sequence[str] | None = None,
    tokens: str | None = None,
    kind: str | None = None,
) -> RunConfig:
    """The config of a run (see the module docstring for its keys), every value checked.

    Parameters
    ----------
    models : sequence of str
        Model specs (``smollm2``, ``owner/name@rev``, a folder); empty with ``attentions``.
    series : str, optional
        The checkpoint series of collapse; default: the shipped ``bigram-backcopy`` series,
        or, with the ``train`` setting ``retrain``, a train-tiny series the run trains.
    experiments : sequence of str
        Those asked for; the experiments they run after join them.
    scale : str
        ``"demo"`` or ``"full"``: overrides of the defaults (:data:`SCALES`).
    settings : mapping, optional
        Further overrides by group: ``{"flips": {"n_boot": 20}, "rows": {"docs": 3},
        "train": {"steps": 16}}``; a group is an experiment, ``"rows"`` or ``"train"``.
    text : str, optional
        The corpus file or folder (default: the embedded one).
    options : CaptureOptions, optional
        How models load and capture (device, dtype, method, kernel, placement, sink, seed),
        checked when built. The config records the fast path's kernel as the one that runs
        on the run's device (:func:`attncoda.capture.kernels.resolve_kernel`), and a map's
        ``offload_folder`` (absolute) only when one is given (by default
        ``<run folder>/offload``).
    attentions, tokens, kind
        Attention files read instead of models (``.npz``, ``.pt``, ``.safetensors``), token
        ids for token sinks and what the saved numbers are (see
        :func:`attncoda.run.captured.capture_file`).

    Raises
    ------
    AttncodaError
        No model, two attention files of one name, an unknown experiment, scale, settings
        group or setting, or a bad series. (A model spec given twice is merged.)
    """
    from attncoda.data.corpus import corpus_source
    from attncoda.models.placement import check_run_placement

    options = options or CaptureOptions()
    device, method, device_map = options.device, options.method, options.device_map
    # A run's offloaded weights go to <run folder>/offload unless a folder is given.
    folder = options.offload_folder
    folder = "offload" if device_map is not None and folder is None else folder
    placed, limits = check_run_placement(device, device_map, options.max_memory, folder)
    ran = _kernel(options.kernel, method, device, options.dtype)
    unknown = [e for e in experiments if e not in EXPERIMENTS]
    if unknown or not experiments:
        raise AttncodaError(
            f"unknown experiment(s) {unknown or list(experiments)}: use a comma list of "
            f"{', '.join(EXPERIMENTS)}"
        )
    if scale not in SCALES:
        raise AttncodaError(f"unknown scale {scale!r}: use one of {', '.join(SCALES)}")
    # A model named twice is one model: one unit per (experiment, model, revision).
    models = list(dict.fromkeys(m.strip() for m in models if m and m.strip()))
    files = list(dict.fromkeys(str(Path(f).resolve()) for f in attentions or ()))
    if files and models:
        raise AttncodaError("give models or attention files, not both")
    if files:
        models = [Path(f).name for f in files]
        if twice := next((m for m in models if models.count(m) > 1), None):
            raise AttncodaError(f"two attention files are named {twice!r}: rename one of them")
    if not models and "collapse" not in experiments:
        raise AttncodaError("give at least one model (e.g. --models smollm2,gemma3,minilm)")
    planned = closure(experiments)
    overrides = _merged(scale, settings)
    needs = {n for e in planned for n in experiment(e).needs}
    if files:
        loads = [
            e for e in planned if {"model", "windows", "checkpoint"} & set(experiment(e).needs)
        ]
        if loads:
            raise AttncodaError(
                f"{loads[0]} runs a model: give a model spec, not attention files "
                "(attention files serve experiments that read rows or statistics)"
            )
    wanted = settings_from(TrainSeries, overrides.get("train"))
    _check_retrain(wanted, series)
    trains = "collapse" in planned and series is None and wanted.retrain
    if "collapse" in planned and series is None and not trains:
        from attncoda.models.shipped import SERIES

        series = SERIES
    unseen = "predictor" in planned and wanted.unseen and (trains or _shipped_default(series))
    train = wanted if trains else None
    return RunConfig(
        models=tuple(models),
        experiments=tuple(planned),
        scale=scale,
        settings={e: settings_from(experiment(e).settings, overrides.get(e)) for e in planned},
        rows=settings_from(Rows, overrides.get("rows")) if "rows" in needs else None,
        train=train,
        series=_series(series, train, unseen=unseen) if "collapse" in planned else None,
        attentions=(
            Attentions(tuple(files), tokens and str(Path(tokens).resolve()), kind)
            if files
            else None
        ),
        corpus=Corpus(text=text, **corpus_source(text)),
        options=CaptureOptions(
            device=device,
            dtype=options.dtype,
            method=method,
            kernel=ran or "auto",
            device_map=placed,
            max_memory={str(k): v for k, v in limits.items()} if limits else None,
            offload_folder=(
                str(Path(options.offload_folder).resolve()) if options.offload_folder else None
            ),
            sink=options.sink,
            seed=options.seed,
        ),
    )


def _kernel(kernel: str, method: str, device: str, dtype: str | None = None) -> str | None:
    """The fast path's kernel on ``device`` (None for the exact path; the options checked
    the kernel's name), and a dtype no kernel takes there (float64 on CUDA) refused before
    any load (:func:`attncoda.capture.kernels.check_dtype`)."""
    from attncoda.capture.kernels.registry import check_dtype, resolve_kernel

    if method != "fast":
        return None
    where = resolve_device(device)
    check_dtype(where, dtype)
    return resolve_kernel(kernel, where)


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


def _shipped_default(series: str | None) -> bool:
    from attncoda.models.shipped import SERIES

    return series == SERIES


def unseen_runs(steps: int | None) -> tuple[UnseenRun, ...]:
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


def _series(series: str | None, train: TrainSeries | None, *, unseen: bool = False) -> Series:
    """The series of collapse: one the run trains (``series`` None, ``train`` its settings),
    a series of captures lent to the runner, or the checkpoints ``series`` names."""
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
                unseen_runs(n_steps)
                if unseen and train.unseen and task == "bigram-backcopy"
                else ()
            ),
        )
    from attncoda.run.loaded import lent_series

    handed = lent_series(series)
    if handed is not None:  # captures of a series, handed in (attncoda.run.loaded.lend)
        return Series(
            name=series,
            spec=series,
            points=tuple(SeriesPoint(step, f"step{step}", label) for step, label in handed),
        )
    from attncoda.models.series import parse_series

    points = tuple(parse_series(series))
    first = parse_spec(points[0].spec)
    shipped = _shipped_default(series)
    return Series(
        name=first.name if first.revision is not None else Path(series).name,
        spec=series,
        points=points,
        unseen=(unseen_runs(None) if unseen else ()) if shipped else None,
    )
