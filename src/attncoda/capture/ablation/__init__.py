"""Head ablation and head gates, applied inside the routed ``"attncoda"`` attention function.

What it holds: the contexts :func:`ablate` and :func:`head_gates`, and the parsing and
labelling of heads (:func:`parse_heads`, :func:`head_labels`, :func:`head_counts`). The
per-layer edit they set is :func:`attncoda.capture.routing.layer_edit`.

What it may import: :mod:`attncoda.capture.routing`, :mod:`attncoda._errors`, torch.
"""

from __future__ import annotations

from ._ablation import MODES, ablate, head_counts, head_gates, head_labels, parse_heads

__all__ = ["MODES", "ablate", "head_counts", "head_gates", "head_labels", "parse_heads"]
