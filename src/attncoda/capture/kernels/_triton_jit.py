"""The ``@triton.jit`` source of the fused kernel (docs/design.md, "The fused kernel").

The loop and its accumulators are documented in :mod:`attncoda.capture.kernels._triton`,
the launcher, which launches the kernel and turns its per-row outputs into statistics.
Triton is imported only when the kernel is first asked for, so the package imports without
it (and without torch); :func:`triton_available` and :func:`interpreting` say whether and
how it can run here.

The loop is built as flash kernels are (Triton's ``06-fused-attention.py``):

- one ``@triton.jit`` function, :func:`_tiles`, streams key tiles into the accumulators
  and is called in three stages per query block: the tiles before the band (window edge,
  padding, the first content key), the band, whose tiles every query of the block sees
  whole and which run with no mask at all, and the tiles after it (the causal diagonal,
  padding at the end). Only the two edge stages build a mask;
- scores are taken in log2 units: ``log2(e)`` is folded into the score scale once, every
  exponential is ``exp2``, and the entropy accumulator rides the same ``alpha`` rescale;
  the epilogue converts back to nats;
- sink keys leave the loop through its bounds: the sink prefix of each document (its
  first ``N_PREFIX`` real keys: almost every run) moves the first content key, and any
  other sink key (``SPARSE_SINK``) is masked only in the tiles that hold one, which a
  per-tile flag says (one scalar load per tile, no per-key gather in the others);
- the epilogue adds the few sink keys back (their scores, and their values into the
  output), so the output leaves the kernel whole, in the model's dtype.

What the source keeps to, for real sizes and for the Triton releases GPU machines carry
(3.6 and later; only APIs present there):

- ``batch x heads`` on grid axis 0 (limit ``2**31 - 1``; the heads of one key/value group
  are neighbours, so their key tiles are read from L2 after the first), query blocks on
  axis 1, the longest (latest) causal blocks first;
- 64-bit offsets: every base (batch, head, key tile) and every per-row offset is int64, so
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
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import triton.language as tl

__all__ = ["UNSPECIALISED", "compiled", "interpreting", "triton_available"]

#: The integer arguments the kernel does not specialise on (one compile for every value).
UNSPECIALISED = ("Q_LEN", "K_LEN", "OFFSET", "WINDOW", "N_SINK", "N_TILES")


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


# The kernel's source: plain functions, bound and decorated by :func:`compiled`.


def _capped(z, softcap):
    # tanh(z / c) c from one exponential of -2|x| (no overflow; tl has no tanh).
    x = z / softcap
    e = tl.exp(-2.0 * tl.abs(x))
    return tl.where(x < 0, e - 1.0, 1.0 - e) / (1.0 + e) * softcap


def _tiles(  # params: the launch contract of a Triton kernel # long: one loop, in registers
    acc, l_i, m_i, a_i, s_i, q,
    k_base, v_base, skn, skd, svn, svd, sink_base, tile_base,
    start, stop, lo, hi, pos, dims, dim_ok, offs,
    K_LEN, WINDOW, scaling, qk_scale, softcap,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr, SPARSE_SINK: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, EVEN_D: tl.constexpr,
):  # fmt: skip
    """Key tiles ``[start, stop)`` (``start`` a multiple of ``BLOCK_N``) into the
    accumulators; ``MASKED``: the edge tiles, whose keys some queries do not see."""
    for n0 in range(start, stop, BLOCK_N):
        n0 = tl.multiple_of(n0, BLOCK_N)
        cols = n0 + offs
        cols64 = cols.to(tl.int64)
        k_ptrs = k_base + cols64[:, None] * skn + dims[None, :] * skd
        v_ptrs = v_base + cols64[:, None] * svn + dims[None, :] * svd
        if MASKED:
            col_ok = (cols >= lo) & (cols < hi)
            if EVEN_D:
                tile_ok = col_ok[:, None]
            else:
                tile_ok = col_ok[:, None] & dim_ok[None, :]
            k = tl.load(k_ptrs, mask=tile_ok, other=0.0)
            v = tl.load(v_ptrs, mask=tile_ok, other=0.0)
        elif EVEN_D:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        else:
            k = tl.load(k_ptrs, mask=dim_ok[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=dim_ok[None, :], other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
            v = v.to(tl.float32)
        qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
        if HAS_SOFTCAP:
            u = _capped(qk * scaling, softcap) * 1.4426950408889634
        else:
            u = qk * qk_scale
        if MASKED:
            seen = col_ok[None, :]
            if CAUSAL:
                seen = seen & (cols[None, :] <= pos[:, None])
            if HAS_WINDOW:
                seen = seen & (pos[:, None] - cols[None, :] < WINDOW)
            if SPARSE_SINK:
                flag = tl.load(sink_base + cols, mask=cols < K_LEN, other=0)
                seen = seen & (flag == 0)[None, :]
            u = tl.where(seen, u, float("-inf"))
        elif SPARSE_SINK:
            # A sink key inside the band: masked only in the tiles that hold one.
            if tl.load(tile_base + n0 // BLOCK_N) != 0:
                flag = tl.load(sink_base + cols)
                u = tl.where((flag == 0)[None, :], u, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(u, 1))
        alpha = tl.math.exp2(m_i - m_new)
        centred = u - m_new[:, None]
        p = tl.math.exp2(centred)
        if MASKED or SPARSE_SINK:
            # 0 * -inf on the keys a row does not see: keep them out of the sums.
            kept = u > float("-inf")
            weighted = p * tl.where(kept, centred, 0.0)
            raw = tl.where(kept, u, 0.0)
        else:
            weighted = p * centred
            raw = u
        # sum p (u - m_old) becomes sum p' (u - m_new) = alpha (a + (m_old - m_new) l).
        a_i = alpha * (a_i + (m_i - m_new) * l_i) + tl.sum(weighted, 1)
        l_i = alpha * l_i + tl.sum(p, 1)
        s_i = s_i + tl.sum(raw, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i, a_i, s_i


def _forward(  # params: the launch contract of a Triton kernel # long: one program, in registers
    Q, K, V, SINK_INDEX, SINK_VALID, IS_SINK, TILE_SINK, KEY_LO, KEY_HI, N_PREFIX, AUX,
    OUT, LSE, ENT, SUM_Z, Z_SINK,
    sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sob, soh, som, sod,
    H, GROUP, Q_LEN, K_LEN, OFFSET, WINDOW, N_SINK, N_TILES, D,
    scaling, softcap,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
    AUX_CONTENT: tl.constexpr, AUX_SINK: tl.constexpr, SPARSE_SINK: tl.constexpr,
    UPCAST: tl.constexpr, PRECISION: tl.constexpr, EVEN_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):  # fmt: skip
    bh = tl.program_id(0)
    block = tl.program_id(1)
    if CAUSAL:  # the longest query blocks first: the last wave is short
        block = tl.num_programs(1) - 1 - block
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    b64 = b.to(tl.int64)
    r0 = block * BLOCK_M
    rows = r0 + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    dims = tl.arange(0, BLOCK_D)
    offs = tl.arange(0, BLOCK_N)
    row_ok = rows < Q_LEN
    dim_ok = dims < D
    if EVEN_D:
        row_mask = row_ok[:, None]
    else:
        row_mask = row_ok[:, None] & dim_ok[None, :]
    q_ptrs = Q + b64 * sqb + h.to(tl.int64) * sqh + rows64[:, None] * sqm + dims[None, :] * sqd
    q = tl.load(q_ptrs, mask=row_mask, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    qk_scale = scaling * 1.4426950408889634
    pos = rows + OFFSET  # each query's own position among the keys
    p0 = r0 + OFFSET  # the block's first position
    lo = tl.load(KEY_LO + b)
    hi = tl.load(KEY_HI + b)
    first = lo + tl.load(N_PREFIX + b)  # the first content key: the sink prefix is out
    # Keys some query of the block may see: [first, last); keys every query of it sees
    # (the band): [full_lo, full_hi).
    last = hi
    full_lo = first
    full_hi = hi
    if CAUSAL:
        last = tl.minimum(last, p0 + BLOCK_M)
        full_hi = tl.minimum(full_hi, p0 + 1)
    if HAS_WINDOW:
        full_lo = tl.maximum(full_lo, p0 + BLOCK_M - WINDOW)
        first = tl.maximum(first, p0 - WINDOW + 1)
    start = (first // BLOCK_N) * BLOCK_N
    band_lo = ((full_lo + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    band_hi = (full_hi // BLOCK_N) * BLOCK_N
    no_band = band_hi <= band_lo
    band_lo = tl.where(no_band, start, band_lo)
    band_hi = tl.where(no_band, start, band_hi)

    k_base = K + b64 * skb + kvh.to(tl.int64) * skh
    v_base = V + b64 * svb + kvh.to(tl.int64) * svh
    sink_base = IS_SINK + b64 * K_LEN
    tile_base = TILE_SINK + b64 * N_TILES

    # m starts finite (a row that has seen nothing keeps alpha = 1 and no NaN).
    m_i = tl.zeros([BLOCK_M], tl.float32) - 1.0e30
    l_i = tl.zeros([BLOCK_M], tl.float32)
    a_i = tl.zeros([BLOCK_M], tl.float32)
    s_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if AUX_CONTENT:
        # The learned sink as a content key: logit s_aux[h], no value.
        aux = tl.load(AUX + h).to(tl.float32) * 1.4426950408889634
        m_i = tl.zeros([BLOCK_M], tl.float32) + aux
        l_i = l_i + 1.0
        s_i = s_i + aux

    acc, l_i, m_i, a_i, s_i = _tiles(
        acc, l_i, m_i, a_i, s_i, q, k_base, v_base, skn, skd, svn, svd, sink_base,
        tile_base, start, band_lo, first, hi, pos, dims, dim_ok, offs,
        K_LEN, WINDOW, scaling, qk_scale, softcap,
        BLOCK_N, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, SPARSE_SINK, UPCAST, PRECISION,
        EVEN_D,
    )  # fmt: skip
    acc, l_i, m_i, a_i, s_i = _tiles(
        acc, l_i, m_i, a_i, s_i, q, k_base, v_base, skn, skd, svn, svd, sink_base,
        tile_base, band_lo, band_hi, first, hi, pos, dims, dim_ok, offs,
        K_LEN, WINDOW, scaling, qk_scale, softcap,
        BLOCK_N, False, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, SPARSE_SINK, UPCAST, PRECISION,
        EVEN_D,
    )  # fmt: skip
    acc, l_i, m_i, a_i, s_i = _tiles(
        acc, l_i, m_i, a_i, s_i, q, k_base, v_base, skn, skd, svn, svd, sink_base,
        tile_base, band_hi, last, first, hi, pos, dims, dim_ok, offs,
        K_LEN, WINDOW, scaling, qk_scale, softcap,
        BLOCK_N, True, CAUSAL, HAS_WINDOW, HAS_SOFTCAP, SPARSE_SINK, UPCAST, PRECISION,
        EVEN_D,
    )  # fmt: skip

    # The content statistics, in nats: lse_C = ln 2 (m + log2 l), H(q) = ln l - ln 2 a / l.
    some = l_i > 0
    l_safe = tl.where(some, l_i, 1.0)
    row = bh.to(tl.int64) * Q_LEN + rows64
    tl.store(
        LSE + row,
        tl.where(some, (m_i + tl.math.log2(l_safe)) * 0.6931471805599453, float("-inf")),
        mask=row_ok,
    )
    tl.store(
        ENT + row,
        tl.where(some, tl.log(l_safe) - 0.6931471805599453 * a_i / l_safe, 0.0),
        mask=row_ok,
    )
    tl.store(SUM_Z + row, s_i * 0.6931471805599453, mask=row_ok)

    # The sink keys, a few more tiles of the same online softmax (their score and value
    # rows gathered once, BLOCK_S at a time): their scores for the statistics, and their
    # share of the output, which then leaves the kernel whole.
    sink_cols = tl.arange(0, BLOCK_S)
    if AUX_SINK:
        # The learned sink in S: logit s_aux[h], no value.
        aux_s = tl.load(AUX + h).to(tl.float32) * 1.4426950408889634
        m_new = tl.maximum(m_i, aux_s)
        alpha = tl.math.exp2(m_i - m_new)
        l_i = alpha * l_i + tl.math.exp2(aux_s - m_new)
        acc = acc * alpha[:, None]
        m_i = m_new
    for t0 in range(0, N_SINK, BLOCK_S):
        t = t0 + sink_cols
        t_ok = t < N_SINK
        index = tl.load(SINK_INDEX + b64 * N_SINK + t, mask=t_ok, other=0)
        valid = tl.load(SINK_VALID + b64 * N_SINK + t, mask=t_ok, other=0) != 0
        index64 = index.to(tl.int64)
        if EVEN_D:
            gather_ok = valid[:, None]
        else:
            gather_ok = valid[:, None] & dim_ok[None, :]
        ks = tl.load(
            k_base + index64[:, None] * skn + dims[None, :] * skd, mask=gather_ok, other=0.0
        )
        vs = tl.load(
            v_base + index64[:, None] * svn + dims[None, :] * svd, mask=gather_ok, other=0.0
        )
        if UPCAST:
            ks = ks.to(tl.float32)
            vs = vs.to(tl.float32)
        zt = tl.dot(q, tl.trans(ks), input_precision=PRECISION) * scaling
        if HAS_SOFTCAP:
            zt = _capped(zt, softcap)
        sees = (valid & (index >= lo) & (index < hi))[None, :]
        if CAUSAL:
            sees = sees & (index[None, :] <= pos[:, None])
        if HAS_WINDOW:
            sees = sees & (pos[:, None] - index[None, :] < WINDOW)
        zt = tl.where(sees, zt, float("-inf"))
        z_ptrs = Z_SINK + row[:, None] * N_SINK + t[None, :]
        tl.store(z_ptrs, zt, mask=row_ok[:, None] & t_ok[None, :])
        ut = zt * 1.4426950408889634
        m_new = tl.maximum(m_i, tl.max(ut, 1))
        alpha = tl.math.exp2(m_i - m_new)
        pt = tl.math.exp2(ut - m_new[:, None])
        l_i = alpha * l_i + tl.sum(pt, 1)
        acc = acc * alpha[:, None] + tl.dot(pt.to(vs.dtype), vs, input_precision=PRECISION)
        m_i = m_new

    # A row that sees no key at all writes 0.
    total = tl.where(l_i > 0, l_i, 1.0)
    o_ptrs = OUT + b64 * sob + h.to(tl.int64) * soh + rows64[:, None] * som + dims[None, :] * sod
    tl.store(o_ptrs, (acc / total[:, None]).to(OUT.dtype.element_ty), mask=row_mask)


@functools.lru_cache(maxsize=2)
def compiled(interpret: bool):
    """``(triton, kernel)``: the ``@triton.jit`` kernel, decorated under the interpreter
    flag it is asked for (Triton reads ``TRITON_INTERPRET`` when it decorates).

    Each decoration binds the source functions of this module to a namespace of its own,
    in which the kernel finds its helpers (:func:`_tiles`, :func:`_capped`) decorated the
    same way: an interpreted kernel never calls a compiled helper, nor the reverse.
    """
    import triton
    import triton.language as tl

    del interpret  # the cache key: one decoration per mode
    namespace: dict[str, Any] = {"tl": tl, "triton": triton, "__name__": __name__}

    def bind(fn, **options):
        copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__)
        copy.__module__, copy.__qualname__, copy.__doc__ = __name__, fn.__qualname__, fn.__doc__
        copy.__annotations__ = dict(fn.__annotations__)  # the tl.constexpr parameters
        namespace[fn.__name__] = triton.jit(copy, **options)
        return namespace[fn.__name__]

    bind(_capped)
    bind(_tiles)
    return triton, bind(_forward, do_not_specialize=list(UNSPECIALISED))
