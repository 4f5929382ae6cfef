"""The :class:`Recorder`: row statistics of one forward pass, folded in block by block.

A :class:`Recorder` folds every block of one forward pass in, per layer (through
:func:`attncoda.capture.stats.row_statistics`), and keeps the full rows of the query positions
:func:`attncoda.capture.stats.record_plan` picks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from attncoda._errors import AttncodaError

from ._rows import COUNTS, STATISTICS, row_statistics
from ._workspace import MaskBlock, Workspace

__all__ = ["Recorder"]


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
    kernel : str, optional
        The fast path's kernel as asked, a name of
        :data:`attncoda.capture.kernels.registry.KERNELS` (``"auto"``: the Triton kernel on
        CUDA for each configuration that passes its first-use check), resolved per layer
        from where the layer runs; None (recorded passes) for the kernel that runs
        everywhere (:data:`attncoda.capture.kernels.registry.PORTABLE`).
    pinned : bool
        Keep the statistics in page-locked memory (a pass on CUDA): the fast kernels then
        copy each layer's statistics without waiting (:func:`attncoda.capture.kernels.
        _record.store`), and the pass synchronises once at its end (:meth:`settle`).

    Attributes
    ----------
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
    kernel: str | None = None
    pinned: bool = False
    ran: dict[int, str] = field(default_factory=dict)
    read_dtype: str | None = None
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
        self._check_learned(learned)
        self.virtual.append(learned)
        if self.sink is None:
            if self.received.numel() == 0:
                self.received = torch.zeros(batch, k_len, dtype=torch.float64)
                self.received_count = torch.zeros(batch, k_len, dtype=torch.float64)
            self.stats.append({})
            return len(self.stats) - 1
        return self._allocate(batch, heads, q_len, self.query_real.sum(-1).tolist(), learned)

    def settle(self) -> None:
        """Wait for the statistics copied without waiting (``pinned``): every CUDA device,
        since a device map may run layers on several."""
        if self.pinned:
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)

    def _check_learned(self, learned: bool) -> None:
        """Refuse a layer without learned sink logits when the sink is ``"learned"``."""
        if self.learned and not learned:
            raise AttncodaError(
                f"sink 'learned' needs learned sink logits (s_aux), but attention call "
                f"{len(self.stats)} of this model has none: use a token sink such as 'first'"
            )

    def _allocate(
        self, batch: int, heads: int, q_len: int, widths: list[int], learned: bool
    ) -> int:
        """Append one layer's zeroed statistics ``(batch, head, q_len)`` and ``-inf`` rows
        (``widths[doc]`` token columns, one more for a learned sink); returns its index."""
        shape, pinned = (batch, heads, q_len), self.pinned
        layer = {
            name: torch.zeros(shape, dtype=torch.float64, pin_memory=pinned) for name in STATISTICS
        }
        for name in COUNTS:
            layer[name] = torch.zeros(shape, dtype=torch.int64, pin_memory=pinned)
        self.stats.append(layer)
        self.rows.append(
            [
                torch.full((heads, len(pos), n + int(learned)), -math.inf)
                for pos, n in zip(self.record, widths, strict=True)
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
        if self.sink is None:
            real_q = self.query_real[:, start:stop].to(device)
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
        sink = self._token_sink(layer, b, tokens).to(device)
        if virtual:
            sink = torch.cat([sink, sink.new_full((b, 1), self.learned)], dim=-1)
        stats = row_statistics(log_rows, visible, sink, probs=probs, mask=mask)
        for name, value in stats.items():
            self.stats[layer][name][:, :, start:stop] = value.detach().cpu()
        first = self._first_key(layer)
        for doc, positions in enumerate(self.record):
            inside = (positions >= start) & (positions < stop)
            if not bool(inside.any()):
                continue
            lo = int(self.offsets[doc])
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

    def _token_sink(self, layer: int, batch: int, tokens: int) -> torch.Tensor:
        """bool ``(batch, tokens)``: which of a block's token key columns are sink keys."""
        if self.sink is None:  # the auto pass: no sink set yet
            return torch.zeros((batch, tokens), dtype=torch.bool)
        return self.sink[:, :tokens]

    def _first_key(self, layer: int) -> int:
        """The sequence position of key column 0 of ``layer`` (0: the keys are the batch)."""
        return 0
