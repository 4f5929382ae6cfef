"""How attention is routed inside a model: the registered ``"attncoda"`` attention function.

What it holds: the AttentionInterface registration and :func:`routed`, the exact kernel
(row statistics from the full score rows) and the dtype recipe of each family's eager
function it follows (``_recipe``: seen by running it), the recording state (:func:`active_recorder`,
:func:`marked`, :func:`is_recorded`), the dispatch of ``method="fast"`` to the kernels of
:mod:`attncoda.capture.kernels`, and the per-layer head edit that the contexts of
:mod:`attncoda.capture.ablation` set (:class:`EditPlan`, :data:`ACTIVE_PLAN`,
:func:`layer_edit`; here, because the attention function applies it).

What it may import: :mod:`attncoda.capture.kernels`, :mod:`attncoda.capture.stats`,
:mod:`attncoda.models` (which architectures route), :mod:`attncoda._errors`, torch and
transformers.
"""

from __future__ import annotations

from ._exact import IGNORED_KEYWORDS, IMPLEMENTED_KEYWORDS, attncoda_attention, last_visible_key
from ._head_edit import ACTIVE_PLAN, EditPlan, layer_edit
from ._register import (
    ATTENTION_NAME,
    FAST_NAME,
    register,
    routable,
    routed,
    unroutable_message,
)
from ._state import active_recorder, is_recorded, marked

__all__ = [
    "ACTIVE_PLAN",
    "ATTENTION_NAME",
    "FAST_NAME",
    "IGNORED_KEYWORDS",
    "IMPLEMENTED_KEYWORDS",
    "EditPlan",
    "active_recorder",
    "attncoda_attention",
    "is_recorded",
    "last_visible_key",
    "layer_edit",
    "marked",
    "register",
    "routable",
    "routed",
    "unroutable_message",
]
