"""Capture: per-row attention statistics of a model, by floors.

The map, from the top floor down (each floor imports only the floors below it; the
import-linter contract of ``pyproject.toml`` checks it):

:mod:`attncoda.capture._capture`
    The entry point: :func:`capture` (one batch) and :func:`capture_windows` (token windows
    in batches) run a model into a :class:`Capture`, routed or through eager outputs.
:mod:`attncoda.capture._pass`
    One pass of a Hugging Face model into a recorder, routed or through eager outputs;
    whether a model's forward reaches the attention function; the kernels that served it.
:mod:`attncoda.capture.live`, :mod:`attncoda.capture.given`, :mod:`attncoda.capture.ablation`
    Live passes (:func:`recording`, the documents it keeps, the pass recorder, the wrappers
    of TransformerBridge and nnsight models and the batch :func:`capture` runs through
    them); attention that comes from elsewhere (:func:`from_attentions` and the input forms
    it reads, attention files, eager ``output_attentions``); head ablation and head gates
    (:func:`ablate`, :func:`head_gates`).
:mod:`attncoda.capture._result`, :mod:`attncoda.capture._forward`, :mod:`attncoda.capture._plan`
    The :class:`Capture` container and its table; the batch and forward helpers; the plan
    :func:`capture` checks its arguments into once and the batch its passes run, handed
    whole to the pass and the live recording.
:mod:`attncoda.capture.routing`, :mod:`attncoda.capture.options`
    The registered ``"attncoda"`` attention function: registration and :func:`routed`, the
    exact kernel, the recording state, the dispatch to the fast kernels, the head edit;
    :class:`~attncoda.capture.options.CaptureOptions`, how a run loads and captures (built
    and checked once, handed whole to :func:`capture`).
:mod:`attncoda.capture.kernels`
    The fast kernels (one module each, named as users type them), their registry (the
    choices, selection and every capability check), their mask geometry and bounds.
:mod:`attncoda.capture.stats`
    The row maths, the :class:`Recorder`, the row-sampling plan, the workspace.
:mod:`attncoda.capture.names`, :mod:`attncoda.capture.sinks`
    The choices capture takes (modes, methods, attention file types) and the sink
    specs (:func:`parse_sink`, :func:`resolve_sinks`), free of torch so that the command
    line checks them without the model layer.

The whole package may import :mod:`attncoda.models` and the floors below it, never
:mod:`attncoda.experiments` or anything above. The names below are served lazily, so that
``import attncoda.capture`` (and :mod:`attncoda.capture.names`, :mod:`attncoda.capture.sinks`,
:mod:`attncoda.capture.kernels.registry`) stays free of torch.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._capture import capture, capture_windows
    from ._forward import forward, forward_kwargs, next_token_nll, pad
    from ._result import Capture, assemble, capture_frame, concatenate
    from .ablation import ablate, head_gates
    from .given import from_attentions, read_attentions
    from .kernels.registry import KERNELS
    from .live import Recording, recording
    from .names import ATTENTION_FILES, METHODS, MODES
    from .routing import routed
    from .sinks import parse_sink
    from .stats import COUNTS, STATISTICS, Recorder, row_statistics

_MODULES = {
    "._capture": ("capture", "capture_windows"),
    "._forward": ("forward", "forward_kwargs", "next_token_nll", "pad"),
    "._result": ("Capture", "assemble", "capture_frame", "concatenate"),
    ".ablation": ("ablate", "head_gates"),
    ".given": ("from_attentions", "read_attentions"),
    ".live": ("Recording", "recording"),
    ".kernels.registry": ("KERNELS",),
    ".names": ("ATTENTION_FILES", "METHODS", "MODES"),
    ".routing": ("routed",),
    ".sinks": ("parse_sink",),
    ".stats": ("COUNTS", "STATISTICS", "Recorder", "row_statistics"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "ATTENTION_FILES",
    "COUNTS",
    "Capture",
    "KERNELS",
    "METHODS",
    "MODES",
    "Recorder",
    "Recording",
    "STATISTICS",
    "ablate",
    "assemble",
    "capture",
    "capture_frame",
    "capture_windows",
    "concatenate",
    "forward",
    "forward_kwargs",
    "from_attentions",
    "head_gates",
    "next_token_nll",
    "pad",
    "parse_sink",
    "read_attentions",
    "recording",
    "routed",
    "row_statistics",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value


class _CallablePackage(types.ModuleType):
    """This package, which called is the single-batch capture: ``attncoda.capture(model,
    input_ids, ...)`` is :func:`attncoda.capture._capture.capture`. The name cannot be both
    a function and the package (importing any of its modules binds the package to it), so
    the package answers the call, lazily: calling imports nothing before the call itself."""

    #: Where the function it calls is defined (the API page documents that function).
    called = "attncoda.capture._capture.capture"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.capture(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
