"""The ``cpp`` kernel (capture/kernels/cpp.py, _cpp.py, _cpp.cpp): its one pass over
``[V | K]`` against float64 attention, its build from an empty cache, its refusals, and a
real capture through it. The statistics it feeds are checked against their float64
definitions in test_fast.py and against the derived bounds in test_fast_bounds.py, with the
``sdpa`` kernel beside it."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.kernels import _cpp, cpp, registry  # noqa: E402

pytestmark = pytest.mark.skipif(
    cpp.prerequisites() is not None, reason=f"the cpp kernel: {cpp.prerequisites()}"
)


def attention64(query, key, value, visible, scale):
    """``E_p[v]``, ``E_p[k]`` and the log-sum-exp of float64 rows (``visible``: bool,
    broadcast to ``(b, h, q, k)``); rows that see nothing get zeros and ``-inf``."""
    group = query.shape[1] // key.shape[1]
    k = key.double().repeat_interleave(group, 1)
    v = value.double().repeat_interleave(group, 1)
    z = (query.double() @ k.transpose(-1, -2)) * scale
    z = z.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(z, -1)
    p = torch.exp(z - lse[..., None]).nan_to_num(0.0)
    return p @ v, p @ k, lse


def check(got, want, scale_of_values):
    # float32 sums of a few hundred terms of size ~|v|: well within 1e-5 relative.
    for g, w in zip(got[:2], want[:2], strict=True):
        np.testing.assert_allclose(g.double().numpy(), w.numpy(), atol=2e-5 * scale_of_values)
    np.testing.assert_allclose(got[2].double().numpy(), want[2].numpy(), atol=2e-5, rtol=1e-6)


def layer(b=2, h=6, kv=2, q_len=700, k_len=700, d=24, dv=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, q_len, h, d, generator=g).transpose(1, 2)  # as a model hands it over
    k = torch.randn(b, kv, k_len, d, generator=g)
    v = torch.randn(b, kv, k_len, dv, generator=g)
    # Later keys score higher, so a row's running maximum moves up block after block and
    # the partial sums are rescaled (the keys span two key blocks of 512).
    k = k * torch.linspace(0.5, 2.0, k_len)[None, None, :, None]
    return q, k, v


def test_one_pass_equals_float64_attention_on_causal_grouped_rows():
    q, k, v = layer()
    assert q.stride(-1) == 1 and not q.is_contiguous()  # a strided query is read in place
    got = _cpp.content_pass(q, k, v, None, True, 0.3)
    n = q.shape[2]
    visible = torch.ones(n, n, dtype=torch.bool).tril()
    check(got, attention64(q, k, v, visible, 0.3), 1.0)


def test_more_keys_than_queries_align_the_queries_with_the_last_keys():
    q, k, v = layer(q_len=130, k_len=600)
    got = _cpp.content_pass(q, k, v, None, True, 0.3)
    visible = torch.arange(600)[None, :] <= torch.arange(130)[:, None] + 470
    check(got, attention64(q, k, v, visible, 0.3), 1.0)


def test_an_additive_mask_with_rows_that_see_nothing():
    q, k, v = layer(q_len=90, k_len=600)
    g = torch.Generator().manual_seed(1)
    visible = torch.rand(2, 1, 90, 600, generator=g) > 0.5
    visible[0, 0, 5] = False  # a row without a key: zeros and -inf
    visible[1, 0, 7] = False
    visible[1, 0, 7, 599] = True  # a row with one key, in the second key block
    mask = torch.zeros(visible.shape).masked_fill(~visible, -math.inf)
    got = _cpp.content_pass(q, k, v, mask, False, 0.3)
    want = attention64(q, k, v, visible, 0.3)
    check(got, want, 1.0)
    assert torch.equal(got[2][0, :, 5], torch.full((6,), -math.inf))
    assert torch.equal(got[0][0, :, 5], torch.zeros(6, 16))
    np.testing.assert_allclose(got[0][1, :, 7].numpy(), v[1, :, 599].repeat_interleave(3, 0))


def test_what_the_pass_refuses():
    q, k, v = layer(q_len=8, k_len=8)
    with pytest.raises(AttncodaError, match=r"^kernel='cpp' takes float32 tensors; got key in "):
        _cpp.content_pass(q, k.double(), v, None, True, 1.0)
    with pytest.raises(AttncodaError, match=r"^6 query heads do not share 4 key/value heads"):
        _cpp.content_pass(q, torch.cat([k, k], 1), torch.cat([v, v], 1), None, True, 1.0)


def test_a_build_in_an_empty_cache_and_a_missing_compiler(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ATTNCODA_CACHE", str(tmp_path))
    _cpp._library.cache_clear()
    try:
        assert _cpp.unavailable() is None
        built = list((tmp_path / "kernels").iterdir())
        assert [p.suffix for p in built] == [".so"]  # no partial file left behind
        q, k, v = layer(q_len=40, k_len=40)
        n = 40
        check(
            _cpp.content_pass(q, k, v, None, True, 0.3),
            attention64(q, k, v, torch.ones(n, n, dtype=torch.bool).tril(), 0.3),
            1.0,
        )
        monkeypatch.setenv("CXX", "no-such-compiler")
        _cpp._library.cache_clear()
        why = "it is compiled on first use and no C++ compiler was found (set CXX to one)"
        assert cpp.prerequisites() == why
        assert registry.resolve_kernel("auto", "cpu") == "sdpa"
        with pytest.raises(AttncodaError) as refused:
            registry.resolve_kernel("cpp", "cpu")
        assert str(refused.value) == f"kernel='cpp' cannot run here: {why}; use kernel='sdpa'"
        with pytest.raises(AttncodaError, match="^kernel='cpp' cannot run here: it is compiled"):
            _cpp.content_pass(q, k, v, None, True, 0.3)
    finally:
        _cpp._library.cache_clear()
        _cpp._say.cache_clear()


def test_a_failed_build_is_said_once_and_sdpa_serves(tmp_path, monkeypatch, capsys):
    from attncoda.capture import capture
    from tiny_models import tiny

    monkeypatch.setenv("ATTNCODA_CACHE", str(tmp_path))
    monkeypatch.setattr(_cpp, "FLAGS", (*_cpp.FLAGS, "--no-such-flag"))
    _cpp._library.cache_clear()
    try:
        model = tiny("llama")
        ids = torch.randint(3, 60, (1, 12), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            got = capture(model, ids, record_rows="none", method="fast", kernel="cpp")
        assert got.kernel == "sdpa"
        err = capsys.readouterr().err
        assert err.count("note: the cpp kernel cannot run here: ") == 1, err
        assert "did not compile it" in err and "the sdpa kernel serves" in err
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
