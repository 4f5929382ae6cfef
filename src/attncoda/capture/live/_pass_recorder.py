"""One recorded forward pass (docs/design.md, "Recording the user's own passes"): its
:class:`PassRecorder`, which may continue a KV cache, and the pass-level helpers of
:func:`attncoda.capture.live.recording` (the cache and mask of a pass, a bridge's score
hook).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.routing import active_recorder
from attncoda.capture.stats import Recorder

__all__ = ["PassRecorder", "cache_of", "check_mask", "past_length", "record_scores"]


@dataclass
class PassRecorder(Recorder):
    """The :class:`Recorder` of one recorded forward pass, which may continue a KV cache.

    The pass's ``q`` queries are the padded positions ``past .. past + q - 1`` of the
    sequence; a layer's ``k`` keys are the last ``k`` positions of ``past + q`` (a dynamic
    cache: every position; a sliding-window layer: its window), or positions ``0 .. k - 1``
    when the cache is longer than the sequence (a static cache, whose unfilled slots the
    mask hides).

    Parameters
    ----------
    past : int
        Positions already in the cache before this pass.
    sink_keys : torch.Tensor
        bool ``(batch, past + q)``: the sink keys of the whole sequence.
    widths : list of int
        Per document, its real tokens up to the end of this pass (the width of its rows).
    requested : str
        The method asked for; a layer whose keys are not the pass's own queries (a cache)
        takes the exact path.
    """

    past: int = 0
    sink_keys: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 0, dtype=torch.bool))
    widths: list[int] = field(default_factory=list)
    requested: str = "exact"
    first_key: list[int] = field(default_factory=list)

    def begin_layer(
        self, batch: int, heads: int, q_len: int, k_len: int, learned: bool = False
    ) -> int:
        """Allocate one layer's outputs (``(batch, head, q)``); returns its index."""
        total = self.past + q_len
        if (batch, q_len) != tuple(self.query_real.shape):
            raise AttncodaError(
                f"a recorded attention call got a batch of {batch} x {q_len} queries inside a "
                f"forward pass over {tuple(self.query_real.shape)}: recording reads the "
                f"attention of the model's own layers only"
            )
        self._check_learned(learned)
        self.first_key.append(total - k_len if k_len <= total else 0)
        # The fused kernel's statistics assume the keys are the pass's own queries.
        self.method = self.requested if self.past == 0 and k_len == q_len else "exact"
        self.sink = self.sink_keys[:, :k_len] if self.method == "fast" else self.sink_keys
        self.virtual.append(learned)
        return self._allocate(batch, heads, q_len, self.widths, learned)

    def _token_sink(self, layer: int, batch: int, tokens: int) -> torch.Tensor:
        """The sink keys of a block's token columns: key column ``c`` is the sequence position
        ``first_key[layer] + c`` (columns past the sequence, a static cache's unfilled slots,
        are not sinks)."""
        first = self.first_key[layer]
        sink = torch.zeros((batch, tokens), dtype=torch.bool)
        held = self.sink_keys[:, first : first + tokens]
        sink[:, : held.shape[1]] = held
        return sink

    def _first_key(self, layer: int) -> int:
        return self.first_key[layer]


def record_scores(point, inputs, scores) -> None:
    """A bridge's ``hook_attn_scores``: the masked logits ``(batch, head, query_pos,
    key_pos)`` of one layer, folded into the pass's recorder in blocks of
    ``rec.block_size`` queries (so the float32 log-softmax and the reductions' scratch are
    one block's, ``batch x head x block_size x key_pos``, not the layer's).

    A key is visible where any head's score is above half the dtype's minimum (the bridge
    masks with that minimum, or ``-inf``); a key an intervention set to ``-inf`` in some
    heads only is left out of those heads' rows and counted in ``n_zero_keys``.
    """
    rec = active_recorder().get()
    if rec is None or not isinstance(scores, torch.Tensor) or scores.ndim != 4:
        return
    b, h, q, k = scores.shape
    layer = rec.begin_layer(b, h, q, k)
    values = scores.detach()
    hidden = torch.finfo(values.dtype).min / 2
    for start in range(0, q, rec.block_size):
        block = values[:, :, start : start + rec.block_size]
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
