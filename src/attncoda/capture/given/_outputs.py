"""Attention read from eager ``output_attentions``, for models that do not route it.

``mode="outputs"`` of :func:`attncoda.capture.capture` (docs/design.md, "Models that
do not route their attention"): the model runs with eager attention on every config and
returns its probabilities, whose logs are folded into the same :class:`Recorder` the
routed attention function fills. A probability of exactly 0 on a visible key follows the
zero policy, and rows that do not sum to 1 are refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from attncoda._errors import AttncodaError
from attncoda.capture._forward import forward
from attncoda.capture.stats import Recorder

__all__ = ["eager_attention", "read_outputs"]


def read_outputs(
    model, ids, mask, recorder: Recorder, zeros: str, logits: bool = True
) -> tuple[Any, int]:
    """One eager forward pass with ``output_attentions``, its rows folded into ``recorder``.

    Parameters
    ----------
    model : transformers.PreTrainedModel
    ids, mask : torch.Tensor
        int64 ``(batch, pos)``, checked by :func:`attncoda.capture._forward.check_batch`
        (on the CPU: the forward moves them to the model's input device).
    recorder : Recorder
        Receives every layer's rows as one block: float64 logs of the probabilities, the
        visible keys those of the mask (and the causal triangle where no probability lies
        above it).
    zeros : {"raise", "floor"}
        What a visible key of probability exactly 0 gets (:func:`attncoda.capture._capture`).
    logits : bool
        Whether the output keeps every position's logits (``False``: the last one only).

    Returns
    -------
    output, n_floored
        The model's output object and how many probabilities were floored.
    """
    real = mask.bool()
    offsets = real.long().argmax(-1)
    with eager_attention(model):
        out = forward(model, ids, mask, output_attentions=True, logits=logits)
    atts = getattr(out, "attentions", None)
    if not atts or any(a is None for a in atts):
        raise AttncodaError(
            f"{type(model).__name__} returned no attention probabilities with "
            f"output_attentions=True"
        )
    # The mask follows the probabilities (on the model's device, or its last layer's).
    real = real.to(atts[0].device)
    # The probabilities are the model's, rounded to its dtype: the capture says which.
    recorder.read_dtype = str(atts[0].dtype).removeprefix("torch.")
    causal = _is_causal(atts, real)
    visible = real[:, None, :, None] & real[:, None, None, :]
    if causal:
        visible = visible & torch.ones_like(visible[0, 0]).tril()
    floored = 0
    for layer, probs in enumerate(atts):
        visible = visible.to(probs.device)
        _check_closed(probs, layer, visible, model)
        log_rows, zeros_here = _log_probs(probs, layer, visible, offsets, zeros)
        floored += zeros_here
        b, h, q, k = log_rows.shape
        recorder.add_block(recorder.begin_layer(b, h, q, k), 0, log_rows, visible)
    return out, floored


@contextlib.contextmanager
def eager_attention(model) -> Iterator[None]:
    """Every config of ``model`` set to eager attention inside the block, then restored.

    Set on the configs directly: classes outside the AttentionInterface (Falcon before
    transformers 5.25) still read ``config._attn_implementation`` to choose their mask, and
    only eager masks are additive.
    """
    found = (getattr(module, "config", None) for module in model.modules())
    configs: dict[int, Any] = {id(c): c for c in found if hasattr(c, "_attn_implementation")}
    previous = {key: c._attn_implementation for key, c in configs.items()}
    try:
        for c in configs.values():
            c._attn_implementation = "eager"
        yield
    finally:
        for key, c in configs.items():
            c._attn_implementation = previous[key]


def _log_probs(probs, layer, visible, offsets, zeros: str) -> tuple[torch.Tensor, int]:
    """float64 log of eager probabilities ``(batch, head, pos, pos)``, with the zero policy."""
    zero = visible & (probs == 0)
    floored = int(zero.sum())
    if floored:
        tiny = torch.finfo(probs.dtype).tiny
        if zeros == "raise":
            doc, head, query, key = (int(v) for v in zero.nonzero()[0])
            off = int(offsets[doc])
            raise AttncodaError(
                f"attention probability is exactly 0 at layer {layer}, head {head}, document "
                f"{doc}, query_pos {query - off}, key_pos {key - off}: its log is -inf; pass "
                f"zeros='floor' to clip zeros to {tiny:g} (the smallest normal "
                f"{str(probs.dtype).removeprefix('torch.')}) and count them"
            )
        probs = torch.where(zero, torch.full((), tiny, dtype=probs.dtype), probs)
    # Off the visible keys the log is set to 0 (not -inf): the statistics ignore those keys
    # and need finite entries there.
    logs = torch.log(probs.to(torch.float64))
    return logs.masked_fill(~visible.expand_as(logs), 0.0), floored


def _is_causal(atts, real: torch.Tensor) -> bool:
    length = real.shape[1]
    upper = torch.ones(length, length, dtype=torch.bool, device=real.device).triu(1)
    future = upper & real[:, None, :, None] & real[:, None, None, :]
    return all(bool((probs.masked_select(future) == 0).all()) for probs in atts)


def _check_closed(probs, layer: int, visible, model) -> None:
    """Refuse eager rows that do not sum to 1: their missing mass sits on no token."""
    total = probs.to(torch.float64).masked_fill(~visible.expand_as(probs), 0.0).sum(-1)
    rows = visible.any(-1).expand_as(total)
    gap = (total - 1.0).abs().masked_fill(~rows, 0.0)
    worst = float(gap.max()) if gap.numel() else 0.0
    if worst > 1e-3:
        raise AttncodaError(
            f"{type(model).__name__}'s eager attention rows of layer {layer} sum to "
            f"{1.0 - worst:.6g}, not 1: the missing mass sits on no token (learned sinks?); "
            f"capture it with mode='attention', which reads the sink logits"
        )
