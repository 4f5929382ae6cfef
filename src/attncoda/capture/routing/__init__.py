"""How attention is routed inside a model: the registered ``"attncoda"`` attention function.

What it holds: the AttentionInterface registration and :func:`routed`, which binds the
attention function to a :class:`Route` (the pass's recorder or a recording's, the head
edit: no ambient state) under a name of its own, the exact kernel (row statistics from the
full score rows) and the dtype recipe of each family's eager function it follows
(``_recipe``: seen by running it), the models inside a recording (:func:`marked`,
:func:`is_recorded`), the dispatch of ``method="fast"`` to the kernels of
:mod:`attncoda.capture.kernels`, and the per-layer head edit that the contexts of
:mod:`attncoda.capture.ablation` bind (:class:`EditPlan`, :func:`edited`,
:func:`layer_edit`; here, because the attention function applies it).

What it may import: :mod:`attncoda.capture.kernels`, :mod:`attncoda.capture.stats`,
:mod:`attncoda.models` (which architectures route), :mod:`attncoda._errors`, torch and
transformers.
"""

from __future__ import annotations

from ._exact import IGNORED_KEYWORDS, IMPLEMENTED_KEYWORDS, attncoda_attention, last_visible_key
from ._head_edit import EditPlan, layer_edit
from ._register import (
    ATTENTION_NAME,
    FAST_NAME,
    Route,
    edited,
    is_recorded,
    marked,
    register,
    routable,
    route_of,
    routed,
    unroutable_message,
)

__all__ = [
    "ATTENTION_NAME",
    "FAST_NAME",
    "IGNORED_KEYWORDS",
    "IMPLEMENTED_KEYWORDS",
    "EditPlan",
    "Route",
    "attncoda_attention",
    "edited",
    "is_recorded",
    "last_visible_key",
    "layer_edit",
    "marked",
    "register",
    "routable",
    "route_of",
    "routed",
    "unroutable_message",
]
