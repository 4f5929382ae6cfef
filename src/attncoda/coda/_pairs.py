"""The blocked passes behind :func:`attncoda.coda.metrics.head_distances`: the mean over rows
of a pair distance for every pair of heads (docs/design.md, "Conventions and the head
distance").

The Gram-derived distances (Euclidean on clr or square-root rows, cosine) take one batched
matmul per block of rows; JSD and TV take a blocked elementwise pass over the upper
triangle. Blocks are sized by working memory and trimmed to the keys their rows see. Nothing
here validates: :func:`~attncoda.coda.metrics.head_distances` does that first.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import array_api_compat

__all__ = ["gram_mean", "pairwise_mean"]

_CHUNK_BYTES = 1 << 22  # working memory per Gram block: small blocks stay in cache
_PAIR_BYTES = 1 << 20  # rows per JSD / TV block on the host: their keys fill a core's L2
_SLAB_BYTES = 1 << 22  # working memory per JSD / TV block on the host (a slab of heads)
_DEVICE_BYTES = 1 << 28  # the same on an accelerator, where launches cost more than memory


def _row_blocks(width: Any, rows_per_block: int) -> list[tuple[int, int, int]]:
    """``(start, stop, keys)`` blocks of consecutive rows, ``keys`` the widest row's extent.

    ``width`` (host ints, shape (row,), non-decreasing) is one past each row's last key.
    Rows come sorted by width, so a block of causal rows reads only the keys its longest row
    sees: the keys beyond hold no probability (and no clr coordinate) in any head of the
    block, and slicing them off halves the work on causal rows.
    """
    n = len(width)
    return [
        (r0, min(n, r0 + rows_per_block), int(width[min(n, r0 + rows_per_block) - 1]))
        for r0 in range(0, n, rows_per_block)
    ]


def _one_blas_thread(xp: Any) -> Any:
    """Cap numpy's BLAS at one thread for the small products (when threadpoolctl is there).

    Each product is small (heads x keys by keys x heads); a threaded OpenBLAS spends longer
    waking and syncing its threads than computing, and on a loaded 2-core machine a batched
    product was measured 25x slower on 2 threads than on one.
    """
    if not array_api_compat.is_numpy_namespace(xp):
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def gram_mean(xp: Any, x: Any, kind: str, width: Any) -> Any:
    """Mean over rows of a Gram-derived pair distance; ``x`` has shape (heads, rows, keys).

    ``kind="euclid"`` gives ``||x_a - x_b||`` from ``|x_a|^2 + |x_b|^2 - 2 x_a.x_b``. That
    difference cancels badly for nearly equal rows (identical heads would come out near
    ``sqrt(eps) |x|`` instead of 0), so pairs whose squared distance is below ``1e-4`` of
    ``|x_a|^2 + |x_b|^2`` (a dtype-dependent fraction) are recomputed directly from the
    difference. ``kind="cosine"`` gives ``1 - x_a.x_b`` for unit rows. ``x`` is zero beyond
    each row's ``width`` (see :func:`_row_blocks`).
    """
    heads, rows, keys = x.shape
    step = max(1, _CHUNK_BYTES // max(1, heads * heads * x.dtype.itemsize))
    total = xp.zeros((heads, heads), dtype=x.dtype, device=array_api_compat.device(x))
    # The Gram form loses about eps * scale / d2 of relative accuracy on d2: recompute the
    # pairs where that could exceed ~1e-5 (1e-4 of the scale at least).
    refine = max(1e-4, 1e5 * float(xp.finfo(x.dtype).eps))
    with _one_blas_thread(xp):
        for r0, r1, n_keys in _row_blocks(width, step):
            xr = xp.permute_dims(x[:, r0:r1, :n_keys], (1, 0, 2))  # rows heads keys
            gram = xp.matmul(xr, xp.permute_dims(xr, (0, 2, 1)))
            if kind == "cosine":
                total = total + xp.sum(xp.clip(1 - gram, min=0.0), axis=0)
                continue
            sq = xp.sum(xr * xr, axis=-1)
            scale = sq[:, :, None] + sq[:, None, :]
            d2 = xp.clip(scale - 2 * gram, min=0.0)
            r_i, a_i, b_i = xp.nonzero(d2 <= refine * scale)
            if r_i.shape[0]:
                diff = xr[r_i, a_i, :] - xr[r_i, b_i, :]
                d2[r_i, a_i, b_i] = xp.sum(diff * diff, axis=-1)
            total = total + xp.sum(xp.sqrt(d2), axis=0)
    return total / rows


def _dot(xp: Any, a: Any, b: Any) -> Any:
    """``sum(a * b)`` over the last axis, fused where the namespace has ``vecdot``."""
    vecdot = getattr(xp, "vecdot", None)
    return vecdot(a, b, axis=-1) if vecdot is not None else xp.sum(a * b, axis=-1)


def pairwise_mean(xp: Any, p: Any, metric: str, h: Any, width: Any) -> Any:
    """Mean over rows of JSD or TV for every head pair, in blocks (upper triangle).

    Each block is a few rows (their keys fill ``_PAIR_BYTES``), trimmed to the keys they see
    (:func:`_row_blocks`), against a slab of heads (``_SLAB_BYTES`` of temporaries, which
    numpy computes in buffers each thread reuses: a fresh temporary's pages fault in on first
    touch, measured at several times the arithmetic). The slab only groups pairs: each
    pair's sum over its rows is the same whatever the slab. numpy releases the GIL in its
    elementwise loops, so for numpy input the blocks run on a few threads (one per core, at
    most 4); the per-pair sums are still added in block order, so the result does not depend
    on the thread count. Other namespaces (torch) use their own intra-op threads, with
    larger blocks off the host, and run the blocks in order.
    """
    blocks = _PairBlocks(xp, p, metric, h)
    tasks = blocks.tasks(width)
    workers = min(4, os.cpu_count() or 1)
    with _one_blas_thread(xp):
        if blocks.host_numpy and workers > 1 and len(tasks) > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                parts = list(pool.map(blocks, tasks))
        else:
            parts = [blocks(task) for task in tasks]
    heads, rows = p.shape[0], p.shape[1]
    total = xp.zeros((heads, heads), dtype=p.dtype, device=blocks.device)
    for (_, _, _, a0, a1), part in zip(tasks, parts, strict=True):
        total[a0:a1, a0:] = total[a0:a1, a0:] + part
    # Only b >= a is filled for every a; mirror it onto the lower triangle.
    idx = xp.arange(heads, device=blocks.device)
    upper = idx[None, :] >= idx[:, None]
    return xp.where(upper, total, xp.permute_dims(total, (1, 0))) / rows


class _PairBlocks:
    """One pass of :func:`pairwise_mean` over rows ``p`` (head, row, key_pos) of entropies
    ``h`` (head, row; nats). Called on a task ``(r0, r1, n_keys, a0, a1)``: the sum over
    rows ``r0:r1`` of ``metric`` of heads ``a0:a1`` against heads ``a0:``."""

    def __init__(self, xp: Any, p: Any, metric: str, h: Any) -> None:
        self.xp, self.metric, self.dtype = xp, metric, p.dtype
        self.heads = p.shape[0]
        self.device = array_api_compat.device(p)
        self.tiny = float(xp.finfo(p.dtype).smallest_normal)
        self.host_numpy = array_api_compat.is_numpy_namespace(xp)
        self.pr_all = xp.permute_dims(p, (1, 0, 2))  # rows heads keys
        self.hr_all = xp.permute_dims(h, (1, 0))  # rows heads
        self.local = threading.local()

    def tasks(self, width: Any) -> list[tuple[int, int, int, int, int]]:
        """The tasks: rows by :func:`_row_blocks` of ``width``, cut into slabs of heads."""
        rows, heads, keys = self.pr_all.shape
        item = self.dtype.itemsize
        on_host = self.host_numpy or str(self.device) == "cpu"
        budget = _PAIR_BYTES if on_host else _DEVICE_BYTES
        slab = _SLAB_BYTES if on_host else _DEVICE_BYTES
        row_step = max(1, min(rows, budget // max(1, heads * keys * item)))
        tasks = []
        for r0, r1, n_keys in _row_blocks(width, row_step):
            head_step = max(1, slab // max(1, heads * (r1 - r0) * max(1, n_keys) * item))
            tasks += [
                (r0, r1, n_keys, a0, min(heads, a0 + head_step))
                for a0 in range(0, heads, head_step)
            ]
        return tasks

    def scratch(self, shape: tuple[int, ...], slot: int) -> Any:
        """A numpy buffer of ``shape`` that this thread's blocks reuse (``slot`` 0 or 1)."""
        size = math.prod(shape)
        buffers = getattr(self.local, "buffers", None)
        if buffers is None:
            buffers = self.local.buffers = [None, None]
        if buffers[slot] is None or buffers[slot].size < size:
            buffers[slot] = self.xp.empty(size, dtype=self.dtype)
        return buffers[slot][:size].reshape(shape)

    def __call__(self, task: tuple[int, int, int, int, int]) -> Any:
        xp, (r0, r1, n_keys, a0, a1) = self.xp, task
        pr = self.pr_all[r0:r1, :, :n_keys]
        pa, pb = pr[:, a0:a1, None, :], pr[:, None, a0:, :]
        shape = (r1 - r0, a1 - a0, self.heads - a0, n_keys)
        if self.metric == "tv":
            # A product with ones sums the last axis faster than ``sum`` does.
            ones = xp.ones((n_keys,), dtype=self.dtype, device=self.device)
            if self.host_numpy:  # the same values, computed in reused buffers
                diff = xp.subtract(pa, pb, out=self.scratch(shape, 0))
                d = xp.matmul(xp.abs(diff, out=diff), ones) / 2
            else:
                d = xp.matmul(xp.abs(pa - pb), ones) / 2
        else:
            # both = 2 m; sum(m log m) = sum(both log both)/2 - log 2. Adding the smallest
            # normal number leaves every positive entry's log as it is and turns 0 log 0
            # into 0 * log(tiny) = 0, without a masking pass.
            if self.host_numpy:  # the same values, computed in reused buffers
                both = xp.add(pa, pb, out=self.scratch(shape, 0))
                logs = xp.add(both, self.tiny, out=self.scratch(shape, 1))
                logs = xp.log(logs, out=logs)
            else:
                both = pa + pb
                logs = xp.log(both + self.tiny)
            h_m = math.log(2.0) - _dot(xp, both, logs) / 2
            hr = self.hr_all[r0:r1]
            d = xp.clip(h_m - (hr[:, a0:a1, None] + hr[:, None, a0:]) / 2, min=0.0)
        return xp.sum(d, axis=0)  # (a1 - a0, heads - a0)
