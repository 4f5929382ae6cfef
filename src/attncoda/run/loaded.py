"""What a runner process keeps: its loaded models and their objects (and what identifies
a loaded model by content, :func:`identity_of`), and what a caller lends it (live models,
captures, a series of captures) instead of specs to load (docs/design.md, "Runs").

A process keeps one model's objects at a time (its load, its recorded rows, the tables of
its units), so a process that runs several units of one model loads and captures it once;
loading another model, or the same with other options, forgets the previous one's. Nothing
of the results depends on what the process ran before: every cache key holds what
determines its value, a model's objects ``(kind, spec, options_key(options), ...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.run.captured import Captured

__all__ = [
    "cache_keys",
    "cached",
    "clear_cache",
    "forget",
    "identity_of",
    "keep",
    "lend",
    "lent",
    "lent_capture",
    "lent_series",
    "loaded",
    "options_key",
    "tokenizer_of",
]

_CACHE: dict[tuple, Any] = {}
#: Cache entries of one model (key[1] its spec, key[2] the options it loads and captures
#: with): dropped when another model, or the same with other options, loads.
_PER_MODEL = ("load", "rows", "after", "identity")
#: What is lent to the runner by label (:func:`lend`): a live model's
#: ``(model, tokenizer, info)``, or a :class:`Captured` handed in.
_LENT: dict[str, Any] = {}
#: Series of lent captures by name: ``[(step, label), ...]`` in step order.
_SERIES: dict[str, list[tuple[int, str]]] = {}


@contextmanager
def lend(
    entries: Mapping[str, Any], series: Mapping[str, Sequence[tuple[int, str]]] | None = None
) -> Iterator[None]:
    """Within the block, the runner reads ``entries[label]`` for each label instead of
    loading a spec: a live model ``(model, tokenizer, info)`` is used as a load
    (:func:`loaded`), a :class:`Captured` as a given attention source whose capture the
    experiments read (:func:`lent_capture`). ``series`` names series of lent captures:
    ``{name: [(step, label), ...]}``, a run's checkpoint series (:func:`lent_series`)."""
    series = dict(series or {})
    taken = sorted((set(entries) & set(_LENT)) | (set(series) & set(_SERIES)))
    if taken:
        raise AttncodaError(f"{taken} are already lent to a run of this process")
    _LENT.update(entries)
    for name, points in series.items():
        _SERIES[name] = [(int(step), str(label)) for step, label in points]
    try:
        yield
    finally:
        for label in entries:
            _LENT.pop(label, None)
        for name in series:
            _SERIES.pop(name, None)
        forget(entries)  # what was captured of a live model goes with it


def lent(spec: str) -> bool:
    """Whether ``spec`` is the label of something lent to this process's runner (a live
    model, a capture or a series of captures)."""
    return spec in _LENT or spec in _SERIES


def lent_capture(spec: str) -> Captured | None:
    """The capture lent under ``spec``, or ``None``."""
    found = _LENT.get(spec)
    return found if isinstance(found, Captured) else None


def lent_series(name: str) -> list[tuple[int, str]] | None:
    """The ``(step, label)`` points of the series of captures lent as ``name``, or
    ``None``."""
    return _SERIES.get(name)


def options_key(options: CaptureOptions) -> str:
    """What of ``options`` a model's load and captures depend on, as a cache key: all but
    the sink and seed (the key of a capture names them itself)."""
    return repr({k: v for k, v in vars(options).items() if k not in ("sink", "seed")})


def clear_cache() -> None:
    """Forget every loaded model, capture and table of this process."""
    _CACHE.clear()


def forget(specs: Iterable[str]) -> None:
    """Forget what this process keeps of the models ``specs``."""
    specs = set(specs)
    for key in [k for k in _CACHE if len(k) > 1 and k[1] in specs]:
        del _CACHE[key]


def cache_keys() -> list[tuple]:
    """What this process keeps, by key (``(kind, spec, ...)``), in the order kept."""
    return list(_CACHE)


def cached(key: tuple, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per ``key`` (see the module docstring for what is kept)."""
    if key not in _CACHE:
        # A Ray worker may run units of hundreds of models: one model's objects at a time.
        if key[0] == "load":
            for old in [k for k in _CACHE if k[0] in _PER_MODEL and k[1:3] != key[1:3]]:
                del _CACHE[old]
        _CACHE[key] = make()
    return _CACHE[key]


def keep(key: tuple, value: Any) -> None:
    """Keep ``value`` under ``key`` (a unit's tables, for the units that run after it)."""
    _CACHE[key] = value


def _quiet_load(spec: str, options: CaptureOptions) -> tuple:
    """:func:`attncoda.load_model` by ``options`` without transformers' per-load progress
    bar (a run prints one line per unit instead)."""
    from transformers.utils import logging as hf_logging

    from attncoda.models.load import load_model

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load_model(spec, dtype=options.dtype, **options.placement())
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def loaded(spec: str, options: CaptureOptions) -> tuple:
    """``(model, tokenizer, info)`` of ``spec`` loaded by ``options``, once per process (a
    lent live model's as it was lent)."""
    if spec in _LENT:
        if isinstance(_LENT[spec], Captured):
            raise AttncodaError(
                f"{spec!r} is a capture handed in, which holds no model: pass a model spec"
            )
        return _LENT[spec]
    return cached(("load", spec, options_key(options)), lambda: _quiet_load(spec, options))


def tokenizer_of(spec: str, options: CaptureOptions) -> Any:
    """The tokenizer of ``spec``: from its cached load, else from a load kept apart (the
    series' first checkpoint cuts the windows of every checkpoint)."""
    if spec in _LENT:
        return loaded(spec, options)[1]
    how = options_key(options)
    key = ("load", spec, how)
    found = (
        _CACHE[key]
        if key in _CACHE
        else cached(("tokenizer", spec, how), lambda: _quiet_load(spec, options))
    )
    return found[1]


def identity_of(loaded: tuple) -> dict[str, Any]:
    """:func:`attncoda.training.identity.model_identity` of a loaded ``(model, tokenizer,
    info)``: its weights hash and sketch and, for a ``train-tiny`` checkpoint read from a
    folder (a local one, or one attncoda ships: ``bigram-backcopy@step1000``), its recipe,
    which says which run it belongs to."""
    from attncoda.training.identity import model_identity

    model, _, info = loaded
    source = getattr(info, "source", None)
    folder = None
    if source == "local":
        folder = info.name_or_path
    elif source == "shipped":  # recorded as "bigram-backcopy@step1000"
        from attncoda.models.shipped import checkpoint_folder

        name, _, step = info.name_or_path.partition("@")
        folder = str(checkpoint_folder(name, step or None))
    return model_identity(model, folder)
