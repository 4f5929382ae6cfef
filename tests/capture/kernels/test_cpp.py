"""The ``cpp`` kernel (capture/kernels/cpp.py, _cpp.py, _cpp.cpp): its one pass against
float64 attention over each row's content keys (causal, grouped, padded, windowed rows, sink
keys left out, rows that see nothing), its refusals (every malformed tensor or index the
C++ would read, refused in Python with what to do, and by the C++ itself when called
directly), a failed build said once with ``sdpa`` serving, and a machine without a
compiler. The statistics it feeds are checked against their float64 definitions in
test_fast.py and against the derived bounds in test_fast_bounds.py, with the ``sdpa``
kernel beside it, and at long rows in test_cpp_long_rows.py; how it is built, in
test_cpp_build.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.kernels import MaskShape, _cpp, cpp, registry  # noqa: E402

pytestmark = pytest.mark.skipif(
    cpp.prerequisites() is not None, reason=f"the cpp kernel: {cpp.prerequisites()}"
)


def attention64(query, key, value, visible, scale):
    """``E_p[v]``, the log-sum-exp and ``E_p[z]`` of float64 rows (``visible``: bool,
    broadcast to ``(b, h, q, k)``); rows that see nothing get zeros, ``-inf`` and 0."""
    group = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(group, 1)
    v = value.double().repeat_interleave(group, 1)
    z = (query.double() @ k.transpose(-1, -2)) * scale
    masked = z.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(masked, -1)
    p = torch.exp(masked - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse, (p * z.masked_fill(~visible, 0.0)).sum(-1)


def check(got, want):
    # float32 sums of up to a thousand terms of size ~1 (values, scores up to ~10): within
    # 2e-5 of them, ~100 float32 ulps; a wrong key in or out of a row moves them by ~1e-3.
    out, lse, ez = (t.double().numpy() for t in got)
    ref_out, ref_lse, ref_ez = (t.numpy() for t in want)
    np.testing.assert_allclose(out, ref_out, atol=2e-5)
    np.testing.assert_allclose(lse, ref_lse, atol=2e-5, rtol=1e-6)
    np.testing.assert_allclose(ez, ref_ez, atol=1e-4)


def layer(b=2, h=6, kv=2, q_len=700, k_len=700, d=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, q_len, h, d, generator=g).transpose(1, 2)  # as a model hands it over
    k = torch.randn(b, kv, k_len, d, generator=g)
    v = torch.randn(b, kv, k_len, d, generator=g)
    # Later keys score higher, so a row's running maximum moves up block after block and
    # the partial sums are rescaled (the keys span two key blocks of 512).
    k = k * torch.linspace(0.5, 2.0, k_len)[None, None, :, None]
    return q, k, v


def shape(b, lo, hi, causal=True, window=None):
    return MaskShape(
        torch.tensor(lo, dtype=torch.int32), torch.tensor(hi, dtype=torch.int32), causal, window
    )


def visible_of(b, q_len, k_len, lo, hi, causal=True, window=None, sinks=()):
    keys = torch.arange(k_len)[None, None, None, :]
    pos = torch.arange(q_len)[None, None, :, None] + (k_len - q_len)
    lo_, hi_ = (torch.tensor(x)[:, None, None, None] for x in (lo, hi))
    seen = (keys >= lo_) & (keys < hi_)
    if causal:
        seen = seen & (keys <= pos)
    if window is not None:
        seen = seen & (pos - keys < window)
    for doc, positions in enumerate(sinks):
        for j in positions:
            seen[doc, :, :, j] = False
    return seen


def test_one_pass_equals_float64_attention_on_causal_grouped_rows_without_the_sink():
    q, k, v = layer()
    assert q.stride(-1) == 1 and not q.is_contiguous()  # a strided query is read in place
    sinks = torch.tensor([[0], [0]])
    got = _cpp.content_pass(q, k, v, shape(2, [0, 0], [700, 700]), sinks, 0.3)
    want = attention64(q, k, v, visible_of(2, 700, 700, [0, 0], [700, 700], sinks=[[0], [0]]), 0.3)
    check(got, want)
    # Query 0 sees the sink alone: no content.
    assert torch.equal(got[1][:, :, 0], torch.full((2, 6), -math.inf))
    assert float(got[0][:, :, 0].abs().max()) == 0.0 and float(got[2][:, :, 0].abs().max()) == 0


def test_more_keys_than_queries_align_the_queries_with_the_last_keys():
    q, k, v = layer(q_len=130, k_len=600)
    sinks = torch.full((2, 1), -1)
    got = _cpp.content_pass(q, k, v, shape(2, [0, 0], [600, 600]), sinks, 0.3)
    check(got, attention64(q, k, v, visible_of(2, 130, 600, [0, 0], [600, 600]), 0.3))


@pytest.mark.parametrize("causal", [True, False])
def test_padding_a_window_and_sparse_sinks(causal):
    # Document 0 left-padded (its keys from 37), document 1 right-padded (up to 650); a
    # window of 300 keys: key blocks outside it are skipped; sinks after each prefix.
    q, k, v = layer(q_len=700, k_len=700)
    lo, hi, window = [37, 0], [700, 650], 300
    sinks = torch.tensor([[37, 400, -1], [0, 1, 512]])
    got = _cpp.content_pass(q, k, v, shape(2, lo, hi, causal, window), sinks, 0.3)
    visible = visible_of(2, 700, 700, lo, hi, causal, window, sinks=[[37, 400], [0, 1, 512]])
    check(got, attention64(q, k, v, visible, 0.3))
    assert torch.isinf(got[1][0, :, :38]).all() if causal else True  # padding queries


def test_what_the_pass_refuses():
    q, k, v = layer(q_len=8, k_len=8)
    sinks, s = torch.zeros(2, 1, dtype=torch.int64), shape(2, [0, 0], [8, 8])
    with pytest.raises(AttncodaError, match=r"^kernel='cpp' takes float32, bfloat16 or float16 t"):
        _cpp.content_pass(q, k.double(), v, s, sinks, 1.0)
    with pytest.raises(AttncodaError, match=r"^6 query heads do not share 4 key/value heads"):
        _cpp.content_pass(q, torch.cat([k, k], 1), torch.cat([v, v], 1), s, sinks, 1.0)


def _refused(message, *args, **kwargs):
    """The pass's refusal of ``args``: exactly ``message``."""
    with pytest.raises(AttncodaError) as refused:
        _cpp.content_pass(*args, **kwargs)
    assert str(refused.value) == message


def test_every_tensor_the_pass_reads_is_checked_first():
    q, k, v = layer(b=2, h=4, kv=2, q_len=8, k_len=10, d=16)
    runs, sinks = shape(2, [0, 3], [10, 10]), torch.tensor([[0, -1], [3, -1]])
    _cpp.content_pass(q, k, v, runs, sinks, 0.25)  # as it should be: no refusal
    _refused(
        "kernel='cpp' takes query as a 4-d tensor (batch, head, position, head_dim); got "
        "(2, 4, 8): pass the layer's query as the attention function receives it",
        q[:, :, :, 0], k, v, runs, sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' runs on the cpu; got key on meta: use kernel='auto', or move the layer "
        "to the cpu",
        q, k.to("meta"), v, runs, sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes non-empty tensors; got query of shape (2, 4, 8, 0): leave empty "
        "layers out",
        q[..., :0], k[..., :0], v[..., :0], runs, sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes keys and values of shape (batch, kv_head, key_pos, head_dim) with "
        "the query's batch and head_dim; got query (2, 4, 8, 16), key (2, 2, 10, 16) and "
        "value (2, 2, 9, 16): pass the layer's own, unexpanded",
        q, k, v[:, :, :9], runs, sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' aligns the queries with the last keys; got 8 queries and 6 keys: pass "
        "every key the queries see (a cache's keys included)",
        q, k[:, :, :6], v[:, :, :6], shape(2, [0, 3], [6, 6]), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes MaskShape.lo of shape (2,); got (3,): give one row per document "
        "of the batch",
        q, k, v, shape(3, [0, 3, 0], [10, 10]), sinks, 0.25,
    )  # fmt: skip
    floats = MaskShape(torch.tensor([0.0, 3.0]), torch.tensor([10, 10]), True, None)
    _refused(
        "kernel='cpp' takes MaskShape.lo as integers on the cpu; got torch.float32 on cpu: "
        "build it from the layer's mask on the cpu",
        q, k, v, floats, sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes MaskShape.hi in [0, 10]; got 11: give key positions of the "
        "layer's keys",
        q, k, v, shape(2, [0, 3], [10, 11]), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes MaskShape.lo in [0, 10]; got -1: give key positions of the "
        "layer's keys",
        q, k, v, shape(2, [0, -1], [10, 10]), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes runs of keys with lo <= hi; document 1 has lo 7 and hi 5: give "
        "each document's first real key and one past its last",
        q, k, v, shape(2, [0, 7], [10, 5]), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes a sliding window of at least one key; got 0: pass None for no "
        "window",
        q, k, v, shape(2, [0, 3], [10, 10], window=0), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes a sliding window of a whole number of keys; got 4.0: pass an "
        "int, or None for no window",
        q, k, v, shape(2, [0, 3], [10, 10], window=4.0), sinks, 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes sinks of shape (2, any); got (2,): give one row per document of "
        "the batch",
        q, k, v, runs, sinks[:, 0], 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes sinks in [-1, 9]; got 10: give key positions of the layer's keys",
        q, k, v, runs, torch.tensor([[0, 10], [3, -1]]), 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes sinks in [-1, 9]; got -2: give key positions of the layer's keys",
        q, k, v, runs, torch.tensor([[0, -2], [3, -1]]), 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes each document's sink keys once; got [[0, 0], [3, -1]]: list each "
        "sink key once, -1 for an unused column",
        q, k, v, runs, torch.tensor([[0, 0], [3, -1]]), 0.25,
    )  # fmt: skip
    _refused(
        "kernel='cpp' takes a finite score scale; got nan: pass the layer's scaling",
        q, k, v, runs, sinks, math.nan,
    )  # fmt: skip
    sink = torch.zeros(2, 9, dtype=torch.bool)
    with pytest.raises(AttncodaError) as refused:
        _cpp.cpp_attention(q, k, v, scaling=0.25, sink=sink, shape=runs)
    assert str(refused.value) == (
        "kernel='cpp' takes sink as bool of shape (2, 10); got (torch.bool, (2, 9)): mark "
        "each document's sink keys, one row per document"
    )


def test_the_cpp_checks_what_it_reads_again():
    # Called directly, past the Python checks, the C++ refuses what it would misread.
    library = _cpp._loaded()
    q, k, v = (t.contiguous() for t in layer(b=2, h=4, kv=2, q_len=8, k_len=10, d=16))
    lo, hi = torch.tensor([0, 3]), torch.tensor([10, 10])
    sinks = torch.tensor([[0], [3]])
    good = (q, k, v, lo, hi, sinks, True, 0, 0.25, 128, 512)
    library.content_pass(*good)

    def refused(message, **changed):
        names = ("q", "k", "v", "lo", "hi", "sinks", "causal", "window", "scale", "qb", "kb")
        args = [changed.get(name, arg) for name, arg in zip(names, good, strict=True)]
        for call in (library.content_pass, library.attention):
            with pytest.raises(RuntimeError, match=message):
                call(*args)

    refused("takes runs with 0 <= lo <= hi <= key_pos", hi=torch.tensor([10, 11]))
    refused("takes runs with 0 <= lo <= hi <= key_pos", lo=torch.tensor([-5, 0]))
    refused(
        "takes runs with 0 <= lo <= hi <= key_pos",
        lo=torch.tensor([0, 9]),
        hi=torch.tensor([10, 5]),
    )
    refused("takes contiguous int64 runs and sinks", hi=hi.int())
    refused(r"takes runs \(batch,\) and sinks \(batch, width\)", lo=torch.tensor([0]))
    refused(r"takes runs \(batch,\) and sinks \(batch, width\)", sinks=sinks[:1])
    refused(r"takes sinks in \[-1, key_pos\)", sinks=torch.tensor([[0], [10]]))
    refused("takes keys and values of one shape", v=v[:, :, :9].contiguous())
    refused("takes no more queries than keys", k=k[:, :, :6].contiguous(), v=v[:, :, :6])
    refused("takes float32 queries, keys and values", q=q.double())
    refused("takes 4-d queries, keys and values", q=q[0])
    refused(r"takes a window of 0 \(none\) or more keys", window=-3)
    refused("takes blocks of one row or more", kb=0)


def test_a_missing_compiler_leaves_auto_the_sdpa_kernel(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler")
    _cpp._library.cache_clear()
    try:
        why = "it is compiled on first use and no C++ compiler was found (set CXX to one)"
        assert cpp.prerequisites() == why
        assert registry.resolve_kernel("auto", "cpu") == "sdpa"
        with pytest.raises(AttncodaError) as refused:
            registry.resolve_kernel("cpp", "cpu")
        assert str(refused.value) == f"kernel='cpp' cannot run here: {why}; use kernel='sdpa'"
        q, k, v = layer(q_len=8, k_len=8)
        with pytest.raises(AttncodaError, match="^kernel='cpp' cannot run here: it is compiled"):
            _cpp.content_pass(q, k, v, shape(2, [0, 0], [8, 8]), torch.zeros(2, 1).long(), 1.0)
    finally:
        _cpp._library.cache_clear()
        _cpp._say.cache_clear()


def test_a_failed_build_is_said_once_and_sdpa_serves(tmp_path, monkeypatch, capsys):
    from attncoda.capture import capture
    from tiny_models import tiny

    # An extension of its own name and folder, so that the kernel's own build is untouched.
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    monkeypatch.setattr(_cpp, "NAME", "attncoda_cpp_broken")
    width = cpp.vector_width()
    monkeypatch.setitem(_cpp.FLAGS, width, (*_cpp.FLAGS[width], "--no-such-flag"))
    _cpp._library.cache_clear()
    try:
        model = tiny("llama")
        ids = torch.randint(3, 60, (1, 12), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            got = capture(model, ids, record_rows="none", method="fast", kernel="cpp")
        assert got.kernel == "sdpa"
        err = capsys.readouterr().err
        assert err.count("note: the cpp kernel cannot run here: ") == 1, err
        assert "it did not build (" in err and "the sdpa kernel serves" in err
    finally:
        _cpp._library.cache_clear()
        _cpp._say.cache_clear()


def test_the_cpp_kernel_is_declared_to_the_registry():
    kernel = registry.lookup("cpp")
    assert registry.resolve_kernel("auto", "cpu") == "cpp"
    assert registry.resolve_kernel("auto", "cuda") != "cpp"
    with pytest.raises(AttncodaError, match=r"^kernel='cpp' runs on the cpu; got device 'cuda'"):
        registry.resolve_kernel("cpp", "cuda")
    assert registry.declines(kernel, "cpu", "torch.float64", {}) == "torch.float64 inputs"
    assert registry.declines(kernel, "cpu", "torch.bfloat16", {"sliding_window": 4}) is None
    assert registry.declines(kernel, "cpu", "float32", {"softcap": 30.0}) == "softcap layers"
