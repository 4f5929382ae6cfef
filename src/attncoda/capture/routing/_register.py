"""Routing a model's attention through the registered ``"attncoda"`` function.

``transformers`` dispatches a layer's attention through ``AttentionInterface`` by the name
in ``config._attn_implementation``. :func:`routed` registers
:func:`attncoda.capture.routing.attncoda_attention` under the name ``"attncoda"`` (with
``eager_mask`` as its mask function: without one the function would receive no mask at all),
switches the model to it and restores the previous implementation afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from attncoda._errors import AttncodaError
from attncoda.capture.kernels import boolean_mask
from attncoda.capture.stats import Recorder
from attncoda.models.zoo import routable

from ._exact import attncoda_attention
from ._state import ACTIVE, RECORDED, is_recorded

__all__ = ["ATTENTION_NAME", "FAST_NAME", "register", "routable", "routed", "unroutable_message"]

ATTENTION_NAME = "attncoda"
#: The same attention function under ``method="fast"``, with boolean masks
#: (:func:`boolean_mask`): one byte a key instead of eager's four-byte additive floats, so a
#: 32k-token mask is 1 GiB, not 4 GiB, per mask kind (causal, sliding window).
FAST_NAME = "attncoda_fast"


def register() -> None:
    """Register ``"attncoda"`` and ``"attncoda_fast"`` in transformers' attention and
    attention-mask interfaces.

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


@contextlib.contextmanager
def routed(
    model,
    recorder: Recorder | None = None,
    *,
    method: str | None = None,
    recording: bool = False,
) -> Iterator[None]:
    """Run ``model`` with the ``"attncoda"`` attention function inside the block.

    Parameters
    ----------
    model : transformers.PreTrainedModel
        A model in eval mode whose attention layers use ``ALL_ATTENTION_FUNCTIONS``.
    recorder : Recorder, optional
        Collects statistics for the forward passes run inside the block.
    method : {"exact", "fast"}, optional
        The attention function's method when no recorder says it (a recording, whose
        recorders come one per pass).
    recording : bool
        Mark the model as recorded for the block: :func:`routed` refuses it meanwhile.

    Raises
    ------
    AttncodaError
        When the model class does not use the AttentionInterface (e.g. Bloom, MPNet), or
        the model is inside a recording block.
    """
    register()
    if not routable(model):
        raise AttncodaError(unroutable_message(model))
    if is_recorded(model):
        raise AttncodaError(
            f"{type(model).__name__} is inside an attncoda.recording block: leave that block "
            f"before capturing or recording this model again"
        )
    previous = model.config._attn_implementation
    fast = (recorder.method if recorder is not None else method) == "fast"
    model.set_attn_implementation(FAST_NAME if fast else ATTENTION_NAME)
    token = ACTIVE.set(recorder)
    if recording:
        RECORDED.add(model)
    try:
        yield
    finally:
        if recording:
            RECORDED.discard(model)
        ACTIVE.reset(token)
        model.set_attn_implementation(previous)
        if recorder is not None:
            recorder.workspace.clear()  # the pass is over: its buffers go back now
