"""Live passes: statistics recorded while a model (Hugging Face, TransformerBridge or
nnsight) runs the caller's own forward passes.

What it holds: the :func:`recording` context and its :class:`Recording`, the documents a
recording keeps, the helpers of each pass it records (prefill and generation steps, each
into a :class:`attncoda.capture.stats.Recorder`), the wrappers of live models
(:func:`kind_of`, :func:`live_model`, :func:`run_live`, :func:`bridge_score_hooks`), and
:func:`capture_live`, the batch :func:`attncoda.capture.capture` runs through a wrapper.

What it may import: :mod:`attncoda.capture._result`, :mod:`attncoda.capture._forward`,
:mod:`attncoda.capture._plan`, :mod:`attncoda.capture.routing`,
:mod:`attncoda.capture.kernels.registry`, :mod:`attncoda.capture.stats`,
:mod:`attncoda.capture.names`, :mod:`attncoda.capture.sinks`, :mod:`attncoda.models`,
:mod:`attncoda._errors`, numpy and torch.
"""

from __future__ import annotations

from ._batch import capture_live
from ._live import KINDS, bridge_score_hooks, kind_of, live_model, run_live
from ._pass_recorder import cache_of, check_mask, past_length, record_scores
from ._recording import Recording, recording

__all__ = [
    "KINDS",
    "Recording",
    "bridge_score_hooks",
    "cache_of",
    "capture_live",
    "check_mask",
    "kind_of",
    "live_model",
    "past_length",
    "record_scores",
    "recording",
    "run_live",
]
