"""How the experiment functions of :mod:`attncoda.api` show their settings: a real signature
(the common options, then every field of the experiment's ``Settings`` with its default), a
numpydoc docstring built from the fields' metadata (:mod:`attncoda.experiments.contract`), a
refusal that names the known keywords, and the checks of the common options made before
anything loads.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from attncoda._errors import AttncodaError, one_line_errors
from attncoda.capture.options import CaptureOptions, about
from attncoda.experiments.contract import RENAMED

__all__ = [
    "COMMON_OPTIONS",
    "RETURNS_DOC",
    "check_common",
    "docstring",
    "experiment_function",
    "option_docs",
    "option_parameters",
    "python_spelling",
    "rows_settings",
]


_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def option_docs(cls: type) -> dict[str, tuple[str, str]]:
    """Each capture option of ``cls`` (:class:`~attncoda.capture.options.CaptureOptions`),
    as :data:`COMMON_OPTIONS` says it: its numpydoc type and text, from its declaration."""
    return {f.name: (about(f).kind, about(f).doc_text()) for f in dataclasses.fields(cls)}


def option_parameters(cls: type) -> list[inspect.Parameter]:
    """The keywords of the capture options of ``cls``, each with its declared default and
    annotation, in the declaration's order."""
    return [
        inspect.Parameter(f.name, _KEYWORD, default=f.default, annotation=about(f).annotation)
        for f in dataclasses.fields(cls)
    ]


#: The options every experiment function takes beside its settings, and what each is
#: (the docstring's text): the source, the capture options (:func:`option_docs`), then the
#: API's own (``steps`` is collapse's alone).
COMMON_OPTIONS = {
    "source": (
        "str, Capture, live model, or a list of one kind",
        'Model specs (``"minilm"``, ``"owner/name@rev"``, a folder), run through the '
        "runner as the CLI does; live models of this process (``(model, tokenizer)``, what "
        ":func:`attncoda.load_model` returned, a TransformerLens ``TransformerBridge``, an "
        "nnsight ``LanguageModel``), run through the same runner and captured through the "
        "object itself; or captures (:func:`attncoda.capture_windows`, "
        ":func:`attncoda.from_attentions`), lent to the same runner as attention handed in.",
    ),
    **option_docs(CaptureOptions),
    "out": (
        "str or path, optional",
        "The run folder to keep (``attncoda report OUT`` renders it); None: a temporary "
        "folder, removed when the function returns.",
    ),
    "text": (
        "str, optional",
        "Model specs and live models: a corpus file or folder (None: the embedded one).",
    ),
    "names": (
        "str or list of str, optional",
        "Captures and live models only: the model names the tables carry.",
    ),
    "steps": (
        "list of int, optional",
        "Captures only: the training step of each capture (default ``0, 1, ...``).",
    ),
}

RETURNS_DOC = """
Returns
-------
Result
    ``.tables`` (tidy DataFrames, ``family`` first), ``.figure()``, and a notebook view.
    The run keeps going past a unit that fails (a model that cannot be read, say):
    ``.failed`` lists those units with their errors, and the tables hold the others.

Raises
------
AttncodaError
    For an unknown option, or a value an option does not allow, before any model loads;
    or when no unit of the run finished: the first failure, ``unit KEY failed: MESSAGE``.
"""

_F = TypeVar("_F", bound=Callable[..., Any])


def _type_text(annotation: str) -> str:
    """A field's type as numpydoc writes it: ``tuple[str, ...]`` is ``list of str``."""
    if annotation.startswith("tuple[") and annotation.endswith(", ...]"):
        return f"list of {annotation[len('tuple[') : -len(', ...]')]}"
    return annotation


def docstring(summary: str, function: Callable[..., Any], *settings: type) -> str:
    """``summary``, then numpydoc Parameters for every parameter of ``function``: the common
    options from :data:`COMMON_OPTIONS`, the settings from their fields' metadata (of each
    class of ``settings``)."""
    from attncoda.experiments.contract import allowed_text

    fields = {f.name: f for cls in settings for f in dataclasses.fields(cls)}
    lines = [inspect.cleandoc(summary), "", "Parameters", "----------"]
    for name, param in inspect.signature(function).parameters.items():
        if name in fields:
            f = fields[name]
            help_text = str(f.metadata.get("help", name))
            kind, text = _type_text(str(f.type)), f"{help_text}; {allowed_text(f)}"
            text = text[:1].upper() + text[1:] + "."
        else:
            kind, text = COMMON_OPTIONS[name]
        shown = param.default is not inspect.Parameter.empty and "optional" not in kind
        default = f", default {param.default!r}" if shown else ""
        lines.append(f"{name} : {kind}{default}")
        lines.extend("    " + line for line in textwrap.wrap(text, 88))
    return "\n".join(lines) + "\n" + RETURNS_DOC


def rows_settings(name: str) -> type | None:
    """The settings of the shared rows (:class:`attncoda.run.config.Rows`: ``docs`` windows of
    ``max_tokens`` tokens) when experiment ``name`` reads rows, else None."""
    from attncoda.experiments.contract import experiment
    from attncoda.run.config import Rows

    return Rows if experiment(name).shared_rows else None


def experiment_function(name: str, summary: str) -> Callable[[_F], _F]:
    """The API function of experiment ``name`` from ``function``, whose keyword parameters
    are the common options, the rows' ``docs`` and ``max_tokens`` (for an experiment that
    reads rows) and every field of the experiment's ``Settings``, each with its default: its
    docstring is built from the fields (:func:`docstring`), an unknown keyword is refused with
    an :class:`AttncodaError` that names the known ones, an old name of :data:`RENAMED` is
    read with a :class:`DeprecationWarning`, errors name options as Python spells them
    (:func:`python_spelling`), and a signature that lost or gained a field fails at import."""
    from attncoda.experiments.contract import experiment, renamed_settings

    settings = experiment(name).settings
    rows = rows_settings(name)
    groups = (settings,) if rows is None else (rows, settings)

    def make(function: _F) -> _F:
        params = inspect.signature(function).parameters
        fields = [f.name for cls in groups for f in dataclasses.fields(cls)]
        mine = [p for p in params if p not in COMMON_OPTIONS]
        defaults = {f.name: f.default for cls in groups for f in dataclasses.fields(cls)}
        if mine != fields or any(params[f].default != defaults[f] for f in fields):
            raise AttncodaError(
                f"attncoda.{function.__name__} takes {mine}: it must take every field of "
                f"{name}'s Settings, {fields}, with its default"
            )

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            given = set(kwargs)
            kwargs = renamed_settings(kwargs, params, spelled="{}=")
            spelled = {new: old for old, new in RENAMED.items() if old in given}
            unknown = sorted(set(kwargs) - set(params))
            if "steps" in unknown:
                raise AttncodaError(
                    f"steps= is for an experiment over a checkpoint series' captures, not for "
                    f"{name}"
                )
            if unknown:
                common = [p for p in params if p in COMMON_OPTIONS and p != "source"]
                raise AttncodaError(
                    f"unknown setting {unknown[0]!r} of {name}: use one of "
                    f"{', '.join(sorted(fields))} (or the options {', '.join(common)})"
                )
            try:
                with one_line_errors():
                    return function(*args, **kwargs)
            except AttncodaError as exc:
                raise type(exc)(python_spelling(str(exc), params, spelled)) from None

        checked.__doc__ = docstring(summary, function, *groups)
        return cast(_F, checked)

    return make


#: An option on the command line as a message names it, with the value after it.
_FLAG = re.compile(r"--([a-z][a-z0-9-]*)(?: ('[^']*'|\"[^\"]*\"|[^\s,;:()]+))?")


def python_spelling(
    message: str, params: Iterable[str], spelled: Mapping[str, str] | None = None
) -> str:
    """``message`` (worded for the command line, as the runner and the store word theirs)
    with each option that is a parameter of the function spelled as Python spells it:
    ``--out 'x'`` is ``out='x'``, ``--device-map`` is ``device_map=``; a parameter the caller
    gave by an old name (``spelled``: new name to old) keeps the caller's name."""
    known = set(params)
    spelled = dict(spelled or {})

    def python(found: re.Match[str]) -> str:
        name = found.group(1).replace("-", "_")
        if name not in known:
            return found.group(0)
        value = found.group(2)
        shown = spelled.get(name, name)
        if value is None:
            return f"{shown}="
        if value[0] in "'\"" or value[0].isdigit() or value[0] in "{[-":
            return f"{shown}={value}"
        return f"{shown}={value!r}"

    message = _FLAG.sub(python, message)
    for new, old in spelled.items():
        message = re.sub(rf"\b{new}\b", old, message)
    return message


def check_common(common: Mapping[str, Any]) -> CaptureOptions:
    """The :class:`~attncoda.capture.options.CaptureOptions` of the common options, built once
    from those given (the others keep the declaration's default): a value the run would
    refuse later is refused here, before anything loads (the CLI builds the same object from
    its options, :func:`attncoda.cli._args.validate`)."""
    given = {f.name: common.get(f.name) for f in dataclasses.fields(CaptureOptions)}
    options = CaptureOptions(**{k: v for k, v in given.items() if v is not None})
    if common.get("text") is not None:
        from attncoda.data.corpus import read_corpus

        read_corpus(common["text"])  # exists, UTF-8, at least one document, or a named error
    return options
