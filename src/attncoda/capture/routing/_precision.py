"""float32 scores of a bfloat16 or float16 layer, for its statistics only (docs/design.md,
"Precision per dtype").

The exact path hands the model eager's output, computed from the layer's own half-precision
scores; its statistics come from float32 scores of the same queries and keys, where the
products of two bfloat16 or two float16 numbers are exact, so the float32 bounds hold.
"""

from __future__ import annotations

import torch

__all__ = ["HALF_DTYPES", "statistics_logits"]

#: Score dtypes whose rows are recomputed in float32 for the statistics (the layer's output
#: keeps eager's own scores). float32 and float64 scores are read as they are.
HALF_DTYPES = (torch.bfloat16, torch.float16)


def statistics_logits(call, query, key_states, mask, space, capacity):
    """float32 logits ``(batch, head, q, key_pos[+1])`` of a half-precision block, for its
    statistics only: the layer's own bfloat16/float16 queries and keys upcast, then the
    family's scaling, soft-cap, mask and learned sink column (``call``'s) in float32.

    The products of two bfloat16 or float16 numbers are exact in float32, so these scores
    are the float32 scores of the very queries and keys the layer multiplies, and the
    float32 bounds hold for them (docs/design.md, "Precision per dtype"). The layer's output
    is still computed from its own half-precision scores, as eager does.

    Parameters
    ----------
    call : attncoda.capture.kernels.LayerCall
        The layer's call: its ``scaling``, ``softcap`` (Gemma 2's ``tanh(z / c) c``, before
        the mask) and ``s_aux`` (one learned sink logit per head, the last column).
    query : torch.Tensor
        ``(batch, head, q, head_dim)``, the block's queries in the layer's dtype.
    key_states : torch.Tensor
        ``(batch, head, key_pos, head_dim)``, expanded as eager's ``repeat_kv`` does.
    mask : torch.Tensor or None
        The block's mask, bool (True = visible) or eager's additive one
        ``(batch, 1, q, key_pos)``.
    space : attncoda.capture.stats.Workspace or None
        Receives the scores in its ``"statistics_scores"`` buffer (None: a fresh tensor).
    capacity : int
        Elements the buffer reserves for the layer's widest block.

    Returns
    -------
    torch.Tensor
        float32 logits; hidden keys get a finite value far below every visible one.
    """
    with torch.no_grad():  # statistics only: the in-place ops never meet autograd
        return _float32_logits(call, query, key_states, mask, space, capacity)


def _float32_logits(call, query, key_states, mask, space, capacity):
    scaling, softcap, s_aux = call.scaling, call.softcap, call.s_aux
    query, key_states = query.to(torch.float32), key_states.to(torch.float32)
    b, h, q, _ = query.shape
    shape = (b, h, q, key_states.shape[2])
    out = None
    if space is not None:
        out = space.take("statistics_scores", shape, torch.float32, query.device, capacity)
    scores = torch.matmul(query, key_states.transpose(2, 3), out=out).mul_(scaling)
    if softcap is not None:
        scores = scores.div_(softcap).tanh_().mul_(softcap)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill_(~mask, torch.finfo(torch.float32).min)
        else:
            # The half-precision mask's values (0, or its dtype's minimum) are exact in
            # float32; the hidden keys stay finite and far below every visible one.
            scores = scores.add_(mask)
    if s_aux is not None:
        sinks = s_aux.reshape(1, -1, 1, 1).expand(b, -1, q, -1).to(torch.float32)
        scores = torch.cat([scores, sinks], dim=-1)
    return scores
