"""The boolean attention masks of ``method="fast"`` (docs/design.md, "The fast path"):
transformers' own mask builder, called a bounded number of queries at a time.
"""

from __future__ import annotations

import torch

__all__ = ["MASK_ROWS", "boolean_mask"]


#: Queries per call of transformers' mask builder in :func:`boolean_mask`: it evaluates the
#: mask function on (query, key) index grids, and a sliding window's ``q - k`` is an int64
#: grid, 8 bytes a key (8 GiB at 32k tokens in one call; 256 MiB for 1024 queries).
MASK_ROWS = 1024


def boolean_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, *args, **kwargs
):
    """transformers' ``sdpa_mask`` where ``eager_mask`` would give a float mask: True where
    a key is visible, never skipped for causal rows (``None`` only where ``eager_mask``
    gives ``None`` too: bidirectional rows without padding).

    Built :data:`MASK_ROWS` queries at a time into one ``(batch, 1, q, k)`` bool tensor, so
    the builder's index grids stay small. The exact path masks boolean scores with
    ``masked_fill(min)``, which gives eager's probabilities bit for bit (``score + min``
    rounds to ``min`` for every finite score).
    """
    from transformers.masking_utils import sdpa_mask

    kwargs.pop("dtype", None)
    kwargs["allow_is_causal_skip"] = False
    if not isinstance(q_offset, int) or q_length <= MASK_ROWS:
        return sdpa_mask(batch_size, q_length, kv_length, q_offset, *args, **kwargs)
    out = None
    for r0 in range(0, q_length, MASK_ROWS):
        rows = min(MASK_ROWS, q_length - r0)
        part = sdpa_mask(batch_size, rows, kv_length, q_offset + r0, *args, **kwargs)
        if part is None:  # a bidirectional mask without padding: None for every chunk
            return None
        if out is None:
            out = torch.empty(
                (batch_size, 1, q_length, kv_length), dtype=torch.bool, device=part.device
            )
        out[:, :, r0 : r0 + rows] = part
    return out
