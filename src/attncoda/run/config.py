"""The config of a run: everything that determines its tables (docs/design.md, "Runs").

A run config is a JSON-able dict. Its keys:

- ``models``: the model specs (or the names of given attention files), in order;
- ``experiments``: the experiments asked for and those they run after, in the order of
  :data:`attncoda.experiments.contract.EXPERIMENTS`;
- ``scale``: ``"demo"`` or ``"full"`` (:data:`SCALES`);
- ``settings``: ``{experiment: settings_dict(Settings)}`` for every experiment of the run;
- ``rows``: the windows whose full rows every experiment that needs ``"rows"`` shares
  (:class:`Rows`), or ``None``;
- ``train``: the train-tiny series a run trains for collapse (:class:`TrainSeries`, with
  ``retrain``), or ``None`` when it reads a series: the shipped ``bigram-backcopy`` by
  default (:mod:`attncoda.models.shipped`), or the one given;
- ``series``: the checkpoint series of collapse (its points ``[step, label, spec]``; a spec
  ``run:<path>`` is relative to the run folder), or ``None``; the shipped or a retrained
  Bigram-Backcopy series also lists, under ``unseen``, the runs the predictor never saw, to
  whose last checkpoints the run applies it (:func:`attncoda.run.train.unseen_points`);
- ``attentions``: given attention files read instead of models, or ``None``;
- ``sink``, ``seed``, ``corpus``, ``device``, ``dtype``, ``method``; ``kernel`` (the fast
  path's, resolved: ``triton``, ``cpp`` or ``sdpa``) for ``method="fast"`` only;
- ``device_map`` (a strategy such as ``"auto"``, or ``{module: device}``) and
  ``max_memory`` (``{device: size}``, keys as text) only when a device map places the
  models (docs/design.md, "Models over several devices"); ``offload_folder`` (absolute)
  only when one is given: the weights a map puts on the disk go there, by default to
  ``<run folder>/offload``.

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
from attncoda.models.spec import parse_spec

__all__ = [
    "DEMO_MODELS",
    "SCALES",
    "Rows",
    "TrainSeries",
    "closure",
    "run_config",
    "settings_of",
]

#: The models ``attncoda demo`` (and ``reproduce`` without ``--models``) runs: three
#: families, a Llama decoder, a Gemma 3 decoder with sliding-window layers, and a BERT
#: encoder, all embedded (``attncoda models``). ``mpnet`` joins them with ``--models``.
DEMO_MODELS = ("smollm2", "gemma3", "minilm")


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


def settings_of(config: Mapping[str, Any], name: str) -> Any:
    """The Settings of experiment ``name`` (or the :class:`Rows`, :class:`TrainSeries` of
    ``"rows"``, ``"train"``) that ``config`` records."""
    values = config[name] if name in _GROUPS else config["settings"][name]
    return settings_from(_group_class(name), values)


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
) -> dict[str, Any]:
    """The config of a run (see the module docstring for its keys).

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
    train = settings_dict(wanted) if trains else None
    if "collapse" in planned and series is None and not trains:
        from attncoda.models.shipped import SERIES

        series = SERIES
    unseen = "predictor" in planned and wanted.unseen and (trains or _shipped_default(series))
    return {
        "models": models,
        "experiments": planned,
        "scale": scale,
        "settings": {
            e: settings_dict(settings_from(experiment(e).settings, overrides.get(e)))
            for e in planned
        },
        "rows": (
            settings_dict(settings_from(Rows, overrides.get("rows"))) if "rows" in needs else None
        ),
        "train": train,
        "series": _series_config(series, train, unseen=unseen) if "collapse" in planned else None,
        "attentions": (
            {"files": files, "tokens": tokens and str(Path(tokens).resolve()), "kind": kind}
            if files
            else None
        ),
        "sink": options.sink,
        "seed": options.seed,
        "corpus": {"text": text, **corpus_source(text)},
        "device": device,
        "dtype": options.dtype,
        "method": method,
        **({"kernel": ran} if ran is not None else {}),
        **({"device_map": placed} if placed is not None else {}),
        **({"max_memory": {str(k): v for k, v in limits.items()}} if limits else {}),
        **(
            {"offload_folder": str(Path(options.offload_folder).resolve())}
            if options.offload_folder
            else {}
        ),
    }


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


def _series_config(
    series: str | None, train: Mapping[str, Any] | None, *, unseen: bool = False
) -> dict[str, Any]:
    if series is None:
        from attncoda.data.tasks import TASKS
        from attncoda.training.train import TASK_DEFAULTS, checkpoint_steps

        assert train is not None
        task = train["task"]
        if task not in TASKS:
            raise AttncodaError(f"unknown train task {task!r}: use one of {', '.join(TASKS)}")
        n_steps = train["steps"] or TASK_DEFAULTS[task]["steps"]
        steps = checkpoint_steps(int(n_steps))
        from attncoda.run.train import unseen_points

        return {
            "name": "train-tiny",
            "spec": None,
            "task": task,
            "points": [[s, f"step{s}", f"run:series/train-tiny/step{s}"] for s in steps],
            # models the predictor never saw, trained beside the series (run/train.py)
            "unseen": (
                unseen_points(int(n_steps))
                if unseen and train.get("unseen", True) and task == "bigram-backcopy"
                else []
            ),
        }
    from attncoda.run.loaded import lent_series

    handed = lent_series(series)
    if handed is not None:  # captures of a series, handed in (attncoda.run.loaded.lend)
        return {
            "name": series,
            "spec": series,
            "points": [[step, f"step{step}", label] for step, label in handed],
        }
    from attncoda.models.series import parse_series

    points = parse_series(series)
    first = parse_spec(points[0].spec)
    name = first.name if first.revision is not None else Path(series).name
    found = {
        "name": name,
        "spec": series,
        "points": [[p.step, p.label, p.spec] for p in points],
    }
    if _shipped_default(series):
        from attncoda.run.train import unseen_points

        found["unseen"] = unseen_points(None) if unseen else []
    return found
