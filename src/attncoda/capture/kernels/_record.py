"""The recorder glue both fast kernels share: a layer's statistics into the recorder, and
the exact float32 rows of the recorded queries (the kernels themselves never form a row).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

__all__ = ["record_rows", "store"]


def store(recorder, layer: int, stats: dict[str, torch.Tensor]) -> None:
    """Write a kernel's ``(batch, head, query_pos)`` statistics into layer ``layer``.

    Into page-locked statistics (a recorder of a pass on CUDA, ``pinned``) the copies are
    queued on the layer's stream and the pass goes on; the recorder's
    :meth:`~attncoda.capture.stats.Recorder.settle` waits for them once, after the pass.
    A copy into pageable memory would wait for the device at every layer.
    """
    for name, values in stats.items():
        target = recorder.stats[layer][name]
        if values.is_cuda and target.is_pinned():
            target.copy_(values, non_blocking=True)
        else:
            target[:] = values.cpu()


def record_rows(
    recorder,
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    scaling: float,
    seen: Callable[[int, torch.Tensor], torch.Tensor],
    *,
    upcast: bool = False,
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
) -> None:
    """Exact float32 log-softmax rows of the recorded queries only, into the recorder.

    Parameters
    ----------
    recorder : attncoda.capture.stats.Recorder
        Its ``record`` (per document, the padded query positions), ``offsets`` and ``rows``.
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``.
    key : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention.
    scaling : float
        Score scale.
    seen : callable
        ``seen(doc, positions)``: bool ``(len(positions), key_pos)``, the keys those queries
        of document ``doc`` see.
    upcast : bool
        Take the score product in float32 (else in the query's dtype, cast after).
        bfloat16 and float16 queries and keys are always upcast: their products are exact
        in float32, and a score rounded to half precision costs up to 4e-2 nats of entropy
        (docs/design.md, "Precision per dtype").
    softcap : float, optional
        Gemma 2's ``tanh(z / c) c`` on the scores.
    s_aux : torch.Tensor, optional
        One learned sink logit per head: a virtual key, kept as the rows' last column.
    """
    h, kv = query.shape[1], key.shape[1]
    k_len = key.shape[2]
    for doc, positions in enumerate(recorder.record):
        if positions.numel() == 0:
            continue
        pos = positions.to(query.device)
        qd = query[doc, :, pos]  # (h, r, d)
        kd = key[doc]  # (kv, k, d)
        if upcast or qd.dtype in (torch.bfloat16, torch.float16):
            qd, kd = qd.float(), kd.float()
        r = qd.shape[1]
        scores = torch.matmul(qd.reshape(kv, (h // kv) * r, -1), kd.transpose(-1, -2))
        scores = scores.reshape(h, r, k_len) * scaling
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        visible = seen(doc, pos)  # (r, k)
        scores = scores.float().masked_fill(~visible[None], -math.inf)
        lo = int(recorder.offsets[doc])
        n = recorder.rows[layer][doc].shape[-1] - int(s_aux is not None)
        if s_aux is not None:
            sinks = s_aux.float().reshape(h, 1, 1).expand(h, r, 1)
            log_rows = torch.log_softmax(torch.cat([scores, sinks], -1), dim=-1)
            rows = torch.cat([log_rows[:, :, lo : lo + n], log_rows[:, :, -1:]], -1)
        else:
            log_rows = torch.log_softmax(scores, dim=-1)
            rows = log_rows[:, :, lo : lo + n].masked_fill(
                ~visible[None, :, lo : lo + n], -math.inf
            )
        recorder.rows[layer][doc][:] = rows.cpu()
