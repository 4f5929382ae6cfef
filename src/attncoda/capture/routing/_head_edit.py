"""The per-layer edit of ablated and gated heads, applied inside the routed ``"attncoda"``
attention function (:mod:`attncoda.capture.routing._exact`) while a context of
:mod:`attncoda.capture.ablation._ablation` is active: its :class:`EditPlan` is bound to the
function with the route (:func:`attncoda.capture.routing.edited`). Its own module, so that
the attention function reads the plan without importing the ablation contexts, which route
the model through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attncoda._errors import AttncodaError

__all__ = ["EditPlan", "layer_edit"]


@dataclass
class EditPlan:
    """What the attention function does to each layer while a context of
    :mod:`attncoda.capture.ablation._ablation` (``ablate``, ``head_gates``) is active."""

    model_name: str
    n_layers: int
    n_heads: int
    mode: str | None = None
    heads: dict[int, torch.Tensor] = field(default_factory=dict)
    gates: torch.Tensor | None = None  # (batch or 1, layer, head)
    calls: int = 0


def _first_real_key(attention_mask, batch: int, device) -> torch.Tensor:
    """``(batch,)``: the first key any query of each document may see (0 without a mask)."""
    if attention_mask is None:
        return torch.zeros(batch, dtype=torch.long, device=device)
    if attention_mask.dtype == torch.bool:
        seen = attention_mask
    else:
        seen = attention_mask > torch.finfo(attention_mask.dtype).min / 2
    seen = seen.any(dim=-2).any(dim=1)  # (batch, key_pos): keys some query may see
    first = seen.to(torch.uint8).argmax(dim=-1)
    return first.expand(batch) if first.shape[0] != batch else first


def layer_edit(plan: EditPlan | None, query, attention_mask) -> Callable | None:
    """The edit of this attention call's heads, or None (the hot path when nothing is edited).

    Called once per attention call by :func:`attncoda.capture.routing.attncoda_attention`.

    Parameters
    ----------
    plan : EditPlan or None
        The edit the function is bound to (None: none); its layer count advances.
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    attention_mask : torch.Tensor or None
        The full additive (or bool) mask ``(batch, 1, query_pos, key_pos)``.

    Returns
    -------
    callable or None
        ``edit(part, value, visible) -> part`` for a block of outputs ``part`` ``(batch,
        head, q, head_dim)``, values ``(batch, kv_head, key_pos, head_dim)`` and visible keys
        bool ``(batch, 1, q, key_pos)`` (or None: every key).
    """
    if plan is None:
        return None
    layer = plan.calls
    plan.calls += 1
    batch, n_heads = query.shape[0], query.shape[1]
    if layer >= plan.n_layers or n_heads != plan.n_heads:
        raise AttncodaError(
            f"attention call {layer} of one forward pass has {n_heads} heads, but "
            f"{plan.model_name} has {plan.n_layers} layers of {plan.n_heads} heads: ablation "
            f"counts the attention calls of each forward pass of the model itself (call the "
            f"model, not a submodule; cross-attention is not supported)"
        )
    heads = plan.heads.get(layer)
    gate = None
    if plan.gates is not None:
        gate = plan.gates[:, layer]
        if gate.shape[0] not in (1, batch):
            raise AttncodaError(
                f"gates have a batch of {gate.shape[0]} documents, the forward pass has {batch}"
            )
    if heads is None and gate is None:
        return None
    mode = plan.mode
    if heads is not None:
        heads = heads.to(query.device)
    sink = (
        _first_real_key(attention_mask, batch, query.device)
        if heads is not None and mode == "sink"
        else None
    )

    def edit(part, value, visible):
        if heads is not None:
            part = _replace(part, value, visible, heads, mode, sink)
        if gate is not None:
            part = part * gate.to(part.dtype)[:, :, None, None]
        return part

    return edit


def _replace(part, value, visible, heads, mode, sink):
    """``part`` with the outputs of ``heads`` replaced as ``mode`` says (out of place)."""
    if mode == "zero":
        return part.index_fill(1, heads, 0.0)
    b, h, q, _ = part.shape
    kv_of = torch.div(heads * value.shape[1], h, rounding_mode="floor")
    if mode == "uniform":
        k = value.shape[2]
        if visible is None:
            weights = torch.ones((1, 1, q, k), dtype=value.dtype, device=value.device)
        else:
            weights = visible.expand(-1, 1, q, k).to(value.dtype)
        weights = weights / weights.sum(-1, keepdim=True).clamp(min=1)
        out = torch.matmul(weights, value[:, kv_of])
        return part.index_copy(1, heads, out.expand(b, -1, q, -1).to(part.dtype))
    rows = torch.arange(b, device=value.device)[:, None]
    picked = value[rows, kv_of[None, :], sink[:, None]]  # (batch, n_ablated, head_dim)
    out = picked[:, :, None, :].expand(b, heads.numel(), q, picked.shape[-1])
    return part.index_copy(1, heads, out.to(part.dtype))
