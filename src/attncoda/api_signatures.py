"""How the experiment functions of :mod:`attncoda.api` show their settings: a real signature
(the common options, then every field of the experiment's ``Settings`` with its default), a
numpydoc docstring built from the fields' metadata (:mod:`attncoda.experiments.setting`), a
refusal that names the known keywords, and the checks of the common options made before
anything loads.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import textwrap
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from attncoda._errors import AttncodaError

__all__ = ["COMMON_OPTIONS", "RETURNS_DOC", "check_common", "docstring", "experiment_function"]


#: The options every experiment function takes beside its settings, and what each is
#: (the docstring's text; ``steps`` is collapse's alone).
COMMON_OPTIONS = {
    "source": (
        "str, Capture, live model, or a list of one kind",
        'Model specs (``"minilm"``, ``"owner/name@rev"``, a folder), run through the '
        "runner as the CLI does; live models of this process (``(model, tokenizer)``, what "
        ":func:`attncoda.load_model` returned, a TransformerLens ``TransformerBridge``, an "
        "nnsight ``LanguageModel``), run through the same runner and captured through the "
        "object itself; or captures (:func:`attncoda.capture_windows`, "
        ":func:`attncoda.from_attentions`), run in this process.",
    ),
    "sink": ("str", 'Sink spec (docs/design.md, "Sinks").'),
    "seed": ("int", "The run's seed (bootstrap resamples, MDS, random pruning)."),
    "out": (
        "str or path, optional",
        "Model specs and live models: the run folder to keep (``attncoda report OUT`` renders it); "
        "None: a temporary folder.",
    ),
    "device": ("str", 'Model specs only: where models run (``"cpu"``, ``"cuda"``, ``"auto"``).'),
    "dtype": ("str, optional", "Model specs only: the models' parameter dtype (None: float32)."),
    "method": (
        "str",
        'Model specs and live models: the capture method, ``"exact"`` (the reference) or '
        '``"fast"``.',
    ),
    "kernel": (
        "str",
        'Model specs and live models, with ``method="fast"``: the fast path\'s kernel, '
        '``"auto"`` (the fused Triton pass on CUDA, two SDPA calls otherwise), ``"triton"`` '
        'or ``"sdpa"``.',
    ),
    "device_map": (
        "str or dict, optional",
        "Model specs only: spread each model over GPUs, the CPU and the disk instead of "
        '``device`` (``"auto"``, ``"balanced"``, ``"sequential"`` or ``{module: device}``, as '
        "for :func:`attncoda.load_model`); weights put on the disk go to ``out/offload``.",
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

Raises
------
AttncodaError
    For an unknown option, or a value an option does not allow, before any model loads.
"""

_F = TypeVar("_F", bound=Callable[..., Any])


def _type_text(annotation: str) -> str:
    """A field's type as numpydoc writes it: ``tuple[str, ...]`` is ``list of str``."""
    if annotation.startswith("tuple[") and annotation.endswith(", ...]"):
        return f"list of {annotation[len('tuple[') : -len(', ...]')]}"
    return annotation


def docstring(summary: str, function: Callable[..., Any], settings: type) -> str:
    """``summary``, then numpydoc Parameters for every parameter of ``function``: the common
    options from :data:`COMMON_OPTIONS`, the settings from their fields' metadata."""
    from attncoda.experiments.setting import allowed_text

    fields = {f.name: f for f in dataclasses.fields(settings)}
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


def experiment_function(name: str, summary: str) -> Callable[[_F], _F]:
    """The API function of experiment ``name`` from ``function``, whose keyword parameters
    are the common options and every field of the experiment's ``Settings`` with its
    default: its docstring is built from the fields (:func:`docstring`), an unknown keyword
    is refused with an :class:`AttncodaError` that names the known ones, and a signature that
    lost or gained a field fails at import."""
    from attncoda.experiments.contract import experiment

    settings = experiment(name).settings

    def make(function: _F) -> _F:
        params = inspect.signature(function).parameters
        fields = [f.name for f in dataclasses.fields(settings)]
        mine = [p for p in params if p not in COMMON_OPTIONS]
        defaults = {f.name: f.default for f in dataclasses.fields(settings)}
        if mine != fields or any(params[f].default != defaults[f] for f in fields):
            raise AttncodaError(
                f"attncoda.{function.__name__} takes {mine}: it must take every field of "
                f"{name}'s Settings, {fields}, with its default"
            )

        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            unknown = sorted(set(kwargs) - set(params))
            if "steps" in unknown:
                raise AttncodaError(f"steps= is for collapse over captures, not for {name}")
            if unknown:
                common = [p for p in params if p in COMMON_OPTIONS and p != "source"]
                raise AttncodaError(
                    f"unknown setting {unknown[0]!r} of {name}: use one of "
                    f"{', '.join(sorted(fields))} (or the options {', '.join(common)})"
                )
            return function(*args, **kwargs)

        checked.__doc__ = docstring(summary, function, settings)
        return cast(_F, checked)

    return make


def check_common(common: Mapping[str, Any]) -> None:
    """Refuse a common option the run would refuse later, before anything loads (the CLI's
    own checks of the same options, :func:`attncoda.cli_args.validate`)."""
    from attncoda.capture.names import KERNELS, METHODS
    from attncoda.capture.sinks import parse_sink
    from attncoda.run.common import DEVICES, DTYPES

    seed = common["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise AttncodaError(f"seed must be an integer of at least 0; got {seed!r}")
    parse_sink(common["sink"])
    for option, allowed in (
        ("method", METHODS),
        ("kernel", KERNELS),
        ("device", DEVICES),
        ("dtype", DTYPES),
    ):
        value = common.get(option)
        if value is not None and value not in allowed:
            raise AttncodaError(f"unknown {option} {value!r}: use one of {', '.join(allowed)}")
    if common.get("device_map") is not None:
        from attncoda.models.placement import check_run_placement

        check_run_placement(common.get("device") or "cpu", common["device_map"], None, "offload")
    if common.get("text") is not None:
        from attncoda.data.corpus import read_corpus

        read_corpus(common["text"])  # exists, UTF-8, at least one document, or a named error
