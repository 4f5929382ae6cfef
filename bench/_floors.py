"""The floors a capture is timed against, like for like (docs/design.md, "Performance").

A capture asks the model for the last position's logits only (``logits_to_keep=1``, through
:func:`attncoda.capture.forward_kwargs`): a language model then projects one position onto
its vocabulary, not every one. A floor does the same work: it is the model's own forward
with the very keyword arguments a capture's forward gets, under the attention
implementation named. The plain call, ``model(input_ids=ids)`` with every position's
logits, is timed beside it, so that the figures taken against it earlier can be read.

On a model with sliding-window layers (Gemma 3) SDPA's floor does the whole masked
product, where a user who wants the window would skip what it hides: ``flex_window`` is
that floor, FlexAttention (compiled by ``torch.compile``, which runs on the CPU) with a
block mask of each layer's causal band, the window's on the sliding-window layers
(:func:`flex_floor`), everything else the model's own forward.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["FLEX", "FLOORS", "flex_floor", "floors", "seconds", "window_ids"]

#: The attention implementation of the windowed floor (:func:`flex_floor`).
FLEX = "bench_flex_window"
#: The floors by name: (attention implementation, every position's logits or the last's).
FLOORS = {
    "sdpa": ("sdpa", False),
    "sdpa_all_logits": ("sdpa", True),
    "eager": ("eager", False),
    "eager_all_logits": ("eager", True),
    "flex_window": (FLEX, False),
}


def flex_floor() -> str:
    """Register :data:`FLEX`, FlexAttention over each layer's causal band (its
    ``sliding_window`` where it has one), and return its name. One window of one document,
    unpadded: the model's mask is not read (its mask function builds none). Block masks are
    made once per length and window; the compiled kernel once per shape."""
    import functools

    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from transformers import AttentionInterface, AttentionMaskInterface

    compiled = torch.compile(flex_attention)

    @functools.cache
    def band(length: int, window: int | None) -> object:
        def keep(b, h, q, k):
            return (q >= k) & ((q - k < window) if window else (q >= k))

        return create_block_mask(keep, None, None, length, length, device="cpu")

    def attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
        if query.shape[2] != key.shape[2]:
            raise ValueError("the windowed floor times one pass over a window, no KV cache")
        cap = kwargs.get("softcap")
        score = None if cap is None else (lambda z, b, h, q, k: torch.tanh(z / cap) * cap)
        out = compiled(
            query, key, value, score_mod=score, block_mask=band(query.shape[2],
            kwargs.get("sliding_window")), scale=scaling, enable_gqa=True,
        )  # fmt: skip
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(FLEX, attention)
    AttentionMaskInterface.register(FLEX, lambda *args, **kwargs: None)
    return FLEX


def floors(model: Any, ids: Any, names: tuple[str, ...] = tuple(FLOORS)) -> dict[str, Callable]:
    """The calls of :data:`FLOORS` in ``names`` on ``ids`` (``(1, length)``), each one forward
    of ``model`` under its attention implementation (restore it with
    ``model.set_attn_implementation("eager")`` after timing)."""
    import torch

    from attncoda.capture import forward_kwargs

    mask = torch.ones_like(ids)
    like = forward_kwargs(model, ids.cpu(), mask.cpu(), logits=False)
    plain = {"input_ids": ids}

    if any(FLOORS[name][0] == FLEX for name in names):
        flex_floor()

    def call(implementation: str, every: bool) -> Callable:
        def forward() -> None:
            model.set_attn_implementation(implementation)
            model(**(plain if every else like))

        return forward

    return {name: call(*FLOORS[name]) for name in names}


def window_ids(model: Any, length: int) -> Any:
    """int64 ``(1, length)``: the window the benchmarks time, random tokens from 100 up to
    the vocabulary's size or 40,000, whichever is smaller (seed 0)."""
    import torch

    top = min(int(model.config.vocab_size), 40000)
    return torch.randint(100, top, (1, length), generator=torch.Generator().manual_seed(0))


def seconds(call: Callable[[], Any]) -> float:
    """Wall seconds of one ``call()``."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0
