"""Per-row compositional statistics of attention rows: the pure row maths.

:func:`row_statistics` turns a block of log-softmax rows into the sink mass, the entropy and
its exact split, and the sink balance (nats; docs/design.md, "Statistics").
:func:`sink_columns` lists each document's sink keys, for this and for the fast kernels.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ._workspace import MaskBlock

__all__ = ["COUNTS", "STATISTICS", "row_statistics", "sink_columns"]

#: Float statistics per (batch, head, query_pos), in the order of :func:`row_statistics`.
STATISTICS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
#: Integer counts per (batch, head, query_pos): keys, sink keys, keys of probability 0.
COUNTS = ("n_keys", "n_sink", "n_zero")


class RowSums(NamedTuple):
    """The full-row sums every statistic derives from, ``(batch, head, query_pos)`` each:
    ``plogp`` (``sum p log p``) and ``sum_log`` (``sum_visible log p``), float64; ``n``
    (visible keys) and ``n_zero`` (visible keys of probability 0, left out), int64."""

    plogp: torch.Tensor
    sum_log: torch.Tensor
    n: torch.Tensor
    n_zero: torch.Tensor


def sink_columns(sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sink key indices ``(batch, k_max)`` padded with 0, and which of them are real."""
    counts = sink.sum(-1)
    width = max(int(counts.max()) if counts.numel() else 0, 1)
    # A stable sort puts each document's sink positions first, in order.
    index = torch.argsort((~sink).to(torch.int8), dim=-1, stable=True)[:, :width]
    valid = torch.arange(width, device=sink.device)[None, :] < counts[:, None]
    return index, valid.to(sink.device)


def row_statistics(
    log_rows: torch.Tensor,
    visible: torch.Tensor,
    sink: torch.Tensor,
    probs: torch.Tensor | None = None,
    mask: MaskBlock | None = None,
) -> dict[str, torch.Tensor]:
    """Compositional row statistics, in nats, from log-softmax rows.

    The full rows are read by four fused reductions in their own dtype (float32 for a
    float32 model): ``sum p log p`` and ``sum_visible log p`` (batched dot products),
    ``sum_C p`` (a matmul) and the sink columns; every statistic is then derived in float64
    from those sums and the few sink columns. ``log(1-s)`` is the log of the content mass
    summed over the content keys, never a subtraction from 1. Identities such as
    ``H = h(s) + s H(p_S/s) + (1-s) H(q)`` hold to float32 rounding (about 1e-7 nats).

    Given the layer's own ``probs`` (exactly 0 off the visible keys) and finite logs off
    the visible keys (eager's masks put the dtype's minimum there), the sums read the rows
    as they are: ``sum p log p`` over every key (a hidden key adds ``0 * log p = 0``) and
    the visible logs weighted by ``mask.weights``. A row where either sum is not finite (a
    visible key of log-probability ``-inf``, or ``-inf`` off the visible keys) sends the
    block to the path that masks the rows first and leaves such keys out.

    Parameters
    ----------
    log_rows : torch.Tensor
        Log-probabilities ``(batch, head, query_pos, key_pos)``; may be used as scratch
        (entries off the visible keys set to 0 in place).
    visible : torch.Tensor
        bool ``(batch, 1, query_pos, key_pos)`` (or one mask per head, ``(batch, head,
        query_pos, key_pos)``): keys each query attends to. A visible key whose
        log-probability is ``-inf`` is left out of its row and counted in ``n_zero``.
    sink : torch.Tensor
        bool ``(batch, key_pos)``: the sink keys of each document.
    probs : torch.Tensor, optional
        The layer's own softmax of the same scores, exactly 0 off the visible keys (saves
        one pass); computed from ``log_rows`` when omitted or of another dtype.
    mask : MaskBlock, optional
        ``visible`` (one mask for every head) as weights and counts, when the caller keeps
        them across layers (:class:`attncoda.capture.stats.Workspace`).

    Returns
    -------
    dict
        ``(batch, head, query_pos)`` tensors: ``n_keys``, ``n_sink`` (int64 ``n`` and
        ``k``), ``n_zero`` (int64: visible keys of probability exactly 0, left out),
        ``sink_mass`` ``s``, ``entropy`` ``H(p)``, ``content_entropy`` ``H(q)`` with
        ``q = p_C/(1-s)``, ``within_sink_entropy`` ``H(p_S/s)`` and ``sink_balance``
        ``sqrt(k m / n) (mean_S log p - mean_C log p)`` (float64). Rows without content
        (``m == 0``) or without a visible sink (``k == 0``) get 0.0 where a quantity is
        undefined; the caller masks them with ``n_keys - n_sink`` and ``n_sink``.
    """
    batch, heads, queries, keys = log_rows.shape
    visible = visible.expand(batch, visible.shape[1], queries, keys)
    if probs is not None and probs.dtype == log_rows.dtype:
        sums = _plain_sums(log_rows, visible, probs, mask)
        if sums is not None:
            return _derive(log_rows, visible, sink, probs, sums)
    return _masked_statistics(log_rows, visible, sink, probs)


def _plain_sums(log_rows, visible, probs, mask: MaskBlock | None) -> RowSums | None:
    """The row sums from unmasked rows, or None where a sum is not finite."""
    f64 = torch.float64
    batch, heads, queries, keys = log_rows.shape
    plogp = torch.einsum("bhqk,bhqk->bhq", probs, log_rows)
    if visible.shape[1] == 1:
        weights = visible[:, 0].to(log_rows.dtype) if mask is None else mask.weights
        sum_log = torch.einsum("bhqk,bqk->bhq", log_rows, weights)
        counts = visible.sum(-1) if mask is None else mask.counts
    else:
        sum_log = torch.einsum("bhqk,bhqk->bhq", log_rows, visible.to(log_rows.dtype))
        counts = visible.sum(-1)
    if not bool(torch.isfinite(plogp).all()) or not bool(torch.isfinite(sum_log).all()):
        return None
    shape = (batch, heads, queries)
    n_zero = torch.zeros(shape, dtype=torch.int64, device=log_rows.device)
    return RowSums(plogp.to(f64), sum_log.to(f64), counts.expand(shape), n_zero)


def _masked_statistics(log_rows, visible, sink, probs):
    """:func:`row_statistics` with the rows masked first: visible keys of log-probability
    ``-inf`` leave their row (counted in ``n_zero``) and the hidden keys' logs become 0."""
    f64 = torch.float64
    batch, heads, queries, keys = log_rows.shape
    shape = (batch, heads, queries)
    # A visible key whose log-probability is -inf (its probability is exactly 0: a score of
    # -inf, or an underflow) has no place in a composition: it leaves the row, per head,
    # and is counted, so no statistic becomes NaN.
    zero = visible & torch.isneginf(log_rows)
    n_zero = zero.sum(-1)
    if bool(n_zero.any()):
        visible = visible & ~zero
    if probs is None or probs.dtype != log_rows.dtype:
        probs = log_rows.exp().masked_fill(~visible, 0.0)
    # Off the visible keys the logs become 0 (in place: the caller's rows are scratch), so
    # every full-row sum below is a batched matmul or dot product.
    logs = log_rows.masked_fill_(~visible, 0.0)
    plogp = torch.einsum("bhqk,bhqk->bhq", probs, logs).to(f64)
    ones = torch.ones((keys, 1), dtype=logs.dtype, device=logs.device)
    sum_log = torch.matmul(logs, ones)[..., 0].to(f64)
    n = visible.sum(-1).expand(shape)
    return _derive(logs, visible, sink, probs, RowSums(plogp, sum_log, n, n_zero.expand(shape)))


def _derive(logs, visible, sink, probs, sums: RowSums) -> dict[str, torch.Tensor]:
    """Every statistic from the row sums and the sink columns (float64; see
    :func:`row_statistics`). ``logs`` may hold any finite value off the visible keys."""
    f64 = torch.float64
    plogp, sum_log, n, n_zero = sums
    batch, heads, queries, keys = logs.shape
    shape = (batch, heads, queries)
    content = (~sink).to(probs.dtype)
    content_mass = torch.einsum("bhqk,bk->bhq", probs, content).to(f64)
    # The sink columns (few): gathered once; the rest derives from them.
    index, valid = sink_columns(sink)
    cols = index[:, None, None, :].expand(batch, visible.shape[1], queries, index.shape[1])
    in_sink = torch.gather(visible, -1, cols) & valid[:, None, None, :]
    cols = cols.expand(batch, heads, -1, -1)
    sink_logs = torch.gather(logs, -1, cols).to(f64).masked_fill(~in_sink, 0.0)
    sink_p = torch.gather(probs, -1, cols).to(f64).masked_fill(~in_sink, 0.0)
    k = in_sink.sum(-1).expand(shape)
    m = n - k
    sink_mass = sink_p.sum(-1)
    sink_plogp = (sink_p * sink_logs).sum(-1)
    # H(p_S/s) from the sink logs alone (exactly 0 for a one-key sink).
    log_in = sink_logs.masked_fill(~in_sink, -math.inf)
    log_s = log_in.logsumexp(-1, keepdim=True)
    log_q = torch.where(in_sink, log_in - torch.where(k[..., None] > 0, log_s, 0.0), 0.0)
    within = torch.where(k > 1, -(log_q.exp() * log_q).masked_fill(~in_sink, 0.0).sum(-1), 0.0)
    has_content = m > 0
    lost = has_content & (content_mass == 0)
    safe_c = torch.where(content_mass > 0, content_mass, 1.0)
    content_entropy = torch.log(safe_c) - (plogp - sink_plogp) / safe_c
    if bool(lost.any()):
        # Every content probability underflowed: the content part again, in log space.
        in_content = visible & ~sink[:, None, None, :]
        log_c = torch.where(in_content, logs.to(f64), -math.inf).logsumexp(-1)
        logq = torch.where(in_content, logs.to(f64) - log_c.unsqueeze(-1), 0.0)
        content_entropy = torch.where(lost, -(logq.exp() * logq).sum(-1), content_entropy)
    # Closure: the float32 softmax sums to 1 only up to rounding; s + C is the row's mass.
    total = sink_mass + content_mass
    total = torch.where(total > 0, total, 1.0)
    mean_sink = sink_logs.sum(-1) / k.clamp(min=1)
    mean_content = (sum_log - sink_logs.sum(-1)) / m.clamp(min=1)
    factor = torch.sqrt(k.to(f64) * m.to(f64) / n.clamp(min=1).to(f64))
    return {
        "n_keys": n,
        "n_sink": k,
        "n_zero": n_zero,
        "sink_mass": sink_mass / total,
        "entropy": torch.log(total) - plogp / total,
        "content_entropy": torch.where(has_content, content_entropy, 0.0),
        "within_sink_entropy": within + 0.0,
        "sink_balance": factor * (mean_sink - mean_content) + 0.0,
    }
