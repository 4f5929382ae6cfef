"""Live passes: statistics recorded while a model (Hugging Face, TransformerBridge or
nnsight) runs the caller's own forward passes.

What it holds: the :func:`recording` context and its :class:`Recording`, the
:class:`PassRecorder` that keeps each pass (prefill and generation steps), and the wrappers
of live models (:func:`kind_of`, :func:`live_model`, :func:`run_live`,
:func:`bridge_score_hooks`).

What it may import: :mod:`attncoda.capture._result`, :mod:`attncoda.capture.routing`,
:mod:`attncoda.capture.stats`, :mod:`attncoda.capture.names`, :mod:`attncoda._errors`,
numpy and torch.
"""

from __future__ import annotations

from ._live import KINDS, bridge_score_hooks, kind_of, live_model, run_live
from ._pass_recorder import PassRecorder, cache_of, check_mask, past_length, record_scores
from ._recording import Recording, recording

__all__ = [
    "KINDS",
    "PassRecorder",
    "Recording",
    "bridge_score_hooks",
    "cache_of",
    "check_mask",
    "kind_of",
    "live_model",
    "past_length",
    "record_scores",
    "recording",
    "run_live",
]
