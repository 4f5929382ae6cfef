"""Per-row compositional statistics of attention rows, and the recorder that collects them.

:func:`row_statistics` turns a block of log-softmax rows into the sink mass, the entropy and
its exact split, and the sink balance (nats; docs/design.md, "Statistics"). A
:class:`Recorder` folds every block of one forward pass in, per layer, and keeps the full
rows of the query positions :func:`record_plan` picks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from attncoda._errors import AttncodaError

from ._workspace import MaskBlock, Workspace

__all__ = ["COUNTS", "ROWS_AUTO", "STATISTICS", "Recorder", "record_plan", "row_statistics"]

#: Float statistics per (batch, head, query_pos), in the order of :func:`row_statistics`.
STATISTICS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
#: Integer counts per (batch, head, query_pos): keys, sink keys, keys of probability 0.
COUNTS = ("n_keys", "n_sink", "n_zero")
#: Rows kept per document by ``record_rows="auto"`` (every row of a shorter document).
ROWS_AUTO = 128


def _sink_columns(sink: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
            return _derive(log_rows, visible, sink, probs, *sums)
    return _masked_statistics(log_rows, visible, sink, probs)


def _plain_sums(log_rows, visible, probs, mask: MaskBlock | None):
    """``(plogp, sum_log, n, n_zero)`` from unmasked rows, or None where a sum is not finite."""
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
    return plogp.to(f64), sum_log.to(f64), counts.expand(shape), n_zero


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
    return _derive(logs, visible, sink, probs, plogp, sum_log, n, n_zero.expand(shape))


def _derive(logs, visible, sink, probs, plogp, sum_log, n, n_zero) -> dict[str, torch.Tensor]:
    """Every statistic from the row sums and the sink columns (float64; see
    :func:`row_statistics`). ``logs`` may hold any finite value off the visible keys."""
    f64 = torch.float64
    batch, heads, queries, keys = logs.shape
    shape = (batch, heads, queries)
    content = (~sink).to(probs.dtype)
    content_mass = torch.einsum("bhqk,bk->bhq", probs, content).to(f64)
    # The sink columns (few): gathered once; the rest derives from them.
    index, valid = _sink_columns(sink)
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


@dataclass
class Recorder:
    """Collects row statistics for one forward pass of a padded batch.

    Positions are padded ``(batch, pos)`` coordinates; layers are numbered in call order.

    Parameters
    ----------
    query_real : torch.Tensor
        bool ``(batch, pos)``: real (non-padding) tokens.
    offsets : torch.Tensor
        int64 ``(batch,)``: padded position of each document's first real token.
    sink : torch.Tensor or None
        bool ``(batch, pos)``: sink keys. None runs the ``auto`` first pass, which only
        sums the attention each key receives.
    record : list of torch.Tensor
        Per document, the sorted padded query positions whose full rows are kept.
    block_size : int
        Queries per block.
    learned : bool
        Whether the learned sink (the virtual key of a layer with ``s_aux``) belongs to the
        sink set ``S``; otherwise it is one more key of the content ``C``.
    method : {"exact", "fast"}
        ``"fast"`` takes the statistics from the fused kernel (:mod:`attncoda.capture.kernels`).
    kernel : {"auto", "sdpa", "triton"}
        The fast path's kernel as asked: PyTorch's fused attention twice, the one-pass
        Triton kernel (:mod:`attncoda.capture.kernels._fused`), or ``"auto"`` (the Triton
        kernel on CUDA for each configuration that passes its first-use check); resolved
        per layer from where the layer runs.
    ran : dict
        Per layer index, the kernel that served it: ``"triton"``, ``"sdpa"`` or
        ``"exact"`` (a layer the fast kernels do not cover).

    Attributes
    ----------
    stats : list of dict
        Per layer, :func:`row_statistics` outputs ``(batch, head, pos)`` in padded query
        coordinates (empty dicts in the ``auto`` pass).
    rows : list of list of torch.Tensor
        Per layer and document, float32 log-probabilities ``(head, n_recorded, n_real)``,
        key 0 = first real token, ``-inf`` off the visible keys; layers with a learned sink
        have one more column, the virtual key, last (``n_real + 1``).
    virtual : list of bool
        Per layer, whether its rows have the virtual key.
    received, received_count : torch.Tensor
        ``auto`` pass only: float64 ``(batch, pos)`` attention each key received, summed
        over layers, heads and real queries, and how many such rows could see it.
    workspace : Workspace
        The buffers and mask blocks the exact path reuses across the pass's blocks.
    """

    query_real: torch.Tensor
    offsets: torch.Tensor
    sink: torch.Tensor | None
    record: list[torch.Tensor]
    block_size: int = 512
    learned: bool = False
    method: str = "exact"
    kernel: str = "sdpa"
    ran: dict[int, str] = field(default_factory=dict)
    stats: list[dict[str, torch.Tensor]] = field(default_factory=list)
    rows: list[list[torch.Tensor]] = field(default_factory=list)
    virtual: list[bool] = field(default_factory=list)
    received: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    received_count: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    fast_cache: dict = field(default_factory=dict, repr=False)
    workspace: Workspace = field(default_factory=Workspace, repr=False)

    def begin_layer(
        self, batch: int, heads: int, q_len: int, k_len: int, learned: bool = False
    ) -> int:
        """Allocate one layer's outputs; returns its index.

        ``learned`` says the layer has a learned sink logit per head (a virtual key).
        """
        if q_len != k_len or (batch, q_len) != tuple(self.query_real.shape):
            raise AttncodaError(
                f"attention capture needs one full forward pass over the batch without a "
                f"cache: got queries {q_len}, keys {k_len} for a batch of shape "
                f"{tuple(self.query_real.shape)}"
            )
        if self.learned and not learned:
            raise AttncodaError(
                f"sink 'learned' needs learned sink logits (s_aux), but attention call "
                f"{len(self.stats)} of this model has none: use a token sink such as 'first'"
            )
        self.virtual.append(learned)
        if self.sink is None:
            if self.received.numel() == 0:
                self.received = torch.zeros(batch, k_len, dtype=torch.float64)
                self.received_count = torch.zeros(batch, k_len, dtype=torch.float64)
            self.stats.append({})
            return len(self.stats) - 1
        layer = {name: torch.zeros(batch, heads, q_len, dtype=torch.float64) for name in STATISTICS}
        for name in COUNTS:
            layer[name] = torch.zeros(batch, heads, q_len, dtype=torch.int64)
        self.stats.append(layer)
        n_real = self.query_real.sum(-1).tolist()
        self.rows.append(
            [
                torch.full((heads, len(pos), n + int(learned)), -math.inf)
                for pos, n in zip(self.record, n_real, strict=True)
            ]
        )
        return len(self.stats) - 1

    def add_block(
        self, layer: int, start: int, log_rows, visible, probs=None, mask: MaskBlock | None = None
    ) -> None:
        """Fold one block of log-softmax rows ``(batch, head, q, key_pos)`` in.

        ``probs``, when given, is the layer's own softmax of the same scores (it saves the
        statistics one exponential pass); ``mask`` is ``visible`` as a cached
        :class:`MaskBlock`. In a layer with a learned sink, ``log_rows`` and ``visible``
        have the virtual key as one more, last column.
        """
        stop = start + log_rows.shape[2]
        device = log_rows.device
        virtual = self.virtual[layer]
        if visible is None:
            visible = torch.ones((1, 1, 1, 1), dtype=torch.bool, device=device)
        b, _, q, k = log_rows.shape
        visible = visible.expand(b, 1, q, k)
        real_q = self.query_real[:, start:stop].to(device)
        if self.sink is None:
            tokens = k - int(virtual)
            seen = (visible & real_q[:, None, :, None])[..., :tokens]
            p = log_rows.exp() if probs is None or probs.dtype != log_rows.dtype else probs
            received = p[..., :tokens].masked_fill(~seen, 0.0).sum((1, 2), dtype=torch.float64)
            self.received[:, :tokens] += received.cpu()
            count = seen.sum((1, 2)).to(torch.float64) * log_rows.shape[1]
            self.received_count[:, :tokens] += count.cpu()
            return
        # A block that skipped hidden keys has fewer token columns than the document.
        tokens = k - int(virtual)
        sink = self.sink[:, :tokens].to(device)
        if virtual:
            sink = torch.cat([sink, sink.new_full((b, 1), self.learned)], dim=-1)
        stats = row_statistics(log_rows, visible, sink, probs=probs, mask=mask)
        for name, value in stats.items():
            self.stats[layer][name][:, :, start:stop] = value.cpu()
        for doc, positions in enumerate(self.record):
            inside = (positions >= start) & (positions < stop)
            if not bool(inside.any()):
                continue
            lo = int(self.offsets[doc])
            n = self.rows[layer][doc].shape[-1] - int(virtual)
            local = (positions[inside] - start).to(device)
            width = max(0, min(n, tokens - lo))  # the document's token columns here
            columns = torch.arange(lo, lo + width, device=device)
            if virtual:
                columns = torch.cat([columns, columns.new_full((1,), k - 1)])
            rows = log_rows[doc][:, local][..., columns].to(torch.float32)
            seen = visible[doc][:, local][..., columns]
            block_rows = rows.masked_fill(~seen, -math.inf).cpu()
            # The columns a block skipped stay -inf; the virtual key is the last column.
            self.rows[layer][doc][:, inside, :width] = block_rows[..., :width]
            if virtual:
                self.rows[layer][doc][:, inside, -1] = block_rows[..., -1]


def record_plan(lengths: Sequence[int], record_rows, seed: int, first_doc: int):
    """Per document, the sorted query positions whose full rows are kept (``record_rows`` as
    in :func:`capture`; samples seeded by ``(seed, first_doc + index)``)."""
    if record_rows is None or record_rows == "none":
        return [np.zeros(0, dtype=np.int64) for _ in lengths]
    if record_rows == "all":
        limit = None
    elif record_rows == "auto":
        limit = ROWS_AUTO
    elif isinstance(record_rows, (int, np.integer)) and not isinstance(record_rows, bool):
        if record_rows < 0:
            raise AttncodaError(
                f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
                f"got {record_rows!r}"
            )
        limit = int(record_rows)
    else:
        raise AttncodaError(
            f"record_rows must be 'auto', 'all', 'none' or a non-negative integer, "
            f"got {record_rows!r}"
        )
    plan = []
    for index, n in enumerate(lengths):
        if limit is None or n <= limit:
            plan.append(np.arange(n, dtype=np.int64))
        else:
            rng = np.random.default_rng([seed, first_doc + index])
            plan.append(np.sort(rng.choice(n, size=limit, replace=False)).astype(np.int64))
    return plan
