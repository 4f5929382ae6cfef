"""What the runner provides to one unit: loaded models, captures, windows, series points, the
tables of the experiments it runs after (the ``needs`` and ``after`` of
:class:`attncoda.experiments.contract.Experiment`).

What a runner keeps between units (its models, their rows, the tables of its units) and
what a caller lends it are its :class:`~attncoda.run.loaded.Loaded`, which every unit's
:class:`Source` carries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import Experiment, Inputs, Reading, Tables, experiment
from attncoda.models.spec import join_spec
from attncoda.run.config import Rows, RunConfig
from attncoda.run.loaded import Loaded, options_key
from attncoda.run.plan import reads_series, series_point
from attncoda.run.stored import read_unit
from attncoda.store.runs import RunStore, Unit

__all__ = [
    "Provided",
    "Source",
    "model_info",
    "provide",
    "remember",
    "source",
    "with_family",
]


@dataclass(frozen=True)
class Source:
    """What one unit reads, and how.

    Attributes
    ----------
    spec : str
        What :func:`attncoda.load_model` loads (a series checkpoint: its folder or hub
        revision), the path of a given attention file, or the label of a capture lent to
        the runner (:meth:`Loaded.lend <attncoda.run.loaded.Loaded.lend>`).
    options : CaptureOptions
        How its model loads and captures: the run's options in its folder
        (:meth:`RunConfig.options_at <attncoda.run.config.RunConfig.options_at>`).
    kept : Loaded
        What the runner keeps and was lent: the model is loaded, and its objects kept, there.
    given : bool
        Whether ``spec`` is attention handed in, a file or a lent capture (no model is
        loaded).
    point : SeriesPoint or None
        The series checkpoint the unit reads.
    """

    spec: str
    options: CaptureOptions
    kept: Loaded
    given: bool = False
    point: Any = None

    def loaded(self) -> tuple:
        """``(model, tokenizer, info)`` of :attr:`spec`, loaded by :attr:`options` once by the
        runner (:meth:`Loaded.loaded <attncoda.run.loaded.Loaded.loaded>`)."""
        return self.kept.loaded(self.spec, self.options)

    @property
    def how(self) -> str:
        """The cache key of :attr:`options` (:func:`attncoda.run.loaded.options_key`)."""
        return options_key(self.options)


def source(unit: Unit, config: RunConfig, root: str | Path, kept: Loaded) -> Source:
    """What ``unit`` of the run of ``config`` in folder ``root`` reads, by the runner that
    keeps ``kept``."""
    options = config.options_at(root)
    if reads_series(unit, config):
        point = series_point(config, root, unit.revision, unit.model)
        given = kept.lent_capture(point.spec) is not None
        return Source(point.spec, options, kept, given=given, point=point)
    if config.attentions is not None:
        by_name = {Path(f).name: f for f in config.attentions.files}
        return Source(by_name[unit.model], options, kept, given=True)
    spec = join_spec(unit.model, unit.revision)
    return Source(spec, options, kept, given=kept.lent_capture(spec) is not None)


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def _given(src: Source, config: RunConfig, record_rows: str) -> Any:
    """The :class:`Captured` of attention handed in: a capture lent to the runner as it is,
    or an attention file's."""
    from attncoda.run.captured import capture_file

    handed = src.kept.lent_capture(src.spec)
    if handed is not None:
        return handed
    given = config.attentions
    assert given is not None  # a source is given only when lent or a file of the run
    return capture_file(
        src.spec,
        tokens=given.tokens,
        kind=given.kind,
        sink=src.options.sink,
        record_rows=record_rows,
        seed=src.options.seed,
    )


def _rows(
    src: Source, name: str, config: RunConfig, at: Mapping[str, int] | None = None
) -> tuple[Any, Reading | None, dict[str, Any]]:
    """The recorded rows of every head (labelled ``name``), what they read (``None`` for
    attention handed in) and what the unit's facts record of it: the run's windows, or
    ``at`` (``{"docs", "max_tokens"}``: an experiment's own, :attr:`Experiment.rows_at`)."""
    from attncoda.run.captured import head_rows

    rows = config.rows or Rows()
    if at is not None:
        rows = replace(rows, docs=int(at["docs"]), max_tokens=int(at["max_tokens"]))

    def make() -> tuple[Any, Reading | None, dict[str, Any]]:
        captured = _captured(
            src, config, docs=rows.docs, max_tokens=rows.max_tokens, record_rows="auto"
        )
        # Tables name the model as the run does (a series checkpoint by its series name);
        # the facts name the corpus read by name and content (the predictor's protocol).
        found = replace(head_rows(captured), model=name)
        return found, captured.reading, captured.to_json(named=True)

    sink, seed = src.options.sink, src.options.seed
    return src.kept.cached(
        ("rows", src.spec, src.how, _key(name, rows, config.corpus, sink, seed)), make
    )


def _identity(src: Source) -> dict[str, Any]:
    """The identity (weights hash, ``train-tiny`` recipe) of the model a unit reads, computed
    once per model by the runner (:func:`attncoda.run.loaded.identity_of`)."""
    from attncoda.run.loaded import identity_of

    return src.kept.cached(("identity", src.spec, src.how), lambda: identity_of(src.loaded()))


def _shared(config: RunConfig, at: Mapping[str, int] | None) -> bool:
    """What :attr:`Inputs.shared_rows` says of rows read with the windows ``at`` (``None``:
    the run's): whether they are the run's own rows."""
    rows = config.rows or Rows()
    return at is None or (int(at["docs"]), int(at["max_tokens"])) == (rows.docs, rows.max_tokens)


def _capture(src: Source, config: RunConfig, settings: Any) -> tuple[Any, dict]:
    """Statistics of every row (no full rows recorded) of ``settings.docs`` windows of
    ``settings.max_tokens`` tokens."""
    captured = _captured(
        src, config, docs=settings.docs, max_tokens=settings.max_tokens, record_rows="none"
    )
    return captured.capture, captured.to_json()


def _capture_windows(
    exp: Experiment, src: Source, settings: Any, windows: list
) -> tuple[Any, dict]:
    """The capture of the windows ``exp.captures`` picks of the unit's ``windows``, made with
    the run's options by the unit's model (statistics only, no full rows), and what its
    facts record of it."""
    from attncoda.run.captured import Batching, capture_ids

    if exp.captures is None:
        raise AttncodaError(
            f"{exp.name} needs windows and a capture but does not say which windows to "
            "capture: give its Experiment a captures function"
        )
    chosen = list(exp.captures(windows, settings))
    cap = capture_ids(src.loaded(), chosen, src.options, Batching(record_rows="none"))
    facts = {"windows": len(chosen), "method": cap.method, "kernel": cap.kernel}
    return cap, facts | cap.forward_facts()


def _captured(
    src: Source, config: RunConfig, *, docs: int, max_tokens: int, record_rows: str
) -> Any:
    """The capture of a unit's source: its given attention file, or ``docs`` windows of
    ``max_tokens`` tokens of the run's corpus, with ``record_rows`` full rows per document."""
    from attncoda.run.captured import capture_corpus

    if src.given:
        return _given(src, config, record_rows)
    return capture_corpus(
        src.spec,
        text=config.corpus.text,
        options=src.options,
        max_tokens=max_tokens,
        docs=docs,
        loaded=src.loaded(),
        record_rows=record_rows,
    )


def _windows(
    exp: Experiment, src: Source, config: RunConfig, root: str | Path, settings: Any
) -> list:
    """Token windows of the corpus, ``settings.docs`` of ``settings.max_tokens`` tokens: cut by
    the unit's own tokenizer, or for a checkpoint by the series' first checkpoint's (every
    checkpoint reads the same token ids)."""
    from attncoda.run.captured import corpus_windows

    text = config.corpus.text
    if "checkpoint" not in exp.needs:
        windows, _ = corpus_windows(
            src.loaded()[1], text=text, max_tokens=settings.max_tokens, docs=settings.docs
        )
        return windows
    assert config.series is not None  # a checkpoint is read from the run's series
    first = series_point(config, root, config.series.points[0].label)

    def make() -> list:
        tokenizer = src.kept.tokenizer_of(first.spec, src.options)
        windows, _ = corpus_windows(
            tokenizer, text=text, max_tokens=settings.max_tokens, docs=settings.docs
        )
        return [w.input_ids for w in windows]

    return src.kept.cached(("series_windows", first.spec, _key(text, settings)), make)


@dataclass(frozen=True)
class Provided:
    """The inputs of one unit, and what the unit's facts record of them.

    Attributes
    ----------
    inputs : Inputs
        What :meth:`Experiment.run` is given.
    info : ModelInfo or GivenInfo
        The facts of the model (or attention file) the unit read.
    facts : dict
        ``model_info``, ``device`` and, when the unit captured, what it read (``windows``
        and ``max_tokens``, or ``documents`` of given attention); for a capture of the
        unit's own windows (prune, collapse), ``captured``: how many, and the ``method``
        and ``kernel`` it was made with.
    """

    inputs: Inputs
    info: Any
    facts: dict[str, Any]


def model_info(src: Source, config: RunConfig) -> tuple[Any, str]:
    """The facts of the model a unit reads, and the device its tensors live on (input ids
    go there; a model placed by a device map moves them on itself)."""
    from attncoda.capture.options import resolve_device
    from attncoda.models.placement import input_device

    if src.given:
        return _given(src, config, "none").info, resolve_device(src.options.device)
    model, _, info = src.loaded()
    return info, input_device(model).type


def provide(
    unit: Unit,
    config: RunConfig,
    store: RunStore,
    kept: Loaded,
    *,
    info: tuple[Any, str] | None = None,
) -> Provided:
    """The :class:`Inputs` of ``unit`` (its experiment with the run's settings of it) of the
    run of ``config`` in ``store``'s folder, by the runner that keeps ``kept``. ``info``:
    :func:`model_info`, when known."""
    root = store.root
    exp, settings = experiment(unit.experiment), config.settings[unit.experiment]
    src = source(unit, config, root, kept)
    found, device = info or model_info(src, config)
    values: dict[str, Any] = {}
    facts: dict[str, Any] = {}
    # Attention handed in stands in for the model and its windows (Experiment.given).
    needs = exp.given if src.given and exp.given is not None else exp.needs
    for need in needs:
        if need == "rows":
            at = None if exp.rows_at is None else exp.rows_at(settings)
            values["rows"], values["read"], facts["read"] = _rows(src, unit.model, config, at)
            values["shared_rows"] = src.given or _shared(config, at)
            if exp.identifies and not src.given:  # hashed only for an experiment that needs it
                values["rows"] = replace(values["rows"], identity=_identity(src))
        elif need == "capture" and "windows" in needs:  # of the unit's own windows
            if "windows" not in values:
                values["windows"] = _windows(exp, src, config, root, settings)
            values["capture"], facts["captured"] = _capture_windows(
                exp, src, settings, values["windows"]
            )
        elif need == "capture":
            values["capture"], facts["read"] = _capture(src, config, settings)
        elif need == "model":
            values["loaded"] = src.loaded()
        elif need == "windows" and "windows" not in values:
            values["windows"] = _windows(exp, src, config, root, settings)
        elif need == "checkpoint":
            values["checkpoint"] = src.point
    values["after"] = {
        name: _after(name, unit, src, config, store, found.family) for name in exp.after
    }
    inputs = Inputs(
        model=unit.model,
        revision=unit.revision,
        seed=config.options.seed,
        sink=config.options.sink,
        device=device,
        given=src.given,
        **values,
    )
    return Provided(inputs=inputs, info=found, facts=facts)


def with_family(tables: Tables, family: str) -> Tables:
    """``tables`` whose every frame has a first column ``family`` (the model family every
    row belongs to)."""
    frames = {}
    for name, frame in tables.frames.items():
        out = frame.drop(columns="family") if "family" in frame.columns else frame.copy()
        out.insert(0, "family", family)
        frames[name] = out
    return Tables(frames=frames, summary=tables.summary, arrays=tables.arrays)


def _after_key(name: str, unit: Unit, src: Source, config: RunConfig) -> tuple:
    return ("after", src.spec, src.how, _key(name, unit.model, unit.revision, config.to_json()))


def remember(unit: Unit, config: RunConfig, root: str | Path, kept: Loaded, tables: Tables) -> None:
    """Keep the tables ``unit`` stored in ``kept``, for the units that run after it there."""
    src = source(unit, config, root, kept)
    kept.keep(_after_key(unit.experiment, unit, src, config), tables)


def _after(
    name: str, unit: Unit, src: Source, config: RunConfig, store: RunStore, family: str
) -> Tables:
    """The tables of experiment ``name`` on the unit's model and revision: kept by the
    runner, else read back from the finished unit, else computed here (a unit the plan
    does not hold, such as flips on a series checkpoint)."""
    prior = Unit(name, unit.model, unit.revision)

    def make() -> Tables:
        if store.is_done(prior):
            return read_unit(store, prior)
        provided = provide(prior, config, store, src.kept)
        return with_family(experiment(name).run(provided.inputs, config.settings[name]), family)

    return src.kept.cached(_after_key(name, prior, src, config), make)
