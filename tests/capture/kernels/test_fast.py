"""The fast path: statistics from the fused kernel's log-sum-exp against a float64
definition, its bound as the sink mass goes to 1, and capture(method="fast") against the
exact path on tiny models of several families."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import METHODS, capture, capture_windows  # noqa: E402
from attncoda.capture.kernels import (  # noqa: E402
    FAST_STATISTICS,
    read_mask,
    sdpa_attention,
    visible_keys,
)
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


def definition(query, key, value, scaling, sink, visible):
    """Every statistic by its definition (docs/design.md, "The mathematics") from float64
    probability rows."""
    h, kv = query.shape[1], key.shape[1]
    k = key.double().repeat_interleave(h // kv, 1)
    v = value.double().repeat_interleave(h // kv, 1)
    z = torch.matmul(query.double(), k.transpose(-1, -2)) * scaling
    logp = torch.log_softmax(z.masked_fill(~visible, -math.inf), -1)
    p = logp.exp()
    in_s = visible & sink[:, None, None, :]
    in_c = visible & ~sink[:, None, None, :]
    s = (p * in_s).sum(-1)
    plogp = torch.where(visible, p * logp, 0.0)
    # log(1 - s) as the log-sum-exp of the content logs: 1 - s itself would lose every
    # digit once s is within float64 rounding of 1.
    log_c = torch.where(in_c, logp, -math.inf).logsumexp(-1, keepdim=True)
    log_q = torch.where(in_c, logp - log_c, 0.0)
    q = torch.where(in_c, log_q.exp(), 0.0)
    log_ps = torch.where(in_s, logp - torch.log(s).unsqueeze(-1), 0.0)
    n_s, n = in_s.sum(-1), visible.sum(-1)
    m = n - n_s
    mean_s = torch.where(in_s, logp, 0.0).sum(-1) / n_s.clamp(min=1)
    mean_c = torch.where(in_c, logp, 0.0).sum(-1) / m.clamp(min=1)
    stats = {
        "n_keys": n.expand_as(s),
        "n_sink": n_s.expand_as(s),
        "sink_mass": s,
        "entropy": -plogp.sum(-1),
        "content_entropy": torch.where(m > 0, -(q * log_q).sum(-1), 0.0),
        "within_sink_entropy": torch.where(
            n_s > 1, -(torch.where(in_s, log_ps.exp(), 0.0) * log_ps).sum(-1), 0.0
        ),
        "sink_balance": torch.where(
            (m > 0) & (n_s > 0), torch.sqrt(n_s * m / n) * (mean_s - mean_c), 0.0
        ),
    }
    return torch.matmul(p, v), stats


def inputs(b=2, h=4, kv=2, length=40, d=16, sink_logit=3.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, d, generator=generator)
    k = torch.randn(b, kv, length, d, generator=generator)
    v = torch.randn(b, kv, length, d, generator=generator)
    # Key 0 aligned with every query of its group: a sink of tunable strength.
    k[:, :, 0] = sink_logit * q.reshape(b, kv, h // kv, length, d).mean((2, 3)) / d**0.5
    return q, k, v


def sink_at(b, length, positions):
    sink = torch.zeros(b, length, dtype=torch.bool)
    sink[:, list(positions)] = True
    return sink


@pytest.fixture(params=["sdpa", "cpp"])
def content(request):
    """Each CPU kernel's fast path: ``attend(q, k, v, scaling=, sink=, visible=, causal=,
    block_size=)`` -> ``(output, stats)``, the ``sdpa`` kernel's two calls
    (:func:`sdpa_attention`) or the ``cpp`` kernel's one pass (:func:`cpp_attention`, on the
    mask's :class:`MaskShape`)."""
    if request.param == "sdpa":
        return sdpa_attention
    from attncoda.capture.kernels import cpp, cpp_attention, mask_shape

    why = cpp.prerequisites()
    if why is not None:
        pytest.skip(f"the cpp kernel: {why}")

    def attend(q, k, v, *, scaling, sink, visible=None, causal=False, block_size=512):
        b, n = q.shape[0], q.shape[2]
        window = None
        if visible is not None and causal is False and bool(visible.any()):
            reach = (torch.arange(n)[:, None] - torch.arange(n)[None, :])[visible[0, 0]]
            window = int(reach.max()) + 1
        shape = mask_shape(visible, causal, b, n, n, window, q.device)
        if shape is None:
            pytest.skip("the cpp kernel takes masks with a shape (the sdpa kernel serves)")
        return cpp_attention(q, k, v, scaling=scaling, sink=sink, shape=shape)

    return attend


CAUSAL = lambda b, n: torch.ones(n, n, dtype=torch.bool).tril()[None, None].expand(b, 1, n, n)  # noqa: E731


@pytest.mark.parametrize(
    ("name", "sinks", "causal", "explicit"),
    [
        ("first key, causal", (0,), True, False),  # the kernel's own causal masking
        ("two-key prefix, causal", (0, 1), True, False),
        ("keys 0 and 5, causal", (0, 5), True, False),  # explicit content mask
        ("causal mask given", (0,), True, True),
        ("bidirectional", (3,), False, False),
    ],
)
def test_fast_statistics_equal_the_float64_definition(name, sinks, causal, explicit, content):
    q, k, v = inputs()
    b, length = q.shape[0], q.shape[2]
    sink = sink_at(b, length, sinks)
    visible = CAUSAL(b, length) if causal else torch.ones(b, 1, length, length, dtype=torch.bool)
    out, stats = content(
        q,
        k,
        v,
        scaling=0.25,
        sink=sink,
        visible=visible if explicit else None,
        causal=causal and not explicit,
        block_size=16,
    )
    ref_out, ref = definition(q, k, v, 0.25, sink, visible)
    assert set(stats) == set(FAST_STATISTICS)
    for key in ("n_keys", "n_sink"):
        assert torch.equal(stats[key], ref[key]), key
    # float32 kernel sums of scores of a few units: 1e-5 is ~100 float32 ulps of them.
    for key in FLOATS:
        np.testing.assert_allclose(stats[key].numpy(), ref[key].numpy(), atol=1e-5, err_msg=key)
    np.testing.assert_allclose(out.numpy(), ref_out.float().numpy(), atol=1e-5)


def test_fast_statistics_under_an_arbitrary_mask_with_rows_without_content_or_sink(content):
    q, k, v = inputs(length=24)
    b, length = q.shape[0], q.shape[2]
    generator = torch.Generator().manual_seed(3)
    visible = (torch.rand(b, 1, length, length, generator=generator) > 0.4) & CAUSAL(b, length)
    visible[:, :, torch.arange(length), torch.arange(length)] = True
    visible[0, 0, 7] = False
    visible[0, 0, 7, 0] = True  # sink only: m = 0
    visible[1, 0, 9, 0] = False  # no visible sink: k = 0
    sink = sink_at(b, length, (0,))
    out, stats = content(q, k, v, scaling=0.25, sink=sink, visible=visible, block_size=5)
    ref_out, ref = definition(q, k, v, 0.25, sink, visible)
    for key in FLOATS:
        got = stats[key].numpy()
        assert np.isfinite(got).all(), key
        np.testing.assert_allclose(got, ref[key].numpy(), atol=1e-5, err_msg=key)
    assert stats["n_keys"][0, 0, 7] - stats["n_sink"][0, 0, 7] == 0
    assert float(stats["sink_mass"][0, 0, 7]) == pytest.approx(1.0, abs=1e-12)
    assert stats["n_sink"][1, 0, 9] == 0 and float(stats["sink_mass"][1, 0, 9]) == 0.0
    np.testing.assert_allclose(out.numpy(), ref_out.float().numpy(), atol=1e-5)


def test_fast_statistics_under_a_sliding_window(content):
    # Blocks send only the keys their queries see as content (the window) to the kernel.
    q, k, v = inputs(length=48)
    b, length = q.shape[0], q.shape[2]
    window = CAUSAL(b, length) & ~torch.ones(length, length, dtype=torch.bool).tril(-7)
    sink = sink_at(b, length, (0,))
    out, stats = content(q, k, v, scaling=0.25, sink=sink, visible=window, block_size=8)
    ref_out, ref = definition(q, k, v, 0.25, sink, window)
    for key in FLOATS:
        np.testing.assert_allclose(stats[key].numpy(), ref[key].numpy(), atol=1e-5, err_msg=key)
    np.testing.assert_allclose(out.numpy(), ref_out.float().numpy(), atol=1e-5)


def test_masks_are_read_in_chunks():
    n = 10
    causal = torch.ones(n, n, dtype=torch.bool).tril()[None, None].expand(2, 1, n, n)
    additive = torch.zeros(2, 1, n, n).masked_fill(~causal, torch.finfo(torch.float32).min)
    assert read_mask(additive, n, n, rows_per_chunk=3) == (None, True, True)
    padded = additive.clone()
    padded[1, :, :, :2] = torch.finfo(torch.float32).min  # left padding in document 1
    visible, causal_, ok = read_mask(padded, n, n, rows_per_chunk=3)
    assert not causal_ and ok
    assert torch.equal(visible, padded > torch.finfo(torch.float32).min / 2)
    biased = additive.clone()
    biased[0, 0, 5, 2] = 0.5  # a bias on a visible key: the fast statistics refuse it
    assert read_mask(biased, n, n, rows_per_chunk=4)[2] is False


@pytest.mark.parametrize("gap", [2.0, 8.0, 14.0, 20.0, 30.0])
def test_content_entropy_bound_does_not_grow_as_the_sink_mass_goes_to_one(gap, content):
    # The sink logit sits ``gap`` above the content logits, so 1 - s ~ n e^-gap reaches
    # 1e-11. H(q) is read from the content keys' own log-sum-exp, never divided by 1 - s,
    # so it stays within the same 1e-5 nats of the float64 definition for every s; a
    # quotient (H - h(s) - s H_S) / (1 - s) of float32 sums would be off by ~1e-7 / (1 - s).
    b, h, length, d = 1, 2, 64, 8
    generator = torch.Generator().manual_seed(4)
    q = torch.randn(b, h, length, d, generator=generator)
    k = torch.randn(b, h, length, d, generator=generator) * 0.3
    v = torch.randn(b, h, length, d, generator=generator)
    # A constant query coordinate that only key 0 reads: its score is exactly ``gap``.
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = gap
    sink = sink_at(b, length, (0,))
    _, stats = content(q, k, v, scaling=1.0, sink=sink, causal=True)
    _, ref = definition(q, k, v, 1.0, sink, CAUSAL(b, length))
    has = ref["n_keys"] > 1
    s = ref["sink_mass"][has]
    err = (stats["content_entropy"] - ref["content_entropy"]).abs()[has]
    assert float(err.max()) <= 1e-5, (float(s.min()), float(err.max()))
    if gap >= 20.0:
        assert float((1 - s).median()) < 1e-6  # the regime where a quotient would fail
    np.testing.assert_allclose(
        (1 - stats["sink_mass"][has]).numpy(), (1 - s).numpy(), rtol=1e-4, atol=1e-12
    )


def test_visible_keys():
    assert visible_keys(16, 40, causal=True) == 16
    assert visible_keys(48, 40, causal=True) == 40
    assert visible_keys(16, 40, causal=False) == 40


# --- capture(method="fast") against the exact path --------------------------------------


def docs(lengths, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=n) for n in lengths]


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2", "gpt_neox", "opt", "bert"])
@pytest.mark.parametrize("padding", ["right", "left"])
def test_fast_capture_equals_exact_capture(family, padding):
    model = _tiny(family, torch.float32, positions=512)
    windows = docs((40, 33, 9))
    kwargs = dict(batch_size=3, padding_side=padding, record_rows=6, block_size=16)
    exact = capture_windows(model, windows, method="exact", **kwargs)
    fast = capture_windows(model, windows, method="fast", **kwargs)
    assert (exact.method, fast.method) == ("exact", "fast")
    np.testing.assert_array_equal(fast.n_keys, exact.n_keys)
    np.testing.assert_array_equal(fast.has_content, exact.has_content)
    # Both paths round in float32 (scores of a few units): 1e-5 nats.
    for name in FLOATS:
        np.testing.assert_allclose(getattr(fast, name), getattr(exact, name), atol=1e-5)
    for a, b in zip(fast.rows, exact.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], atol=1e-5)


def test_fast_capture_outputs_and_auto_sinks():
    model = _tiny("llama", torch.float32, positions=512)
    ids = np.stack(docs((30, 30)))
    exact = capture(model, ids, sink="auto", keep_outputs=True, method="exact")
    fast = capture(model, ids, sink="auto", keep_outputs=True, method="fast")
    for a, b in zip(fast.sink_positions, exact.sink_positions, strict=True):
        np.testing.assert_array_equal(a, b)  # the auto pass is the exact path in both
    np.testing.assert_allclose(fast.outputs, exact.outputs, atol=1e-4)
    for name in FLOATS:
        np.testing.assert_allclose(getattr(fast, name), getattr(exact, name), atol=1e-5)


def test_fast_capture_errors():
    model = _tiny("llama", torch.float32, positions=512)
    ids = np.stack(docs((8,)))
    assert METHODS == ("auto", "exact", "fast")
    with pytest.raises(
        AttncodaError, match=r"unknown method 'quick': use one of auto, exact, fast$"
    ):
        capture(model, ids, method="quick")
    with pytest.raises(AttncodaError, match=r"method='fast' reads the routed attention"):
        capture(model, ids, method="fast", mode="outputs")


def test_the_default_method_takes_the_fast_path_wherever_a_kernel_serves():
    model = _tiny("llama", torch.float32, positions=512)
    ids = np.stack(docs((40, 40)))
    auto = capture(model, ids)
    fast = capture(model, ids, method="fast")
    exact = capture(model, ids, method="exact")
    assert (auto.method, auto.kernel, auto.forward) == ("fast", fast.kernel, fast.forward)
    assert auto.forward.startswith("fast:") and exact.forward == "eager"
    for name in FLOATS:  # the same pass as asked by name, bit for bit
        np.testing.assert_array_equal(getattr(auto, name), getattr(fast, name))
    # Read from eager outputs, the default takes the exact reading instead of refusing.
    outputs = capture(model, ids, mode="outputs")
    assert (outputs.method, outputs.mode, outputs.forward) == ("exact", "outputs", "eager")


def test_the_fast_method_hands_the_attention_function_boolean_masks(monkeypatch):
    from attncoda.capture.kernels import registry

    model = _tiny("gemma3")  # sliding-window and full layers: two mask kinds
    seen: list[torch.dtype | None] = []
    chosen = registry.lookup(registry.resolve_kernel("auto", "cpu"))  # cpp, else sdpa
    inner = chosen.prepare

    def spy(call, *, auto):
        seen.append(None if call.attention_mask is None else call.attention_mask.dtype)
        return inner(call, auto=auto)

    monkeypatch.setattr(chosen, "prepare", spy)
    before = model.config._attn_implementation
    capture_windows(model, [[5, 6, 7, 8, 9, 10], [11, 12, 13]], method="fast")
    assert len(seen) == model.config.num_hidden_layers and set(seen) == {torch.bool}
    assert model.config._attn_implementation == before  # restored after


@pytest.mark.parametrize("family", ["llama", "gemma3", "bert"])
def test_boolean_masks_give_eager_outputs_bit_for_bit(family):
    # The exact path masks a boolean mask with masked_fill(min) where eager adds a float
    # mask of 0 and min: every finite score plus min rounds to min, so the softmax inputs,
    # and everything after them, are the same bits (one query block per layer here).
    from attncoda.capture import routing as attention

    model = _tiny(family)
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    model.set_attn_implementation("eager")
    with torch.no_grad():
        eager = model(input_ids=ids, attention_mask=mask)
    attention.register()
    model.set_attn_implementation(attention.FAST_NAME)
    try:
        with torch.no_grad():
            routed = model(input_ids=ids, attention_mask=mask)
    finally:
        model.set_attn_implementation("eager")
    name = "logits" if hasattr(eager, "logits") else "last_hidden_state"
    assert torch.equal(getattr(routed, name)[:, 2:], getattr(eager, name)[:, 2:])


@pytest.mark.parametrize("window", [None, 3])
def test_the_boolean_mask_built_in_query_chunks_is_transformers_mask(monkeypatch, window):
    from transformers.masking_utils import (
        and_masks,
        causal_mask_function,
        sdpa_mask,
        sliding_window_overlay,
    )

    from attncoda.capture.kernels import _masks as masks

    function = causal_mask_function
    if window is not None:
        function = and_masks(sliding_window_overlay(window), causal_mask_function)
    padding = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1, 1, 1], [1] * 10])
    kwargs = {"mask_function": function, "attention_mask": padding, "kv_offset": 0}
    whole = sdpa_mask(2, 10, 10, 0, allow_is_causal_skip=False, **kwargs)
    monkeypatch.setattr(masks, "MASK_ROWS", 3)  # 10 queries: chunks of 3, 3, 3, 1
    chunked = masks.boolean_mask(
        batch_size=2, q_length=10, kv_length=10, q_offset=0, dtype=torch.float32, **kwargs
    )
    assert chunked.dtype == torch.bool and chunked.shape == (2, 1, 10, 10)
    assert torch.equal(chunked, whole.expand_as(chunked))
    # Plain causal rows (no padding, as many queries as keys) are skipped as transformers
    # skips them for SDPA: no mask, the layer's own is_causal; built where the caller
    # forbids the skip, or where a sliding window is shorter than the keys.
    assert masks.boolean_mask(batch_size=1, q_length=4, kv_length=4, q_offset=0) is None
    assert sdpa_mask(1, 4, 4, 0) is None  # transformers' own choice on the same arguments
    plain = masks.boolean_mask(
        batch_size=1, q_length=4, kv_length=4, q_offset=0, allow_is_causal_skip=False
    )
    assert plain is not None and torch.equal(plain[0, 0], torch.ones(4, 4).tril().bool())
    if window is not None:
        slid = masks.boolean_mask(1, 10, 10, 0, mask_function=function, local_size=window)
        assert slid is not None and torch.equal(slid, sdpa_mask(1, 10, 10, 0, **{
            "mask_function": function, "allow_is_causal_skip": False
        }))  # fmt: skip


@pytest.mark.parametrize("kernel", ["sdpa", "cpp"])
def test_recorded_rows_of_an_encoder_see_every_key(kernel):
    # An unpadded encoder batch has no mask at all (transformers skips it): the recorded
    # rows must follow the layer's own pattern, every key, not causal rows.
    from attncoda.capture.kernels import cpp

    if kernel == "cpp" and cpp.prerequisites() is not None:
        pytest.skip(f"the cpp kernel: {cpp.prerequisites()}")
    model = _tiny("bert", torch.float32, positions=64)
    ids = np.arange(3, 19)[None]
    exact = capture(model, ids, record_rows="all")
    fast = capture(model, ids, record_rows="all", method="fast", kernel=kernel)
    assert fast.kernel == kernel
    for a, b in zip(fast.rows, exact.rows, strict=True):
        assert np.isfinite(b).all()  # every key of every row, by the exact path
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a, b, atol=1e-5)
