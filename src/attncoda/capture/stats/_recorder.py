"""The :class:`Recorder`: what one forward pass produces, folded in block by block.

A :class:`Recorder` keeps, as its :class:`attncoda.capture.stats.PassPlan` says, every
block of one forward pass per layer (through :func:`attncoda.capture.stats.row_statistics`),
the fast kernels' statistics and the full rows of the query positions
:func:`attncoda.capture.stats.record_plan` picks.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import torch

from attncoda._errors import AttncodaError

from ._plan import PassPlan
from ._rows import COUNTS, STATISTICS, row_statistics
from ._workspace import MaskBlock, Workspace

__all__ = ["Recorder"]


@dataclass
class Recorder:
    """What one forward pass of a padded batch produces: its accumulator. The pass's
    :class:`PassPlan` says what to keep; layers are numbered in call order.

    Attributes
    ----------
    plan : PassPlan
        What the pass needs to know (fixed).
    ran : dict
        Per layer index, the kernel that served it under ``method="fast"``: a kernel's name,
        or ``exact`` (a layer the fast kernels do not cover).
    read_dtype : str or None
        The dtype of rows read rather than computed (eager ``output_attentions``), set by
        the reader; None when the rows come from the layer's queries and keys.
    stats : list of dict
        Per layer, :func:`row_statistics` outputs ``(batch, head, pos)`` in padded query
        coordinates (empty dicts in the ``auto`` pass).
    rows : list of list of torch.Tensor
        Per layer and document, float32 log-probabilities ``(head, n_recorded, n_real)``,
        key 0 = first real token, ``-inf`` off the visible keys; layers with a learned sink
        have one more column, the virtual key, last (``n_real + 1``).
    virtual : list of bool
        Per layer, whether its rows have the virtual key.
    first_key : list of int
        Per layer, the sequence position of its key column 0: the last ``key_pos`` of the
        ``past + query_pos`` positions of a recorded pass (a dynamic cache: all; a sliding
        window: its own), or 0 (a static cache longer than the sequence, whose unfilled
        slots the mask hides; a capture's pass).
    received, received_count : torch.Tensor
        ``auto`` pass only: float64 ``(batch, pos)`` attention each key received, summed
        over layers, heads and real queries, and how many such rows could see it.
    masks : dict
        The kernels' readings of the pass's masks, each made once
        (:attr:`attncoda.capture.kernels.LayerCall.masks`).
    said : set of str
        The notes printed in this pass (:meth:`say`).
    workspace : Workspace
        The buffers and mask blocks the exact path reuses across the pass's blocks.
    """

    plan: PassPlan
    ran: dict[int, str] = field(default_factory=dict)
    read_dtype: str | None = None
    stats: list[dict[str, torch.Tensor]] = field(default_factory=list)
    rows: list[list[torch.Tensor]] = field(default_factory=list)
    virtual: list[bool] = field(default_factory=list)
    first_key: list[int] = field(default_factory=list)
    received: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    received_count: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0))
    masks: dict = field(default_factory=dict, repr=False)
    said: set[str] = field(default_factory=set, repr=False)
    workspace: Workspace = field(default_factory=Workspace, repr=False)

    def begin_layer(
        self, batch: int, heads: int, q_len: int, k_len: int, learned: bool = False
    ) -> int:
        """Allocate one layer's outputs; returns its index.

        ``learned`` says the layer has a learned sink logit per head (a virtual key).
        """
        plan, real = self.plan, self.plan.query_real
        if plan.widths is not None and (batch, q_len) != tuple(real.shape):
            raise AttncodaError(
                f"a recorded attention call got a batch of {batch} x {q_len} queries inside a "
                f"forward pass over {tuple(real.shape)}: recording reads the attention of the "
                f"model's own layers only"
            )
        if plan.widths is None and (q_len != k_len or (batch, q_len) != tuple(real.shape)):
            raise AttncodaError(
                f"attention capture needs one full forward pass over the batch without a "
                f"cache: got queries {q_len}, keys {k_len} for a batch of shape "
                f"{tuple(real.shape)}"
            )
        self._check_learned(learned)
        total = plan.past + q_len
        self.first_key.append(total - k_len if k_len <= total else 0)
        self.virtual.append(learned)
        if plan.sink is None:
            if self.received.numel() == 0:
                self.received = torch.zeros(batch, k_len, dtype=torch.float64)
                self.received_count = torch.zeros(batch, k_len, dtype=torch.float64)
            self.stats.append({})
            return len(self.stats) - 1
        widths = real.sum(-1).tolist() if plan.widths is None else list(plan.widths)
        return self._allocate(batch, heads, q_len, widths, learned)

    def keep(self, layer: int, stats: dict[str, torch.Tensor], rows) -> None:
        """A fast kernel's ``(batch, head, query_pos)`` statistics of ``layer`` and its
        recorded rows (per document; None: none). Into page-locked statistics (``pinned``)
        the copies are queued on the layer's stream, and :meth:`settle` waits for them once
        after the pass: a copy into pageable memory would wait at every layer."""
        for name, values in stats.items():
            target = self.stats[layer][name]
            if values.is_cuda and target.is_pinned():
                target.copy_(values, non_blocking=True)
            else:
                target[:] = values.cpu()
        for doc, found in enumerate(rows):
            if found is not None:
                self.rows[layer][doc][:] = found

    def say(self, line: str) -> None:
        """Print ``line`` to stderr, once in this pass."""
        if line not in self.said:
            self.said.add(line)
            print(line, file=sys.stderr)

    def settle(self) -> None:
        """Wait for the statistics copied without waiting (``pinned``): every CUDA device,
        since a device map may run layers on several."""
        if self.plan.pinned:
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)

    def _check_learned(self, learned: bool) -> None:
        """Refuse a layer without learned sink logits when the sink is ``"learned"``."""
        if self.plan.learned and not learned:
            raise AttncodaError(
                f"sink 'learned' needs learned sink logits (s_aux), but attention call "
                f"{len(self.stats)} of this model has none: use a token sink such as 'first'"
            )

    def _allocate(
        self, batch: int, heads: int, q_len: int, widths: list[int], learned: bool
    ) -> int:
        """Append one layer's zeroed statistics ``(batch, head, q_len)`` and ``-inf`` rows
        (``widths[doc]`` token columns, one more for a learned sink); returns its index."""
        shape, pinned = (batch, heads, q_len), self.plan.pinned
        layer = {
            name: torch.zeros(shape, dtype=torch.float64, pin_memory=pinned) for name in STATISTICS
        }
        for name in COUNTS:
            layer[name] = torch.zeros(shape, dtype=torch.int64, pin_memory=pinned)
        self.stats.append(layer)
        self.rows.append(
            [
                torch.full((heads, len(pos), n + int(learned)), -math.inf)
                for pos, n in zip(self.plan.record, widths, strict=True)
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
        plan = self.plan
        if plan.sink is None:
            real_q = plan.query_real[:, start:stop].to(device)
            tokens = k - int(virtual)
            seen = (visible & real_q[:, None, :, None])[..., :tokens]
            p = log_rows.exp() if probs is None or probs.dtype != log_rows.dtype else probs
            received = p[..., :tokens].masked_fill(~seen, 0.0).sum((1, 2), dtype=torch.float64)
            self.received[:, :tokens] += received.cpu()
            count = seen.sum((1, 2)).to(torch.float64) * log_rows.shape[1]
            self.received_count[:, :tokens] += count.cpu()
            return
        # A block that skipped hidden keys has fewer token columns than the document; key
        # column c is position first + c (past the sequence, a static cache's slots: none).
        tokens, first = k - int(virtual), self.first_key[layer]
        sink = plan.sink[:, first : first + tokens]
        sink = torch.nn.functional.pad(sink, (0, tokens - sink.shape[1])).to(device)
        if virtual:
            sink = torch.cat([sink, sink.new_full((b, 1), plan.learned)], dim=-1)
        stats = row_statistics(log_rows, visible, sink, probs=probs, mask=mask)
        for name, value in stats.items():
            self.stats[layer][name][:, :, start:stop] = value.detach().cpu()
        for doc, positions in enumerate(plan.record):
            inside = (positions >= start) & (positions < stop)
            if not bool(inside.any()):
                continue
            lo = int(plan.offsets[doc])
            n = self.rows[layer][doc].shape[-1] - int(virtual)
            # The document's token columns this block holds: key column lo + c - first.
            cols = torch.arange(lo, lo + n) - first
            held = torch.nonzero((cols >= 0) & (cols < tokens))[:, 0]
            local = (positions[inside] - start).to(device)
            columns = cols[held].to(device)
            if virtual:
                columns = torch.cat([columns, columns.new_full((1,), k - 1)])
            rows = log_rows[doc][:, local][..., columns].to(torch.float32)
            seen = visible[doc][:, local][..., columns]
            block_rows = rows.detach().masked_fill(~seen, -math.inf).cpu()
            # The columns a block skipped stay -inf; the virtual key is the last column.
            target = self.rows[layer][doc]
            picked = torch.nonzero(inside)[:, 0]
            target[:, picked[:, None], held[None, :]] = block_rows[..., : len(held)]
            if virtual:
                target[:, picked, -1] = block_rows[..., -1]
