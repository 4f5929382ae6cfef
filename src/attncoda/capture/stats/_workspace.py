"""Buffers and mask blocks the exact path reuses across query blocks and layers.

Every layer of a forward pass computes the same few ``(batch, head, block, key_pos)``
tensors: the scores, their softmax and their float32 log-softmax. Allocated afresh, a tensor
that large is often a new mapping that the operating system zero-fills page by page on
first touch: on SmolLM2 at L = 2048 an eager forward spends 10.5 s of its 23 s of CPU time
doing that (4.5 million page faults). A :class:`Workspace` keeps one flat buffer per slot for the
whole pass, so each slot is faulted in once; the ``out=`` kernels and in-place ops that
write into it compute the same values as eager's allocating ones (docs/design.md, "The
attention function").

It also keeps, per mask tensor and query block, what every layer derives from the mask
(the visible keys, as bool and as weights, and their count): the layers of one pass share
their mask tensors, so the derivation runs once per mask kind and block.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["MASK_CACHE_BYTES", "MaskBlock", "Workspace", "mask_block"]

#: At most this many bytes of mask blocks are kept for the later layers of a pass (5 bytes
#: a query-key pair: 20 MiB at L = 2048); blocks past it are derived again in each layer.
MASK_CACHE_BYTES = 256 * 2**20


@dataclass(frozen=True)
class MaskBlock:
    """What the statistics read from one block of a mask.

    Attributes
    ----------
    visible : torch.Tensor
        bool ``(batch, 1, rows, keys)``: the keys each query attends to.
    weights : torch.Tensor
        ``visible`` as floats of the log-rows' dtype (float32), ``(batch, rows, keys)``: 1 on
        a visible key, 0 elsewhere (the weights of a masked sum as one batched product).
    counts : torch.Tensor
        int64 ``(batch, 1, rows)``: visible keys per query.
    """

    visible: torch.Tensor
    weights: torch.Tensor
    counts: torch.Tensor


def mask_block(visible: torch.Tensor, dtype: torch.dtype) -> MaskBlock:
    """The :class:`MaskBlock` of a bool ``(batch, 1, rows, keys)`` block of visible keys."""
    weights = visible[:, 0].to(dtype)
    counts = visible.sum(-1)
    return MaskBlock(visible, weights, counts)


class Workspace:
    """Reused flat buffers, one per named slot, and cached mask blocks of one forward pass.

    Not thread-safe; one per :class:`attncoda.capture.stats.Recorder` (one forward
    pass), or one per layer call when nothing is recorded.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._masks: dict[tuple, tuple[torch.Tensor, MaskBlock]] = {}
        self._mask_bytes = 0

    @property
    def nbytes(self) -> int:
        """Bytes held: the buffers and the cached mask blocks."""
        return sum(b.nbytes for b in self._buffers.values()) + self._mask_bytes

    def clear(self) -> None:
        """Drop every buffer and cached mask block (and the masks they reference)."""
        self._buffers.clear()
        self._masks.clear()
        self._mask_bytes = 0

    def take(
        self,
        slot: str,
        shape: tuple[int, ...],
        dtype: torch.dtype,
        device: torch.device,
        capacity: int = 0,
    ) -> torch.Tensor:
        """A contiguous ``shape`` view of the slot's buffer, contents undefined.

        The buffer is (re)allocated only when it is smaller than ``shape`` or of another
        dtype or device, then with room for ``max(numel, capacity)`` elements, so a layer's
        first block can reserve what its last (widest) block needs. A view taken earlier
        from the same slot is overwritten by the next caller: take one slot per live tensor.
        """
        numel = math.prod(shape)
        buf = self._buffers.get(slot)
        if buf is None or buf.numel() < numel or buf.dtype != dtype or buf.device != device:
            buf = torch.empty(max(numel, capacity), dtype=dtype, device=device)
            self._buffers[slot] = buf
        return buf[:numel].view(shape)

    def mask(
        self, attention_mask: torch.Tensor, start: int, stop: int, k_stop: int, dtype: torch.dtype
    ) -> MaskBlock:
        """The :class:`MaskBlock` of ``attention_mask[:, :, start:stop, :k_stop]``.

        ``attention_mask`` is bool (True = visible) or additive float (visible where above
        half the dtype's minimum, as eager's mask puts the minimum on hidden keys). Cached
        by the mask tensor's identity (the cache holds a reference, so the identity stays
        unique) and the block, up to :data:`MASK_CACHE_BYTES`.
        """
        key = (id(attention_mask), start, stop, k_stop, dtype)
        hit = self._masks.get(key)
        if hit is not None and hit[0] is attention_mask:
            return hit[1]
        mask = attention_mask[:, :, start:stop, :k_stop]
        if mask.dtype == torch.bool:
            visible = mask
        else:
            visible = mask > torch.finfo(mask.dtype).min / 2
        block = mask_block(visible, dtype)
        size = block.weights.nbytes + block.counts.nbytes
        if mask.dtype != torch.bool:
            size += visible.nbytes
        if self._mask_bytes + size <= MASK_CACHE_BYTES:
            self._masks[key] = (attention_mask, block)
            self._mask_bytes += size
        return block
