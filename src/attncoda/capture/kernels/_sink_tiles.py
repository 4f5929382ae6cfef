"""Where the sink keys are, as the fused kernel reads them (docs/design.md, "The fused
kernel"): each document's sink prefix, which the kernel's loop starts after, and any other
sink key, masked only in the key tiles that hold one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from attncoda.capture.stats import sink_columns

from ._masks import MaskShape

__all__ = ["SinkGeometry", "sink_geometry", "sink_tiles"]


class SinkGeometry(NamedTuple):
    """Where the sink keys are, as the kernel reads them (:func:`sink_geometry`).

    Attributes
    ----------
    columns, valid : torch.Tensor
        int32 and int8 ``(batch, width)``: each document's sink keys, in order, and which of
        the ``width`` columns are real.
    prefix : torch.Tensor
        int32 ``(batch,)``: how many of them are the document's first real keys (its sink
        prefix), which the loop starts after.
    sparse : bool
        Whether any document has a sink key after its prefix.
    is_sink : torch.Tensor
        int8 ``(batch, key_pos)``: the sink keys after the prefix (read only when
        ``sparse``).
    """

    columns: torch.Tensor
    valid: torch.Tensor
    prefix: torch.Tensor
    sparse: bool
    is_sink: torch.Tensor


def sink_geometry(sink: torch.Tensor, shape: MaskShape) -> SinkGeometry:
    """The sink keys of ``sink`` (bool ``(batch, key_pos)``) split into each document's
    prefix (its first real keys, from ``shape.lo``) and the rest."""
    b, k_len = sink.shape
    index, valid = sink_columns(sink)
    keys = torch.arange(k_len, device=sink.device)
    lo = shape.lo.to(device=sink.device, dtype=torch.int64)
    content = (keys[None, :] >= lo[:, None]) & ~sink
    first = torch.where(content, keys, k_len).amin(-1)
    prefix = (first - lo).clamp(min=0)
    rest = sink & (keys[None, :] >= first[:, None])
    return SinkGeometry(
        index.to(torch.int32).contiguous(),
        valid.to(torch.int8).contiguous(),
        prefix.to(torch.int32).contiguous(),
        bool(rest.any()),
        rest.to(torch.int8).contiguous(),
    )


def sink_tiles(geometry: SinkGeometry, block_n: int) -> torch.Tensor:
    """int8 ``(batch, key tiles)``: which key tiles of ``block_n`` keys hold a sink key
    after the prefix (one element, unread, when no document has one)."""
    rest = geometry.is_sink
    if not geometry.sparse:
        return rest.new_zeros((rest.shape[0], 1))
    b, k_len = rest.shape
    n_tiles = -(-k_len // block_n)
    padded = torch.nn.functional.pad(rest, (0, n_tiles * block_n - k_len))
    return (padded.view(b, n_tiles, block_n) != 0).any(-1).to(torch.int8).contiguous()
