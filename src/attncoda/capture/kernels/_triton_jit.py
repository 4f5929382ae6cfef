"""The ``@triton.jit`` source of the fused kernel (docs/design.md, "The fused kernel").

The loop and its accumulators are documented in :mod:`attncoda.capture.kernels._triton`,
the launcher, which launches the kernel and turns its per-row outputs into statistics.
Triton is imported only when the kernel is first asked for, so the package imports without
it (and without torch); :func:`triton_available` and :func:`interpreting` say whether and
how it can run here.

What the source keeps to, for real sizes and for the Triton releases GPU machines carry
(3.6 and later; only APIs present there):

- ``batch x heads`` on grid axis 0 (limit ``2**31 - 1``), query blocks on axis 1;
- 64-bit offsets: every base (batch, head, key block) and every per-row offset is int64, so
  no offset wraps past ``2**31`` elements; only offsets inside one tile are int32;
- lengths, offsets, the window and the sink count are not specialised
  (``do_not_specialize``): documents of other lengths reuse one compiled kernel;
- the score and value products take the dot precision the launch configuration names
  (:mod:`attncoda.capture.kernels._configs`): ``"ieee"``, or ``"tf32x3"`` for float32 on
  tensor cores.
"""

from __future__ import annotations

import functools
import os

__all__ = ["UNSPECIALISED", "compiled", "interpreting", "triton_available"]

#: The integer arguments the kernel does not specialise on (one compile for every value).
UNSPECIALISED = ("Q_LEN", "K_LEN", "OFFSET", "WINDOW", "N_SINK")


def interpreting() -> bool:
    """Whether Triton's interpreter is asked for (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


@functools.lru_cache(maxsize=1)
def triton_available() -> bool:
    """Whether ``triton`` imports."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.lru_cache(maxsize=2)
def compiled(interpret: bool):
    """``(triton, kernel)``: the ``@triton.jit`` kernel, decorated under the interpreter
    flag it is asked for (Triton reads ``TRITON_INTERPRET`` when it decorates)."""
    import triton
    import triton.language as tl

    del interpret  # the cache key: one decoration per mode

    @triton.jit(do_not_specialize=list(UNSPECIALISED))
    def _forward(
        Q, K, V, SINK_INDEX, SINK_VALID, IS_SINK, KEY_LO, KEY_HI, AUX,
        OUT, LSE, ENT, SUM_Z, Z_SINK,
        sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
        H, GROUP, Q_LEN, K_LEN, OFFSET, WINDOW, N_SINK, D,
        scaling, softcap,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
        CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
        AUX_CONTENT: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
        EVEN_D: tl.constexpr,
    ):  # fmt: skip
        bh = tl.program_id(0)
        block = tl.program_id(1)
        b = bh // H
        h = bh % H
        kvh = h // GROUP
        b64 = b.to(tl.int64)
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        rows64 = rows.to(tl.int64)
        dims = tl.arange(0, BLOCK_D)
        offs = tl.arange(0, BLOCK_N)
        row_ok = rows < Q_LEN
        dim_ok = dims < D
        if EVEN_D:
            row_mask = row_ok[:, None]
        else:
            row_mask = row_ok[:, None] & dim_ok[None, :]
        q_base = Q + b64 * sqb + h.to(tl.int64) * sqh
        q = tl.load(q_base + rows64[:, None] * sqm + dims[None, :] * sqd, mask=row_mask, other=0.0)
        if UPCAST:
            q = q.to(tl.float32)
        pos = rows + OFFSET  # each query's own position among the keys
        lo = tl.load(KEY_LO + b)
        hi = tl.load(KEY_HI + b)
        start = lo
        stop = hi
        if CAUSAL:
            stop = tl.minimum(stop, block * BLOCK_M + BLOCK_M + OFFSET)
        if HAS_WINDOW:
            start = tl.maximum(start, block * BLOCK_M + OFFSET - WINDOW + 1)
        start = (start // BLOCK_N) * BLOCK_N
        k_base = K + b64 * skb + kvh.to(tl.int64) * skh
        v_base = V + b64 * svb + kvh.to(tl.int64) * svh
        sink_base = IS_SINK + b64 * K_LEN

        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        a_i = tl.zeros([BLOCK_M], tl.float32)
        s_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        if AUX_CONTENT:
            # The learned sink as a content key: logit s_aux[h], no value.
            aux = tl.load(AUX + h).to(tl.float32)
            m_i = tl.zeros([BLOCK_M], tl.float32) + aux
            l_i = l_i + 1.0
            s_i = s_i + aux

        for n0 in range(start, stop, BLOCK_N):
            cols = n0 + offs
            col_ok = (cols < stop) & (cols >= lo)
            # Offsets from the key index in the loop (int64 rows, nothing hoisted and
            # kept live across it); the head-dim mask only where the head dim is padded.
            cols64 = cols.to(tl.int64)
            if EVEN_D:
                tile_ok = col_ok[:, None]
            else:
                tile_ok = col_ok[:, None] & dim_ok[None, :]
            k_ptrs = k_base + cols64[:, None] * skn + dims[None, :] * skd
            v_ptrs = v_base + cols64[:, None] * svn + dims[None, :] * svd
            k = tl.load(k_ptrs, mask=tile_ok, other=0.0)
            v = tl.load(v_ptrs, mask=tile_ok, other=0.0)
            if UPCAST:
                k = k.to(tl.float32)
                v = v.to(tl.float32)
            z = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scaling
            if HAS_SOFTCAP:
                # tanh(x) from one exponential of -2|x| (no overflow; tl has no tanh).
                x = z / softcap
                e = tl.exp(-2.0 * tl.abs(x))
                z = tl.where(x < 0, e - 1.0, 1.0 - e) / (1.0 + e) * softcap
            is_sink = tl.load(sink_base + cols, mask=col_ok, other=1)
            seen = (col_ok & (is_sink == 0))[None, :]
            if CAUSAL:
                seen = seen & (cols[None, :] <= pos[:, None])
            if HAS_WINDOW:
                seen = seen & (pos[:, None] - cols[None, :] < WINDOW)
            z = tl.where(seen, z, float("-inf"))
            s_i = s_i + tl.sum(tl.where(seen, z, 0.0), 1)
            m_new = tl.maximum(m_i, tl.max(z, 1))
            # A row that has seen no key yet keeps m = -inf; shift by 0 then (no nan).
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            centred = tl.where(seen, z - m_safe[:, None], 0.0)
            p = tl.exp(z - m_safe[:, None])  # 0 on the keys not seen (z = -inf there)
            # sum p (z - m_old) becomes sum p' (z - m_new) = alpha (a + (m_old - m_new) l).
            moved = (tl.where(l_i > 0, m_i, m_safe) - m_safe) * l_i
            a_i = alpha * (a_i + moved) + tl.sum(p * centred, 1)
            l_i = alpha * l_i + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
            m_i = m_new

        some = l_i > 0
        l_safe = tl.where(some, l_i, 1.0)
        row = bh.to(tl.int64) * Q_LEN + rows64
        tl.store(
            OUT + b64 * sob + h.to(tl.int64) * soh + rows64[:, None] * som + dims[None, :] * sod,
            acc / l_safe[:, None],
            mask=row_mask,
        )
        log_l = tl.log(l_safe)
        tl.store(LSE + row, tl.where(some, m_i + log_l, float("-inf")), mask=row_ok)
        tl.store(ENT + row, tl.where(some, log_l - a_i / l_safe, 0.0), mask=row_ok)
        tl.store(SUM_Z + row, s_i, mask=row_ok)

        # The queries again, from memory: the block loaded before the loop is not kept
        # live across it for these few scores.
        qf = tl.load(
            q_base + rows64[:, None] * sqm + dims[None, :] * sqd, mask=row_mask, other=0.0
        ).to(tl.float32)
        for t in range(N_SINK):
            index = tl.load(SINK_INDEX + b64 * N_SINK + t)
            valid = tl.load(SINK_VALID + b64 * N_SINK + t)
            key_row = tl.load(
                k_base + index.to(tl.int64) * skn + dims * skd, mask=dim_ok, other=0.0
            ).to(tl.float32)
            zt = tl.sum(qf * key_row[None, :], 1) * scaling
            if HAS_SOFTCAP:
                x = zt / softcap
                e = tl.exp(-2.0 * tl.abs(x))
                zt = tl.where(x < 0, e - 1.0, 1.0 - e) / (1.0 + e) * softcap
            sees = (valid != 0) & (index >= lo) & (index < hi)
            if CAUSAL:
                sees = sees & (index <= pos)
            if HAS_WINDOW:
                sees = sees & (pos - index < WINDOW)
            tl.store(Z_SINK + row * N_SINK + t, tl.where(sees, zt, float("-inf")), mask=row_ok)

    return triton, _forward
