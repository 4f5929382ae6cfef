"""What a runner keeps between units, :class:`Loaded` (its loaded models and their objects,
and what a caller lends it instead of specs to load: live models, captures, a series of
captures; docs/design.md, "Runs"), and what identifies a loaded model (:func:`identity_of`).

A :class:`Loaded` is owned and passed, never global: the in-process executor builds one per
run (or takes the one it is given), a pool worker one per process, a Ray task its own. It
keeps one model's objects at a time (its load, its recorded rows, the tables of its units);
loading another model, or the same with other options, forgets the previous one's. Nothing
of the results depends on what it kept before: every key holds what determines its value, a
model's objects ``(kind, spec, options_key(options), ...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.options import CaptureOptions
from attncoda.run.captured import Captured

__all__ = ["Loaded", "identity_of", "options_key"]

#: Kept objects of one model (key[1] its spec, key[2] the options it loads and captures
#: with): dropped when another model, or the same with other options, loads.
_PER_MODEL = ("load", "rows", "after", "identity")


def options_key(options: CaptureOptions) -> str:
    """What of ``options`` a model's load and captures depend on, as a cache key: all but
    the sink and seed (the key of a capture names them itself)."""
    return repr({k: v for k, v in vars(options).items() if k not in ("sink", "seed")})


class Loaded:
    """The models a runner loaded and their objects (rows, tables of finished units), kept by
    key, and what a caller lent it by label: a live model's ``(model, tokenizer, info)`` or
    a :class:`Captured` handed in, and series of lent captures by name,
    ``[(step, label), ...]`` in step order (see the module docstring)."""

    def __init__(self) -> None:
        self._kept: dict[tuple, Any] = {}
        self._lent: dict[str, Any] = {}
        self._series: dict[str, list[tuple[int, str]]] = {}

    @contextmanager
    def lend(
        self,
        entries: Mapping[str, Any],
        series: Mapping[str, Sequence[tuple[int, str]]] | None = None,
    ) -> Iterator[Loaded]:
        """Within the block, the runner reads ``entries[label]`` for each label instead of
        loading a spec: a live model ``(model, tokenizer, info)`` is used as a load
        (:meth:`loaded`), a :class:`Captured` as a given attention source whose capture the
        experiments read (:meth:`lent_capture`). ``series`` names series of lent captures:
        ``{name: [(step, label), ...]}``, a run's checkpoint series (:meth:`lent_series`).
        What was kept of them goes with them."""
        series = dict(series or {})
        taken = sorted((set(entries) & set(self._lent)) | (set(series) & set(self._series)))
        if taken:
            raise AttncodaError(f"{taken} are already lent to this runner")
        self._lent.update(entries)
        for name, points in series.items():
            self._series[name] = [(int(step), str(label)) for step, label in points]
        try:
            yield self
        finally:
            for label in entries:
                self._lent.pop(label, None)
            for name in series:
                self._series.pop(name, None)
            self.forget(entries)

    def lent(self, spec: str) -> bool:
        """Whether ``spec`` is the label of something lent (a live model, a capture or a
        series of captures)."""
        return spec in self._lent or spec in self._series

    def lent_capture(self, spec: str) -> Captured | None:
        """The capture lent under ``spec``, or ``None``."""
        found = self._lent.get(spec)
        return found if isinstance(found, Captured) else None

    def lent_series(self, name: str) -> list[tuple[int, str]] | None:
        """The ``(step, label)`` points of the series of captures lent as ``name``, or
        ``None``."""
        return self._series.get(name)

    def clear(self) -> None:
        """Forget every loaded model, capture and table kept (what is lent stays lent)."""
        self._kept.clear()

    def forget(self, specs: Iterable[str]) -> None:
        """Forget what is kept of the models ``specs``."""
        specs = set(specs)
        for key in [k for k in self._kept if len(k) > 1 and k[1] in specs]:
            del self._kept[key]

    def keys(self) -> list[tuple]:
        """What is kept, by key (``(kind, spec, ...)``), in the order kept."""
        return list(self._kept)

    def cached(self, key: tuple, make: Callable[[], Any]) -> Any:
        """``make()``, computed once per ``key`` (the module docstring says what is kept)."""
        if key not in self._kept:
            # A worker may run units of hundreds of models: one model's objects at a time.
            if key[0] == "load":
                for old in [k for k in self._kept if k[0] in _PER_MODEL and k[1:3] != key[1:3]]:
                    del self._kept[old]
            self._kept[key] = make()
        return self._kept[key]

    def keep(self, key: tuple, value: Any) -> None:
        """Keep ``value`` under ``key`` (a unit's tables, for the units that run after it)."""
        self._kept[key] = value

    def loaded(self, spec: str, options: CaptureOptions) -> tuple:
        """``(model, tokenizer, info)`` of ``spec`` loaded by ``options``, once (a lent live
        model's as it was lent)."""
        if spec in self._lent:
            if isinstance(self._lent[spec], Captured):
                raise AttncodaError(
                    f"{spec!r} is a capture handed in, which holds no model: pass a model spec"
                )
            return self._lent[spec]
        key = ("load", spec, options_key(options))
        return self.cached(key, lambda: _quiet_load(spec, options))

    def tokenizer_of(self, spec: str, options: CaptureOptions) -> Any:
        """The tokenizer of ``spec``: from its kept load, else from a load kept apart (the
        series' first checkpoint cuts the windows of every checkpoint)."""
        if spec in self._lent:
            return self.loaded(spec, options)[1]
        how = options_key(options)
        found = self._kept.get(("load", spec, how))
        if found is None:
            found = self.cached(("tokenizer", spec, how), lambda: _quiet_load(spec, options))
        return found[1]


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
