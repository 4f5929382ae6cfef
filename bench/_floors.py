"""The floors a capture is timed against, like for like (docs/design.md, "Performance").

A capture asks the model for the last position's logits only (``logits_to_keep=1``, through
:func:`attncoda.capture.forward_kwargs`): a language model then projects one position onto
its vocabulary, not every one. A floor does the same work: it is the model's own forward
with the very keyword arguments a capture's forward gets, under the attention
implementation named. The plain call, ``model(input_ids=ids)`` with every position's
logits, is timed beside it, so that the figures taken against it earlier can be read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["FLOORS", "floors", "seconds", "window_ids"]

#: The floors by name: (attention implementation, every position's logits or the last's).
FLOORS = {
    "sdpa": ("sdpa", False),
    "sdpa_all_logits": ("sdpa", True),
    "eager": ("eager", False),
    "eager_all_logits": ("eager", True),
}


def floors(model: Any, ids: Any, names: tuple[str, ...] = tuple(FLOORS)) -> dict[str, Callable]:
    """The calls of :data:`FLOORS` in ``names`` on ``ids`` (``(1, length)``), each one forward
    of ``model`` under its attention implementation (restore it with
    ``model.set_attn_implementation("eager")`` after timing)."""
    import torch

    from attncoda.capture import forward_kwargs

    mask = torch.ones_like(ids)
    like = forward_kwargs(model, ids.cpu(), mask.cpu(), logits=False)
    plain = {"input_ids": ids}

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
