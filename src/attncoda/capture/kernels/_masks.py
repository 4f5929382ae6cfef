"""The mask geometry of ``method="fast"`` (docs/design.md, "The fast path").

- :func:`boolean_mask`: the boolean masks the fast path asks transformers for (its own mask
  builder, called a bounded number of queries at a time);
- :func:`read_mask`: what a layer's mask lets each query see, and whether it carries a bias;
- :class:`MaskShape` and :func:`mask_shape`: the visibility the fused kernel computes from a
  few parameters (runs of real keys, causal, sliding window);
- :func:`once`: those two of a layer's call, read once per mask tensor in a forward pass
  (:attr:`attncoda.capture.kernels.LayerCall.mask` and ``.shape``).
"""

from __future__ import annotations

import torch

__all__ = [
    "MASK_ROWS",
    "MaskShape",
    "boolean_mask",
    "mask_shape",
    "once",
    "read_mask",
    "skips_mask",
]


#: Queries per call of transformers' mask builder in :func:`boolean_mask`: it evaluates the
#: mask function on (query, key) index grids, and a sliding window's ``q - k`` is an int64
#: grid, 8 bytes a key (8 GiB at 32k tokens in one call; 256 MiB for 1024 queries).
MASK_ROWS = 1024


def boolean_mask(
    batch_size: int, q_length: int, kv_length: int, q_offset: int = 0, *args, **kwargs
):
    """transformers' ``sdpa_mask`` as SDPA itself gets it: ``None`` where transformers would
    skip the mask for SDPA (no padding, and ``q_length`` 1 or equal to ``kv_length``, no
    window the keys outrun, the caller allowing it: :func:`skips_mask`), else True where a
    key is visible.

    A skipped mask reads as the layer's own ``is_causal`` (:func:`read_mask`'s callers),
    as transformers' SDPA reads it; the fused kernel then needs no mask at all, where a
    dense one would be a byte a key (1 GiB at 32k tokens, built and read once per forward).
    A built mask is made :data:`MASK_ROWS` queries at a time into one ``(batch, 1, q, k)``
    bool tensor, so the builder's index grids stay small. The exact path masks boolean
    scores with ``masked_fill(min)``, which gives eager's probabilities bit for bit
    (``score + min`` rounds to ``min`` for every finite score).
    """
    from transformers.masking_utils import sdpa_mask

    kwargs.pop("dtype", None)
    allowed = kwargs.pop("allow_is_causal_skip", True)
    if allowed and skips_mask(batch_size, q_length, kv_length, q_offset, *args, **kwargs):
        return None
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


def skips_mask(batch_size, q_length, kv_length, q_offset=0, *args, **kwargs) -> bool:
    """Whether transformers would skip these arguments' mask for SDPA, when allowed to: no
    padding among the keys, ``q_length`` 1 or equal to ``kv_length``, no sliding window that
    the keys outrun, integer offsets (nothing traced). Written out here rather than by
    calling transformers' private ``_ignore_causal_mask_sdpa``, whose arguments change
    between releases."""
    import inspect

    from transformers import masking_utils

    try:
        bound = inspect.signature(masking_utils.sdpa_mask).bind(
            batch_size, q_length, kv_length, q_offset, *args, **kwargs
        )
    except TypeError:
        return False
    bound.apply_defaults()
    given = bound.arguments
    padding, kv_offset = given.get("attention_mask"), given.get("kv_offset", 0)
    local = given.get("local_size")
    if not all(isinstance(x, int) for x in (q_length, kv_length, q_offset, kv_offset)):
        return False
    if local is not None and kv_length >= local:
        return False
    if q_length != 1 and q_length != kv_length:
        return False
    if padding is None:
        return True
    if padding.shape[-1] > kv_length:
        padding = padding[:, kv_offset : kv_offset + kv_length]
    return bool(padding.all())


def read_mask(attention_mask, q_len, k_len, rows_per_chunk=1024):
    """``(visible, causal, ok)`` of a mask, read ``rows_per_chunk`` queries at a time so that
    no full-size temporary is made (a 32k-token mask is 4 GiB in float32).

    ``visible`` is bool ``(batch, 1, q_len, k_len)``, None when the mask is exactly causal
    (``causal``); ``ok`` is False when an additive mask puts a bias on a visible key, which
    the fast statistics refuse.
    """
    b = attention_mask.shape[0]
    device = attention_mask.device
    boolean = attention_mask.dtype == torch.bool
    floor = 0.0 if boolean else torch.finfo(attention_mask.dtype).min / 2
    full = tuple(attention_mask.shape) == (b, 1, q_len, k_len)
    # A full boolean mask is its own visibility (no 1-byte-a-key copy of it).
    own = boolean and full
    visible = (
        attention_mask
        if own
        else torch.empty((b, 1, q_len, k_len), dtype=torch.bool, device=device)
    )
    causal, ok = q_len == k_len, True
    keys = torch.arange(k_len, device=device)
    for r0 in range(0, q_len, rows_per_chunk):
        r1 = min(q_len, r0 + rows_per_chunk)
        part = attention_mask[:, :, r0:r1].expand(b, 1, r1 - r0, k_len)
        seen = part if boolean else part > floor
        if not own:
            visible[:, :, r0:r1] = seen
        if not boolean and ok:
            ok = not bool(part.masked_fill(~seen, 0).any())
        if causal:
            tril = keys[None, :] <= torch.arange(r0, r1, device=device)[:, None]
            causal = bool(torch.equal(seen, tril.expand_as(seen)))
    return (None if causal else visible), causal, ok


class MaskShape:
    """The visibility the kernel computes from parameters: query ``i`` (at key position
    ``i + offset``) sees key ``j`` when ``lo[b] <= j < hi[b]``, and, if ``causal``,
    ``j <= i + offset``, and, if ``window``, ``i + offset - j < window``.

    Attributes
    ----------
    lo, hi : torch.Tensor
        int32 ``(batch,)``: each document's run of real keys.
    causal : bool
    window : int or None
    """

    __slots__ = ("causal", "hi", "lo", "window")

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, causal: bool, window: int | None):
        self.lo, self.hi, self.causal, self.window = lo, hi, causal, window

    def visible(self, rows: torch.Tensor, k_len: int, offset: int) -> torch.Tensor:
        """bool ``(batch, 1, len(rows), k_len)``: the keys the query rows ``rows`` see."""
        keys = torch.arange(k_len, device=rows.device)
        seen = (keys[None, :] >= self.lo[:, None].to(rows.device)) & (
            keys[None, :] < self.hi[:, None].to(rows.device)
        )
        seen = seen[:, None, None, :]
        pos = (rows + offset)[:, None]
        if self.causal:
            seen = seen & (keys[None, :] <= pos)
        if self.window is not None:
            seen = seen & (pos - keys[None, :] < self.window)
        return seen.expand(-1, 1, rows.numel(), k_len)

    def first_stop(self, q_len: int, k_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """int64 ``(batch, q_len)`` each: the first key each query sees and one past its
        last (the keys it sees are that run; none where ``stop <= first``)."""
        pos = torch.arange(q_len, device=self.lo.device)[None, :] + (k_len - q_len)
        first = self.lo[:, None].to(torch.int64).expand(-1, q_len)
        stop = self.hi[:, None].to(torch.int64).expand(-1, q_len)
        if self.window is not None:
            first = torch.maximum(first, pos - self.window + 1)
        if self.causal:
            stop = torch.minimum(stop, pos + 1)
        return first, stop

    def seen_keys(self, q_len: int, k_len: int) -> torch.Tensor:
        """int64 ``(batch, q_len)``: how many token keys each query sees."""
        first, stop = self.first_stop(q_len, k_len)
        return (stop - first).clamp(min=0)


def mask_shape(  # params: public, and called with the layer's sizes by position
    visible: torch.Tensor | None, causal: bool, batch: int, q_len: int, k_len: int,
    window: int | None, device, rows_per_chunk: int = 1024,
) -> MaskShape | None:  # fmt: skip
    """The :class:`MaskShape` of a boolean mask, or None when it has no such shape.

    ``visible`` is bool ``(batch, 1, q_len, k_len)`` or None (plain causal rows with
    ``causal``, every key otherwise), as :func:`attncoda.capture.kernels.read_mask` gives it.
    Each candidate (causal or not, with ``window`` or without) is checked against the mask
    ``rows_per_chunk`` queries at a time; the first that reproduces it is returned.
    """
    offset = k_len - q_len
    if visible is None:
        lo = torch.zeros(batch, dtype=torch.int32, device=device)
        hi = torch.full((batch,), k_len, dtype=torch.int32, device=device)
        return MaskShape(lo, hi, causal, None)
    seen_keys = visible.any(dim=2)[:, 0]  # (b, k)
    keys = torch.arange(k_len, device=visible.device)
    lo = torch.where(seen_keys, keys, k_len).amin(-1).to(torch.int32)
    hi = (torch.where(seen_keys, keys, -1).amax(-1) + 1).to(torch.int32)
    windows = [window, None] if window is not None else [None]
    for cand_causal in (True, False):
        for cand_window in windows:
            shape = MaskShape(lo, hi, cand_causal, cand_window)
            same = True
            for r0 in range(0, q_len, rows_per_chunk):
                rows = torch.arange(r0, min(q_len, r0 + rows_per_chunk), device=visible.device)
                expected = shape.visible(rows, k_len, offset)
                if not torch.equal(visible[:, :, r0 : r0 + rows.numel()], expected):
                    same = False
                    break
            if same:
                return MaskShape(lo.to(device), hi.to(device), cand_causal, cand_window)
    return None


def once(masks: dict | None, key: tuple, tensor, compute):
    """``compute()`` once per ``tensor`` (and ``key``) in a forward pass, kept in ``masks``
    (the pass's; None: not kept): a forward has one or two masks (full and sliding-window
    layers), which every layer of their kind shares."""
    if masks is None:
        return compute()
    found = masks.get(key)
    if found is not None and found[0] is tensor:
        return found[1]
    value = compute()
    if len(masks) >= 12:
        masks.clear()
    masks[key] = (tensor, value)
    return value
