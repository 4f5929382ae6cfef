"""The pure maths of docs/design.md, "The mathematics", one or two lines each.

Every function takes the array namespace ``xp`` first and works on the last axis (the keys).
Nothing here validates: the public functions of :mod:`attncoda.coda` do that.
"""

from __future__ import annotations

import math
from typing import Any

import array_api_compat


def index(xp: Any, like: Any, positions: tuple[int, ...]) -> Any:
    """An integer index array of ``positions`` on the device of ``like``."""
    return xp.asarray(positions, dtype=xp.int64, device=array_api_compat.device(like))


def split_groups(xp: Any, z: Any, sink: tuple[int, ...]) -> tuple[Any, Any]:
    """``(z_S, z_C)``: the sink keys and the content keys (all others, in order)."""
    n = z.shape[-1]
    content = tuple(j for j in range(n) if j not in set(sink))
    return xp.take(z, index(xp, z, sink), axis=-1), xp.take(z, index(xp, z, content), axis=-1)


def logsumexp(xp: Any, z: Any) -> Any:
    """``log(sum(exp(z)))`` over the last axis without overflow; all ``-inf`` gives ``-inf``."""
    m = xp.max(z, axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    total = xp.sum(xp.exp(z - m), axis=-1)
    positive = total > 0
    logs = xp.log(xp.where(positive, total, xp.ones_like(total)))
    return xp.where(positive, logs, xp.full_like(total, -math.inf)) + m[..., 0]


def normalise(xp: Any, z: Any) -> Any:
    """Log-softmax: log-probabilities from logits (or re-closed log-probabilities)."""
    return z - logsumexp(xp, z)[..., None]


def entropy_of_logs(xp: Any, lp: Any) -> Any:
    """``H = -sum p log p`` in nats from normalised log-probabilities; ``0 log 0 = 0``."""
    finite = xp.isfinite(lp)
    safe = xp.where(finite, lp, xp.zeros_like(lp))
    return -xp.sum(xp.where(finite, xp.exp(safe) * safe, xp.zeros_like(lp)), axis=-1)


def clr(xp: Any, z: Any) -> Any:
    """Centred log-ratio: ``z - mean(z)``; shift-invariant, so logits give the same."""
    return z - xp.mean(z, axis=-1, keepdims=True)


def sink_balance(xp: Any, z: Any, sink: tuple[int, ...]) -> Any:
    """ILR balance between sink and content: ``sqrt(k m / n) (mean z_S - mean z_C)``."""
    z_s, z_c = split_groups(xp, z, sink)
    k, m = len(sink), z.shape[-1] - len(sink)
    return math.sqrt(k * m / (k + m)) * (xp.mean(z_s, axis=-1) - xp.mean(z_c, axis=-1))


def norm(xp: Any, x: Any) -> Any:
    """Euclidean norm over the last axis."""
    return xp.sqrt(xp.sum(x * x, axis=-1))
