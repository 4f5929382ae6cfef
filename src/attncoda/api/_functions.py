"""The experiment functions, one per experiment of the registry, made from its declaration:
the capture options (one keyword per field of
:class:`~attncoda.capture.options.CaptureOptions`), the function's own, then every field of
the shared rows' settings (for an experiment that reads rows) and of the experiment's
``Settings`` with its default (:mod:`attncoda.api._signatures` checks every value and builds
the docstring)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attncoda.api._call import run_function
from attncoda.api._result import Result
from attncoda.api._signatures import experiment_function, option_parameters, rows_settings
from attncoda.capture.options import CaptureOptions
from attncoda.experiments.contract import REGISTRY, experiment

__all__ = ["functions"]

_KEYWORD = inspect.Parameter.KEYWORD_ONLY

#: The function's own options beside the capture options, with their defaults and
#: annotations, in order (``steps`` only for an experiment over a checkpoint series).
_OWN: tuple[tuple[str, Any, Any], ...] = (
    ("out", None, "str | Path | None"),
    ("text", None, "str | None"),
    ("names", None, "Sequence[str] | str | None"),
)


def _signature(name: str) -> inspect.Signature:
    declared = experiment(name)
    series = declared.command is not None and declared.command.sources == "series"
    params = [
        inspect.Parameter("source", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="Any"),
        *option_parameters(CaptureOptions),
    ]
    for option, default, annotation in _OWN:
        if series and option == "names":
            annotation = "str | None"  # one name for the series
        params.append(inspect.Parameter(option, _KEYWORD, default=default, annotation=annotation))
    if series:
        params.append(
            inspect.Parameter("steps", _KEYWORD, default=None, annotation="Sequence[int] | None")
        )
    rows = rows_settings(name)
    for cls in (declared.settings,) if rows is None else (rows, declared.settings):
        for f in dataclasses.fields(cls):
            # A tuple field takes any sequence (a list is made a tuple).
            shown = str(f.type).replace("tuple[", "Sequence[").replace(", ...]", "]")
            params.append(inspect.Parameter(f.name, _KEYWORD, default=f.default, annotation=shown))
    return inspect.Signature(params, return_annotation="Result")


def _function(name: str, public: str) -> Callable[..., Result]:
    """``attncoda.<public>``: experiment ``name`` on a source, with its signature and
    docstring."""
    declared = experiment(name)
    signature = _signature(name)

    def function(*args: Any, **kwargs: Any) -> Result:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return run_function(name, bound.arguments)

    function.__signature__ = signature  # type: ignore[attr-defined]
    # Resolved in this module's namespace (typing.get_type_hints, an IDE, help()).
    function.__annotations__ = {
        **{p.name: p.annotation for p in signature.parameters.values()},
        "return": "Result",
    }
    function.__name__ = function.__qualname__ = public
    function.__module__ = "attncoda.api"
    summary = declared.command.doc if declared.command is not None else name
    return experiment_function(name, summary or name)(function)


@functools.cache
def functions() -> dict[str, Callable[..., Result]]:
    """Every experiment's function by its public name (:data:`attncoda.experiments.contract.
    REGISTRY`), in the registry's order."""
    return {public: _function(name, public) for name, public in REGISTRY.items()}


# The names the annotations above spell as text, for typing.get_type_hints.
_ = (Path, Sequence)
