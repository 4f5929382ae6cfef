"""The recording state of the routed attention function: the active :class:`Recorder` and the
models inside a :func:`attncoda.capture.live.recording` block.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Iterator

from attncoda.capture.stats import Recorder

__all__ = ["active_recorder", "is_recorded", "marked"]

ACTIVE: contextvars.ContextVar[Recorder | None] = contextvars.ContextVar(
    "attncoda_recorder", default=None
)
#: Models inside an :func:`attncoda.capture.live.recording` block: one route at a time.
RECORDED: weakref.WeakSet = weakref.WeakSet()


def active_recorder() -> contextvars.ContextVar[Recorder | None]:
    """The context variable holding the recorder the attention function fills (None: none).

    :func:`routed` sets it for its block; a recording sets it for each forward pass."""
    return ACTIVE


def is_recorded(model) -> bool:
    """Whether ``model`` is inside a :func:`attncoda.capture.live.recording` block."""
    return model in RECORDED


@contextlib.contextmanager
def marked(model) -> Iterator[None]:
    """Mark ``model`` as recorded for the block without routing it (a TransformerBridge,
    whose components compute attention themselves)."""
    RECORDED.add(model)
    try:
        yield
    finally:
        RECORDED.discard(model)
