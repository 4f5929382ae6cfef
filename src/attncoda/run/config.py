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
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import (
    EXPERIMENTS,
    experiment,
    setting,
    settings_dict,
    settings_from,
)
from attncoda.run.loaded import Loaded
from attncoda.run.options import recorded
from attncoda.run.series import Series, TrainSeries, series_of

__all__ = [
    "DEMO_MODELS",
    "SCALES",
    "Attentions",
    "Corpus",
    "Rows",
    "RunConfig",
    "closure",
    "run_config",
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
            "corpus": dataclasses.asdict(self.corpus),
            **self.options.to_json(),
        }

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> RunConfig:
        """The config a manifest records (:meth:`to_json`); its options checked as any are,
        but not against this machine (:meth:`CaptureOptions.from_json
        <attncoda.capture.options.CaptureOptions.from_json>`)."""
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
            options=CaptureOptions.from_json(stored),
        )


#: Each scale as overrides of the defaults (the experiments' Settings, :class:`Rows`,
#: :class:`TrainSeries`). ``demo`` fits a 2-core CPU in minutes (the README's reference
#: run): prune, whose every evaluation is a forward pass over its windows and a language-
#: model head (Gemma 3's has 262,144 rows), evaluates its 16 windows at 64 tokens and two
#: head counts; ``full`` is the paper's grid.
SCALES: Mapping[str, Mapping[str, Mapping[str, Any]]] = MappingProxyType({
    scale: MappingProxyType({group: MappingProxyType(v) for group, v in groups.items()})
    for scale, groups in cast(dict[str, dict[str, dict[str, Any]]], {
        "demo": {"prune": {"ks": (16, 64), "max_tokens": 64}},
        "full": {
            "rows": {"docs": 16},
            "profile": {"docs": 32},
            "flips": {"n_boot": 1000},
            "collapse": {"docs": 32},
            "prune": {"ks": (1, 2, 4, 8, 16, 32, 64), "profile_docs": 16, "eval_docs": 16},
        },
    }).items()
})  # fmt: skip
_GROUPS = MappingProxyType({"rows": Rows, "train": TrainSeries})


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


def run_config(  # params: the arguments of a run, keyword-only, each checked here # long: docs
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
    lent: Loaded | None = None,
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
    lent : Loaded, optional
        What the run's runner is lent (:meth:`Loaded.lend <attncoda.run.loaded.Loaded.lend>`):
        a ``series`` that names a series of lent captures reads them.

    Raises
    ------
    AttncodaError
        No model, two attention files of one name, an unknown experiment, scale, settings
        group or setting, or a bad series. (A model spec given twice is merged.)
    """
    from attncoda.data.corpus import corpus_source

    options = recorded(options or CaptureOptions())
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
    train, collapse = series_of(series, wanted, planned, Loaded() if lent is None else lent)
    return RunConfig(
        models=tuple(models),
        experiments=tuple(planned),
        scale=scale,
        settings={e: settings_from(experiment(e).settings, overrides.get(e)) for e in planned},
        rows=settings_from(Rows, overrides.get("rows")) if "rows" in needs else None,
        train=train,
        series=collapse,
        attentions=(
            Attentions(tuple(files), tokens and str(Path(tokens).resolve()), kind)
            if files
            else None
        ),
        corpus=Corpus(text=text, **corpus_source(text)),
        options=options,
    )
