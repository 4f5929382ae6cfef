"""The rows a fast pass keeps in full: the exact float32 rows of the recorded queries, from the
layer's call (the kernels themselves never form a row).
"""

from __future__ import annotations

import math

import torch

__all__ = ["recorded_rows"]


def _hidden(call, doc: int, pos: torch.Tensor) -> torch.Tensor:
    """bool ``(len(pos), key_pos)``: the keys the queries ``pos`` of document ``doc`` do not
    see."""
    visible, causal, _ = call.mask
    if visible is not None:
        return ~visible[doc, 0, pos]
    # No mask (or a plain causal one): the layer's own pattern, causal or every key.
    q_len, k_len = call.query.shape[2], call.key.shape[2]
    keys = torch.arange(k_len, device=call.query.device)[None, :]
    if causal:
        return pos[:, None] + (k_len - q_len) < keys
    return (keys < 0).expand(pos.numel(), k_len)


def recorded_rows(call) -> list[torch.Tensor | None]:
    """Exact float32 log-softmax rows of the plan's recorded queries only.

    The scores are ``scaling q . k`` of the call's own queries and keys (the queries scaled
    first, as SDPA does), soft-capped where the layer is; bfloat16 and float16 queries and
    keys are upcast first (their products are exact in float32, and a score rounded to half
    precision costs up to 4e-2 nats of entropy: docs/design.md, "Precision per dtype"). A
    learned sink (``s_aux``) is one more key, kept as the rows' last column. The scores are
    masked and normalised in place: three passes over ``(head, n_recorded, key_pos)``
    beside the product.

    Returns
    -------
    list of torch.Tensor or None
        Per document, ``(head, n_recorded, n_real + virtual)`` (key 0 the first real token,
        ``-inf`` off the visible keys), or None where it records no row.
    """
    plan, query, key = call.plan, call.query, call.key
    softcap, s_aux = call.softcap, call.s_aux
    h, kv, k_len = query.shape[1], key.shape[1], key.shape[2]
    found: list[torch.Tensor | None] = []
    for doc, positions in enumerate(plan.record):
        if positions.numel() == 0:
            found.append(None)
            continue
        pos = positions.to(query.device)
        qd, kd = query[doc, :, pos].float(), key[doc].float()  # (h, r, d), (kv, k, d)
        r = qd.shape[1]
        qd = qd.reshape(kv, (h // kv) * r, -1) * call.scaling
        scores = torch.matmul(qd, kd.transpose(-1, -2)).reshape(h, r, k_len)
        if softcap is not None:
            scores.div_(softcap).tanh_().mul_(softcap)
        hidden = _hidden(call, doc, pos)  # (r, k)
        scores.masked_fill_(hidden[None], -math.inf)
        lo, n = int(plan.offsets[doc]), int(plan.query_real[doc].sum())
        if s_aux is not None:
            sinks = s_aux.float().reshape(h, 1, 1).expand(h, r, 1)
            log_rows = torch.log_softmax(torch.cat([scores, sinks], -1), dim=-1)
            found.append(torch.cat([log_rows[:, :, lo : lo + n], log_rows[:, :, -1:]], -1))
            continue
        log_rows = torch.log_softmax(scores, dim=-1)
        # A row with no visible key is NaN after the softmax: every key hidden, -inf.
        dead = hidden.all(-1)
        if bool(dead.any()):
            log_rows[:, dead] = -math.inf
        found.append(log_rows[:, :, lo : lo + n])
    return found
