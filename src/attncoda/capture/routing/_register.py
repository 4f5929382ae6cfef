"""Routing a model's attention through the registered ``"attncoda"`` function.

``transformers`` dispatches a layer's attention through ``AttentionInterface`` by the name
in ``config._attn_implementation``. :func:`routed` binds
:func:`attncoda.capture.routing.attncoda_attention` to a :class:`Route` (what the block's
passes need), registers it under a name of its own with its mask function (without one the
function would receive no mask at all), switches the model to it and restores the previous
implementation afterwards: the function reads nothing but what it is bound to.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.capture.kernels import boolean_mask
from attncoda.capture.stats import Recorder
from attncoda.models.zoo import routable

from ._exact import attncoda_attention

__all__ = [
    "ATTENTION_NAME",
    "FAST_NAME",
    "Route",
    "edited",
    "is_recorded",
    "marked",
    "register",
    "routable",
    "route_of",
    "routed",
    "unroutable_message",
]

ATTENTION_NAME = "attncoda"
#: The same attention function under ``method="fast"``, with boolean masks
#: (:func:`boolean_mask`): one byte a key instead of eager's four-byte additive floats, so a
#: 32k-token mask is 1 GiB, not 4 GiB, per mask kind (causal, sliding window).
FAST_NAME = "attncoda_fast"
#: Models inside an :func:`attncoda.capture.live.recording` block: one route at a time.
RECORDED: weakref.WeakSet = weakref.WeakSet()


@dataclass(frozen=True)
class Route:
    """What the attention function of one :func:`routed` block is bound to: the recorder of
    its pass (None: nothing recorded), or a recording (:class:`attncoda.capture.live.
    Recording`) whose ``recorder`` is that of the pass it has open; the head edit of an
    ablation (an :class:`EditPlan`, or None); and whether its masks are boolean (``fast``).
    """

    recorder: Recorder | None = None
    recording: Any = None
    edit: Any = None
    fast: bool = False

    def current(self) -> Recorder | None:
        """The recorder of the pass under way (None: none)."""
        return self.recorder if self.recording is None else self.recording.recorder


def register() -> None:
    """Register ``"attncoda"`` and ``"attncoda_fast"`` in transformers' attention and
    attention-mask interfaces: the function bound to no route (nothing recorded or edited).

    Idempotent. The mask function of ``"attncoda"`` is transformers' ``eager_mask``
    (additive float mask, ``0`` where a key is visible and the dtype's minimum where it is
    not); that of ``"attncoda_fast"`` is :func:`boolean_mask`.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTENTION_NAME, attncoda_attention)
    AttentionMaskInterface.register(ATTENTION_NAME, eager_mask)
    AttentionInterface.register(FAST_NAME, attncoda_attention)
    AttentionMaskInterface.register(FAST_NAME, boolean_mask)


def unroutable_message(model: object) -> str:
    """The error message for a model whose attention cannot be routed."""
    name = type(model).__name__
    return (
        f"{name} does not route its attention through transformers' AttentionInterface, "
        f"so capture cannot read its scores: use mode='outputs' (eager output_attentions "
        f"with an explicit zero policy)"
    )


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


def _bound(name: str) -> Route | None:
    """The route of the function registered under ``name`` (None: none, or unbound)."""
    from transformers import AttentionInterface

    return getattr(AttentionInterface().get(name), "keywords", {}).get("route")


def route_of(model) -> Route | None:
    """The route ``model`` runs through now (None: it is not routed by :func:`routed`)."""
    return _bound(model.config._attn_implementation)


@contextlib.contextmanager
def _switched(model, route: Route) -> Iterator[None]:
    """``model`` through the function bound to ``route`` in the block, under the first of
    ``attncoda_1``, ``attncoda_2``, ... (``attncoda_fast_1``, ...) no route holds; then the
    previous implementation, and the unbound function under that name (it keeps nothing)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    base = FAST_NAME if route.fast else ATTENTION_NAME
    names = (f"{base}_{n}" for n in itertools.count(1))
    name = next(name for name in names if _bound(name) is None)
    AttentionInterface.register(name, functools.partial(attncoda_attention, route=route))
    AttentionMaskInterface.register(name, boolean_mask if route.fast else eager_mask)
    previous = model.config._attn_implementation
    try:
        model.set_attn_implementation(name)
        yield
    finally:
        model.set_attn_implementation(previous)
        AttentionInterface.register(name, attncoda_attention)


@contextlib.contextmanager
def routed(
    model, recorder: Recorder | None = None, *, method: str | None = None, recording=None
) -> Iterator[None]:
    """Run ``model`` with the ``"attncoda"`` attention function inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model in eval mode whose attention layers use ``ALL_ATTENTION_FUNCTIONS``. Routed
        already (inside an ablation), its head edit is kept.
    recorder : Recorder, optional
        Collects statistics for the forward passes run inside the block, as its plan says.
    method : {"exact", "fast"}, optional
        The method where no recorder says it (a recording's recorders come one per pass).
    recording : Recording, optional
        A recording whose open pass's recorder each call fills; the model is marked as
        recorded for the block (:func:`routed` refuses it meanwhile).

    Raises
    ------
    AttncodaError
        When the model class does not use the AttentionInterface (e.g. Bloom, MPNet), or
        the model is inside a recording block.
    """
    if not routable(model):
        raise AttncodaError(unroutable_message(model))
    if is_recorded(model):
        raise AttncodaError(
            f"{type(model).__name__} is inside an attncoda.recording block: leave that block "
            f"before capturing or recording this model again"
        )
    fast = (recorder.plan.method if recorder is not None else method) == "fast"
    route = Route(recorder, recording, getattr(route_of(model), "edit", None), fast)
    with marked(model) if recording is not None else contextlib.nullcontext():
        try:
            with _switched(model, route):
                yield
        finally:
            if recorder is not None:
                recorder.workspace.clear()  # the pass is over: its buffers go back now


@contextlib.contextmanager
def edited(model, edit) -> Iterator[None]:
    """Run ``model`` with the head edit ``edit`` (:class:`EditPlan`) inside the block: its
    route, where it has one (a capture's, a recording's), kept with the edit replaced;
    otherwise a route of its own, which records nothing (:func:`routed`)."""
    outer = route_of(model)
    with routed(model) if outer is None else contextlib.nullcontext():
        with _switched(model, replace(outer or Route(), edit=edit)):
            yield
