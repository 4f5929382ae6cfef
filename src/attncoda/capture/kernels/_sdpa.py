"""The ``sdpa`` kernel of the fast path (:mod:`attncoda.capture.kernels.sdpa`): row
statistics from the log-sum-exp of PyTorch's fused attention, called twice.

No row of probabilities is materialised. For each query the fused attention kernel runs
over the *content* keys (the visible keys outside the sink set ``S``) twice, with the values
``V`` and with the keys ``K`` as values (the same scores both times), and returns

- ``lse_C = log sum_{j in C} exp(z_j)``, its log-sum-exp,
- ``o_C = E_q[v]`` and ``E_q[k]``, so ``E_q[z] = scaling * query . E_q[k]``.

The few sink scores ``z_S`` are computed directly. Then, in float64 (docs/design.md, "The
mathematics"):

- ``lse = logaddexp(lse_C, logsumexp(z_S))``; ``log p_j = z_j - lse`` for ``j in S``;
- ``s = sum_S p_j`` and ``log(1 - s) = lse_C - lse`` (no subtraction from 1);
- ``H(q) = lse_C - E_q[z]``: the content entropy from its own log-sum-exp;
- ``H(p) = -sum_S p_j log p_j + (1 - s) (H(q) - log(1 - s))``, the §1 identity
  ``H = h(s) + s H(p_S/s) + (1 - s) H(q)`` written without a division;
- ``H(p_S/s)`` from the sink logs alone;
- ``b = sqrt(k m / n) (mean_S log p - mean_C log p)`` with
  ``mean_C log p = scaling * query . mean_C(k) - lse`` (a prefix sum of the keys on causal
  rows, a mask product otherwise);
- the output ``(1 - s) o_C + sum_S p_j v_j``.

Every statistic is exact (the same quantity as :func:`attncoda.capture.stats.
row_statistics`) up to the kernel's float32 rounding. Because ``H(q)`` is read from the
content keys' own log-sum-exp, never as ``(H - h(s) - s H_S) / (1 - s)``, its error does not
grow as ``s -> 1``: no row is handed back to an exact recomputation.

Error bounds: derived per row against exact arithmetic on the same float32 queries and keys
(docs/design.md, "Error bounds"; :func:`attncoda.capture.kernels.fast_bounds`), worst-case
and far above what is measured (bench/fast_bounds.py); ``tests/capture/kernels/
test_fast_bounds.py`` checks them on every row of SmolLM2 and Gemma 3 layers and against
float64 up to ``1 - s = 1e-11``. The ``cpp`` kernel takes the same statistics from one pass
of its own (:mod:`attncoda.capture.kernels._cpp`).

Kernels: on CPU ``torch.ops.aten._scaled_dot_product_flash_attention_for_cpu`` (returns the
output and the log-sum-exp; an additive float mask of the query's dtype); on CUDA
``torch.ops.aten._scaled_dot_product_efficient_attention`` with ``compute_log_sumexp=True``
(an additive bias). Causal rows whose sink set is the same prefix ``0..k0-1`` in every
document (the first token, no left padding) use the kernel's own causal masking on the keys
from ``k0`` on; other masks are passed explicitly, ``block_size`` queries at a time over the
keys those queries can see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from attncoda._errors import AttncodaError
from attncoda.capture.stats import ContentSummary, sink_columns, split_rows

__all__ = ["FAST_STATISTICS", "sdpa_attention", "two_calls", "visible_keys"]

#: What the fast path returns per (batch, head, query_pos), as ``row_statistics`` does.
FAST_STATISTICS = (
    "n_keys", "n_sink", "sink_mass", "entropy", "content_entropy", "within_sink_entropy",
    "sink_balance",
)  # fmt: skip


def visible_keys(stop: int, k_len: int, causal: bool) -> int:
    """One past the last key a block of queries ending at ``stop`` (exclusive) can see.

    Causal rows (query ``i`` sees keys ``0..i``, queries and keys aligned) see no key at or
    beyond ``stop``; other rows may see every key.
    """
    return min(stop, k_len) if causal else k_len


#: The alignment, in elements, of the rows of a bias the CUDA kernel reads: its last stride
#: must be a multiple of 16 (the public SDPA pads a bias so before it calls the op).
BIAS_ALIGNMENT = 16


def aligned_bias(content: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The additive mask of a block, 0 on the content keys and ``-inf`` elsewhere, in a
    buffer whose rows start every :data:`BIAS_ALIGNMENT` elements: ``(b, 1, q, width)``, a
    slice of ``(b, 1, q, width rounded up to 16)``."""
    b, one, q, width = content.shape
    stride = -(-max(width, 1) // BIAS_ALIGNMENT) * BIAS_ALIGNMENT
    buffer = torch.zeros((b, one, q, stride), dtype=dtype, device=content.device)
    return buffer[..., :width].masked_fill_(~content, -math.inf)


def _aligned(bias: torch.Tensor) -> torch.Tensor:
    """``bias`` itself when its rows are aligned (:data:`BIAS_ALIGNMENT`), else an aligned
    copy."""
    size = bias.element_size()
    if (
        bias.stride(-1) == 1
        and bias.stride(-2) % BIAS_ALIGNMENT == 0
        and bias.data_ptr() % (BIAS_ALIGNMENT * size) == 0
    ):
        return bias
    width = bias.shape[-1]
    stride = -(-width // BIAS_ALIGNMENT) * BIAS_ALIGNMENT
    buffer = bias.new_empty((*bias.shape[:-1], stride))[..., :width]
    return buffer.copy_(bias)


def _cuda_kernel(query, key, value, mask, causal, scale):
    """``aten._scaled_dot_product_efficient_attention`` with ``compute_log_sumexp``: keys and
    values expanded to the query heads (the op takes no groups), a bias with aligned rows
    (the op checks; the public SDPA pads for it)."""
    b, h = query.shape[:2]
    bias = None if mask is None else _aligned(mask).expand(b, h, -1, -1)
    out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, 0.0, causal, scale=scale
    )
    return out, lse[..., : query.shape[2]]


_cuda_kernel.grouped = False  # type: ignore[attr-defined]


def _cpu_kernel(query, key, value, mask, causal, scale):
    """``aten._scaled_dot_product_flash_attention_for_cpu``: unexpanded keys and values
    under grouped-query attention (head ``i`` against key/value head ``i // group``)."""
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, causal, attn_mask=mask, scale=scale
    )


_cpu_kernel.grouped = True  # type: ignore[attr-defined]

#: The kernel of each device type: ``(query, key, value, mask, causal, scale) -> (output,
#: lse)``, ``lse`` float32 or wider ``(b, h, q)``; its ``grouped`` says whether it reads
#: unexpanded keys and values under grouped-query attention.
KERNEL_FOR_DEVICE = {"cuda": _cuda_kernel, "cpu": _cpu_kernel}


def _kernel_for(device: torch.device):
    kernel = KERNEL_FOR_DEVICE.get(device.type)
    if kernel is None:
        raise AttncodaError(
            f"the fast path runs on cpu or cuda; got a tensor on {device.type!r}: "
            "use method='exact'"
        )
    return kernel


def two_calls(kernel):
    """The ``sdpa`` kernel's content pass: ``(o_C, E_q[k], lse_C)`` from ``kernel`` called
    with the values, then the keys as values (docs/design.md, "The fast path")."""

    def content(query, key, value, mask, causal, scale):
        out, lse = kernel(query, key, value, mask, causal, scale)
        mean_k, _ = kernel(query, key, key, mask, causal, scale)
        return out, mean_k, lse

    content.grouped = kernel.grouped  # type: ignore[attr-defined]
    return content


def _emptied(parts, has_content):
    """The content pass's ``(o_C, E_q[k], lse_C)``, rows without content (``has_content``
    False, ``(b, 1, q)``) zero and ``-inf``, not what a kernel leaves in a row it masks."""
    out, mean_k, lse = parts
    empty = ~has_content
    out = out.masked_fill(empty[..., None], 0.0)
    mean_k = mean_k.masked_fill(empty[..., None], 0.0)
    lse = lse.masked_fill(empty, -math.inf)
    return out, mean_k, lse


def _per_head_dot(query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """``query . keys`` per query, ``keys`` on the key/value heads: (b, h, q) float64.

    The product runs in the query's dtype: ``keys`` (sums of keys, accumulated in float64)
    are rounded once to it, a relative error of its epsilon on each summed score.
    """
    b, h, q, d = query.shape
    kv = keys.shape[1]
    grouped = query.reshape(b, kv, h // kv, q, d)
    dots = torch.linalg.vecdot(grouped, keys.to(query.dtype)[:, :, None], dim=-1)
    return dots.reshape(b, h, q).to(torch.float64)


def _prefix_sink(sink: torch.Tensor) -> int | None:
    """``k0`` when every document's sink set is exactly ``0..k0-1`` (``k0 >= 1``), else None."""
    counts = sink.sum(-1)
    k0 = int(counts[0]) if counts.numel() else 0
    if k0 < 1 or not bool((counts == k0).all()) or not bool(sink[:, :k0].all()):
        return None
    return k0


def sdpa_attention(  # params: the kernel's call, each keyword a part of the layer's
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, scaling: float,
    sink: torch.Tensor, visible: torch.Tensor | None = None, causal: bool = False,
    block_size: int = 512,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:  # fmt: skip
    """Attention output and compositional row statistics from the fused kernel.

    Parameters
    ----------
    query : torch.Tensor
        ``(batch, head, query_pos, head_dim)``, in a dtype the ``sdpa`` kernel declares for
        its device (:mod:`attncoda.capture.kernels.sdpa`: float64 on the CPU only, which
        capture checks before it runs, :func:`attncoda.capture.kernels.check_dtype`).
    key, value : torch.Tensor
        ``(batch, kv_head, key_pos, head_dim)``, unexpanded under grouped-query attention
        (head ``i`` reads key/value head ``i // (head // kv_head)``, as transformers'
        ``repeat_kv``).
    scaling : float
        Score scale.
    sink : torch.Tensor
        bool ``(batch, key_pos)``: the sink keys of each document.
    visible : torch.Tensor, optional
        bool ``(batch, 1, query_pos, key_pos)``: the keys each query sees. With ``causal``
        it may be omitted (query ``i`` sees keys ``0..i``); without either every key is
        visible.
    causal : bool
        Whether ``visible`` (or its absence) is the plain causal pattern, which lets the
        kernel mask by itself and blocks skip the keys after their last query.
    block_size : int
        Queries per kernel call when the mask is explicit.

    Returns
    -------
    output : torch.Tensor
        ``(batch, head, query_pos, head_dim)`` in the query's dtype.
    stats : dict
        ``(batch, head, query_pos)`` tensors as :func:`attncoda.capture.stats.
        row_statistics` returns them (:data:`FAST_STATISTICS`): ``n_keys``, ``n_sink``
        (int64); ``sink_mass``, ``entropy``, ``content_entropy``, ``within_sink_entropy``,
        ``sink_balance`` (float64, nats). Rows without content or without a visible sink
        get 0.0 where a quantity is undefined, as there.
    """
    (b, h, q_len, _), k_len = query.shape, key.shape[2]
    if causal and q_len != k_len:
        raise AttncodaError(
            f"causal rows need as many queries as keys; got {q_len} queries and {k_len} keys"
        )
    x = _Inputs.of(query, key, value, scaling)
    sink = sink.to(query.device)
    z_sink, in_sink, sink_values = _sink_scores(x, sink, visible, causal)
    k = in_sink.sum(-1).expand(b, h, q_len)
    plain_causal = visible is None and causal
    k0 = _prefix_sink(sink) if plain_causal else None
    if k0 is not None:
        content_out, e_score, lse_c = _prefix_content(x, k0)
    else:
        content_out, e_score, lse_c, content_sum = _blocked_content(
            x, sink, visible, causal, block_size, sums=not plain_causal
        )
    if plain_causal:  # one prefix sum serves every row: no per-block sums
        content_sum = _causal_content_sum(x, z_sink, in_sink)
    n = _visible_counts(x, visible, causal)
    content = ContentSummary(lse_c, lse_c - e_score * scaling, content_sum)
    p_s, content_share, stats = split_rows(z_sink, in_sink, k, n, content)
    out = content_share[..., None].to(x.q.dtype) * content_out
    out = out + torch.matmul(p_s.to(x.q.dtype), sink_values)
    return out.to(query.dtype), stats


@dataclass(frozen=True)
class _Inputs:
    """One layer's call as the passes read it: ``q`` ``(b, h, q, d)``, ``k`` and ``v`` ``(b,
    kv, k, d)`` in float32 or wider; the content pass ``kernel`` (:func:`two_calls`) and its
    keys and values ``kx``, ``vx`` (expanded where it takes no groups); the ``scaling``."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    kx: torch.Tensor
    vx: torch.Tensor
    kernel: Any
    scaling: float

    @classmethod
    def of(cls, query, key, value, scaling: float) -> _Inputs:
        """The inputs of one :func:`sdpa_attention` call."""
        # Statistics accumulate in float32 or wider whatever the model's dtype.
        work = query.dtype if query.dtype in (torch.float32, torch.float64) else torch.float32
        qf, kf, vf = query.to(work), key.to(work), value.to(work)
        kernel = two_calls(_kernel_for(query.device))
        # The kernel's keys and values: unexpanded where it takes groups (the CPU op); else
        # expanded once per layer (the CUDA op), never per call.
        group = query.shape[1] // key.shape[1]
        kx, vx = kf, vf
        if group > 1 and not getattr(kernel, "grouped", False):
            kx, vx = kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1)
        return cls(qf, kf, vf, kx, vx, kernel, scaling)


def _sink_scores(x: _Inputs, sink, visible, causal: bool):
    """The sink keys' part of each row: their float64 scores ``z_sink`` ``(b, h, q, ks)``,
    which of them each query sees ``in_sink`` (bool ``(b, 1, q, ks)``) and their values
    ``(b, h, ks, d)``, from the sink columns of each document (:func:`sink_columns`)."""
    (b, h, q_len, d), kv = x.q.shape, x.k.shape[1]
    group = h // kv
    index, valid = sink_columns(sink)  # (b, ks)
    ks = index.shape[1]
    cols = index[:, None, :, None].expand(b, kv, ks, d)
    sink_keys = torch.gather(x.k, 2, cols).repeat_interleave(group, 1)  # (b, h, ks, d)
    sink_values = torch.gather(x.v, 2, cols).repeat_interleave(group, 1)
    z_sink = torch.matmul(x.q, sink_keys.transpose(-1, -2)).to(torch.float64) * x.scaling
    positions = torch.arange(q_len, device=x.q.device)
    if visible is None and causal:
        in_sink = (index[:, None, :] <= positions[None, :, None]) & valid[:, None, :]
        in_sink = in_sink[:, None]  # (b, 1, q, ks)
    elif visible is None:
        in_sink = valid[:, None, None, :].expand(b, 1, q_len, ks)
    else:
        in_sink = torch.gather(visible, -1, index[:, None, None, :].expand(b, 1, q_len, ks))
        in_sink = in_sink & valid[:, None, None, :]
    return z_sink, in_sink, sink_values


def _prefix_content(x: _Inputs, k0: int):
    """``(o_C, E_q[z] / scaling, lse_C)`` of causal rows whose sinks are the keys ``0..k0-1``
    of every document: keys k0.. against queries k0.. are causal again, so the kernel masks
    by itself; queries before k0 see sink keys only (zero, zero, and an empty log-sum-exp)."""
    b, h, q_len, d = x.q.shape
    qf, kx, vx = x.q, x.kx, x.vx
    front = (0, 0, k0, 0)
    if k0 < q_len:
        o, mk, lse = x.kernel(qf[:, :, k0:], kx[:, :, k0:], vx[:, :, k0:], None, True, x.scaling)
    else:
        o = mk = qf.new_zeros((b, h, 0, d))
        lse = qf.new_zeros((b, h, 0))
    content_out = torch.nn.functional.pad(o, front)
    e_score = torch.nn.functional.pad(torch.linalg.vecdot(qf[:, :, k0:], mk), (k0, 0))
    e_score = e_score.to(torch.float64)
    lse_c = torch.nn.functional.pad(lse.to(torch.float64), (k0, 0))
    return content_out, e_score, lse_c


def _blocked_content(x: _Inputs, sink, visible, causal: bool, block_size: int, sums: bool):
    """``(o_C, E_q[z] / scaling, lse_C, sum_C z)`` of every row, ``block_size`` queries at a
    time under an explicit mask of each block's content keys (those it sees, less the
    sinks); ``sum_C z`` in float64, the scores summed over the content keys, where ``sums``
    (else None: plain causal rows have them from one prefix sum)."""
    f64 = torch.float64
    qf, kf, kx, vx = x.q, x.k, x.kx, x.vx
    b, h, q_len, d = qf.shape
    k_len, device = kf.shape[2], qf.device
    positions = torch.arange(q_len, device=device)
    content_out = torch.empty((b, h, q_len, d), dtype=x.q.dtype, device=device)
    e_score = torch.empty((b, h, q_len), dtype=f64, device=device)
    lse_c = torch.empty((b, h, q_len), dtype=f64, device=device)
    content_sum = torch.empty((b, h, q_len), dtype=f64, device=device) if sums else None
    for start in range(0, q_len, block_size):
        stop = min(start + block_size, q_len)
        k_stop = visible_keys(stop, k_len, causal)
        if visible is None and causal:
            seen = positions[None, :k_stop] <= positions[start:stop, None]
            seen = seen[None, None].expand(b, 1, -1, -1)
        elif visible is None:
            seen = torch.ones((b, 1, stop - start, k_len), dtype=torch.bool, device=device)
        else:
            seen = visible[:, :, start:stop, :k_stop]
        content = seen & ~sink[:, None, None, :k_stop]
        # Only the keys some query of the block sees as content (a sliding window: the
        # last ``window`` keys) go to the kernel.
        cols = torch.nonzero(content.any(dim=(0, 1, 2)))
        k_lo = int(cols[0, 0]) if cols.numel() else 0
        k_hi = int(cols[-1, 0]) + 1 if cols.numel() else 1
        content = content[..., k_lo:k_hi]
        mask = aligned_bias(content, x.q.dtype)
        qb = qf[:, :, start:stop]
        parts = x.kernel(qb, kx[:, :, k_lo:k_hi], vx[:, :, k_lo:k_hi], mask, False, x.scaling)
        o, mk, lse = _emptied(parts, content.any(-1))
        content_out[:, :, start:stop] = o
        e_score[:, :, start:stop] = torch.linalg.vecdot(qb, mk).to(f64)
        lse_c[:, :, start:stop] = lse.to(f64)
        if content_sum is not None:
            # The content keys each query sees, summed (for the mean content log p).
            summed = torch.matmul(content.to(f64), kf[:, :, k_lo:k_hi].to(f64))  # (b, kv, q, d)
            content_sum[:, :, start:stop] = _per_head_dot(qb, summed) * x.scaling
    return content_out, e_score, lse_c, content_sum


def _causal_content_sum(x: _Inputs, z_sink, in_sink):
    """float64 ``(b, h, q)``: plain causal rows' scores summed over their content keys, the
    keys ``0..i`` summed once (a prefix sum) less the sink scores each row sees."""
    prefix = torch.cumsum(x.k.to(torch.float64), dim=2)  # (b, kv, k, d): keys 0..i summed
    visible_sum = _per_head_dot(x.q, prefix[:, :, : x.q.shape[2]]) * x.scaling
    return visible_sum - z_sink.masked_fill(~in_sink, 0.0).sum(-1)


def _visible_counts(x: _Inputs, visible, causal: bool):
    """int64 ``(b, h, q)``: how many keys each query sees."""
    (b, h, q_len, _), device = x.q.shape, x.q.device
    if visible is None and causal:
        return (torch.arange(q_len, device=device) + 1)[None, None, :].expand(b, h, q_len)
    if visible is None:
        return torch.full((b, h, q_len), x.k.shape[2], dtype=torch.int64, device=device)
    # Counted 1024 queries at a time: a sum over a bool tensor makes an int64 copy of
    # it (8 GiB for one 32k-token mask at once).
    counts = torch.empty((b, 1, q_len), dtype=torch.int64, device=device)
    for r0 in range(0, q_len, 1024):
        counts[:, :, r0 : r0 + 1024] = visible[:, :, r0 : r0 + 1024].sum(-1)
    return counts.expand(b, h, q_len)
