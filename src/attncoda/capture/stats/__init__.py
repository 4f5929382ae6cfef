"""Row statistics: the lowest floor of :mod:`attncoda.capture` (with
:mod:`attncoda.capture.names` and :mod:`attncoda.capture.sinks`).

What it holds:

- the pure row maths (:func:`row_statistics`, :func:`sink_columns`, the names
  :data:`STATISTICS` and :data:`COUNTS`), what a pass needs to know (:class:`PassPlan`, fixed)
  and the :class:`Recorder` that keeps what it produces per layer, and the row-sampling plan
  (:func:`record_plan`);
- :func:`split_rows`, the split of a fast row into its sink and content parts;
- the per-forward :class:`Workspace` of reusable buffers and mask blocks.

What it may import: :mod:`attncoda._errors`, numpy and torch; nothing else of attncoda.
"""

from __future__ import annotations

from ._plan import ROWS_AUTO, PassPlan, record_plan
from ._recorder import Recorder
from ._row_split import ContentSummary, split_rows
from ._rows import COUNTS, STATISTICS, row_statistics, sink_columns
from ._workspace import MASK_CACHE_BYTES, MaskBlock, Workspace, mask_block

__all__ = [
    "COUNTS",
    "ContentSummary",
    "MASK_CACHE_BYTES",
    "ROWS_AUTO",
    "STATISTICS",
    "MaskBlock",
    "PassPlan",
    "Recorder",
    "Workspace",
    "mask_block",
    "record_plan",
    "row_statistics",
    "sink_columns",
    "split_rows",
]
