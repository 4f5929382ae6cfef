"""Row statistics: the lowest floor of :mod:`attncoda.capture`.

What it holds:

- the pure row maths (:func:`row_statistics`, the names :data:`STATISTICS` and
  :data:`COUNTS`), the stateful :class:`Recorder` that keeps them per layer, and the
  row-sampling plan (:func:`record_plan`);
- :func:`split_rows`, the split of a fast row into its sink and content parts;
- sink specs (:func:`parse_sink`, :func:`resolve_sinks`, :func:`auto_sinks`);
- the per-forward :class:`Workspace` of reusable buffers and mask blocks.

What it may import: :mod:`attncoda._errors`, numpy and torch; nothing else of attncoda.
Its names are served lazily, so that :func:`parse_sink` (which the command line checks
before any model loads) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._row_split import split_rows
    from ._sinks import (
        AUTO_EPSILON,
        LEARNED,
        SinkSpec,
        auto_sinks,
        parse_sink,
        resolve_sinks,
        token_id,
    )
    from ._statistics import COUNTS, ROWS_AUTO, STATISTICS, Recorder, record_plan, row_statistics
    from ._workspace import MASK_CACHE_BYTES, MaskBlock, Workspace, mask_block

_MODULES = {
    "._row_split": ("split_rows",),
    "._sinks": (
        "AUTO_EPSILON",
        "LEARNED",
        "SinkSpec",
        "auto_sinks",
        "parse_sink",
        "resolve_sinks",
        "token_id",
    ),
    "._statistics": (
        "COUNTS",
        "ROWS_AUTO",
        "STATISTICS",
        "Recorder",
        "record_plan",
        "row_statistics",
    ),
    "._workspace": ("MASK_CACHE_BYTES", "MaskBlock", "Workspace", "mask_block"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "AUTO_EPSILON",
    "COUNTS",
    "LEARNED",
    "MASK_CACHE_BYTES",
    "MaskBlock",
    "ROWS_AUTO",
    "Recorder",
    "STATISTICS",
    "SinkSpec",
    "Workspace",
    "auto_sinks",
    "mask_block",
    "parse_sink",
    "record_plan",
    "resolve_sinks",
    "row_statistics",
    "split_rows",
    "token_id",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value
