"""One recorded forward pass (docs/design.md, "Recording the user's own passes"), which may
continue a KV cache: the pass-level helpers of :func:`attncoda.capture.live.recording` (the
cache and mask of a pass, a bridge's score hook).
"""

from __future__ import annotations

from typing import Any

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.stats import Recorder

__all__ = ["cache_of", "check_mask", "past_length", "record_scores"]


def record_scores(rec: Recorder | None, scores) -> None:
    """A bridge's ``hook_attn_scores``: the masked logits ``(batch, head, query_pos,
    key_pos)`` of one layer, folded into ``rec`` (the open pass's; None: none) in blocks of
    its plan's ``block_size`` queries (so the float32 log-softmax and the reductions'
    scratch are one block's, ``batch x head x block_size x key_pos``, not the layer's).

    A key is visible where any head's score is above half the dtype's minimum (the bridge
    masks with that minimum, or ``-inf``); a key an intervention set to ``-inf`` in some
    heads only is left out of those heads' rows and counted in ``n_zero_keys``.
    """
    if rec is None or not isinstance(scores, torch.Tensor) or scores.ndim != 4:
        return
    b, h, q, k = scores.shape
    layer = rec.begin_layer(b, h, q, k)
    values = scores.detach()
    hidden = torch.finfo(values.dtype).min / 2
    size = rec.plan.block_size
    for start in range(0, q, size):
        block = values[:, :, start : start + size]
        visible = (block > hidden).any(dim=1, keepdim=True)
        log_rows = torch.log_softmax(block.to(torch.float32), dim=-1)
        rec.add_block(layer, start, log_rows, visible)


def cache_of(source) -> Any:
    """The KV cache in a forward pass's keywords or output (``cache`` in transformers 5.x,
    ``past_key_values`` before)."""
    get = source.get if isinstance(source, dict) else lambda name: getattr(source, name, None)
    for name in ("cache", "past_key_values"):
        found = get(name)
        if found is not None:
            return found
    return None


def past_length(cache, cache_position) -> int:
    """Positions already in ``cache`` before a pass (its first cache position, else the
    cache's own length; 0 without a cache)."""
    if cache_position is not None and cache_position.numel() > 0:
        return int(cache_position.reshape(-1)[0])
    if cache is None:
        return 0
    length = getattr(cache, "get_seq_length", None)
    return int(length()) if callable(length) else 0


def check_mask(mask: torch.Tensor) -> None:
    """Refuse a recorded pass's ``attention_mask`` ``(batch, key_pos)`` that is not 0/1, has
    an empty document, or pads between real tokens."""
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise AttncodaError("a recorded forward pass got an attention_mask that is not 0/1")
    for doc in range(mask.shape[0]):
        row = mask[doc]
        if int(row.sum()) == 0:
            raise AttncodaError(
                f"document {doc} of a recorded forward pass has no real tokens (its "
                f"attention_mask row is 0)"
            )
        if int((row[1:] != row[:-1]).sum()) != int(row[0] == 0) + int(row[-1] == 0):
            raise AttncodaError(
                f"document {doc} of a recorded forward pass has padding between real tokens: "
                f"pad on the left (as generate() needs) or on the right of a pass without a cache"
            )
