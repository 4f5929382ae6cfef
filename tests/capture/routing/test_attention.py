"""The routed attention function: eager exactness per family, blocks, GQA, row statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import forward  # noqa: E402
from attncoda.capture.routing import _exact, _register, attncoda_attention, routed  # noqa: E402  # noqa: E402
from attncoda.capture.stats import PassPlan, Recorder, row_statistics  # noqa: E402
from tiny_models import ROUTES_FROM, VOCAB, routes_here  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402


def tiny(family: str, dtype=torch.float32, **extra):
    return _tiny(family, dtype, **extra)


def batch(length: int, padding: str, docs: int = 3, seed: int = 1):
    """Random ids ``(docs, length)`` with the later documents padded on one side."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (docs, length), generator=generator)
    mask = torch.ones_like(ids)
    for doc in range(1, docs):
        cut = 2 * doc + 1
        if padding == "left":
            mask[doc, :cut] = 0
        elif padding == "right":
            mask[doc, -cut:] = 0
    return ids, mask


def output_of(out):
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def recorder_for(mask, block_size=512):
    real = mask.bool()
    sink = torch.zeros_like(real)
    offsets = real.long().argmax(-1)
    sink[torch.arange(len(mask)), offsets] = True
    record = [torch.zeros(0, dtype=torch.long) for _ in range(len(mask))]
    return Recorder(PassPlan(real, offsets, sink, record, block_size))


FAMILIES = ["gpt2", "gpt2-upcast", "gpt_neox", "opt", "llama", "qwen2", "mistral", "bert"]


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("family", FAMILIES)
def test_routed_is_bit_identical_to_eager(family, padding):
    model = tiny(family)
    ids, mask = batch(24, padding)
    model.set_attn_implementation("eager")
    eager = output_of(forward(model, ids, mask))
    rec = recorder_for(mask)
    with routed(model, rec):
        assert model.config._attn_implementation.startswith("attncoda")
        ours = output_of(forward(model, ids, mask))
    assert model.config._attn_implementation == "eager"
    assert len(rec.stats) == 2
    assert torch.equal(ours, eager), float((ours - eager).abs().max())


def test_two_models_routed_at_once_each_fill_their_own_recorder():
    # No ambient state: each route binds the function to its own recorder, under a name of
    # its own, whichever model runs when; leaving the block frees the name.
    from transformers import AttentionInterface

    first, second = tiny("llama"), tiny("gpt2")
    ids, mask = batch(12, "right")
    first.set_attn_implementation("eager")
    eager = output_of(forward(first, ids, mask))
    one, two = recorder_for(mask), recorder_for(mask)
    with routed(first, one), routed(second, two):
        names = (first.config._attn_implementation, second.config._attn_implementation)
        forward(second, ids, mask)
        ours = output_of(forward(first, ids, mask))
    assert names[0] != names[1]
    assert (len(one.stats), len(two.stats)) == (2, 2)
    assert torch.equal(ours, eager)
    assert first.config._attn_implementation == "eager"
    assert all(AttentionInterface()[name] is _register.attncoda_attention for name in names)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_routed_is_bit_identical_in_half_precision(family, dtype):
    model = tiny(family, dtype)
    ids, mask = batch(16, "left")
    model.set_attn_implementation("eager")
    eager = output_of(forward(model, ids, mask))
    with routed(model):
        ours = output_of(forward(model, ids, mask))
    assert torch.equal(ours, eager)


def test_routed_restores_the_previous_implementation_after_an_error():
    model = tiny("llama")
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), routed(model):
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"


def test_long_sequence_in_blocks_matches_eager():
    model = tiny("llama")
    ids, mask = batch(1500, "none", docs=1)
    model.set_attn_implementation("eager")
    eager = output_of(forward(model, ids, mask))
    rec = recorder_for(mask, block_size=256)
    with routed(model, rec):
        ours = output_of(forward(model, ids, mask))
    # Closeness is the contract; on this machine's BLAS blocks of 256 are even bit-identical.
    assert float((ours - eager).abs().max()) <= 1e-6
    assert torch.isfinite(rec.stats[1]["entropy"]).all()


@pytest.mark.parametrize("family", ["gpt2", "llama", "bert"])
def test_odd_blocks_are_close_to_eager(family):
    model = tiny(family)
    ids, mask = batch(40, "right")
    model.set_attn_implementation("eager")
    eager = output_of(forward(model, ids, mask))
    with routed(model, recorder_for(mask, block_size=7)):
        ours = output_of(forward(model, ids, mask))
    assert float((ours - eager).abs().max()) <= 1e-6


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_keys_and_values_arrive_unexpanded(family, monkeypatch):
    seen = []
    original = _register.attncoda_attention

    def spy(module, query, key, value, *args, **kwargs):
        seen.append((query.shape[1], key.shape[1], value.shape[1]))
        return original(module, query, key, value, *args, **kwargs)

    monkeypatch.setattr(_register, "attncoda_attention", spy)
    model = tiny(family)
    ids, mask = batch(12, "none")
    with routed(model):
        forward(model, ids, mask)
    assert seen == [(4, 2, 2), (4, 2, 2)]


def test_training_mode_raises_in_the_attention_function():
    model = tiny("llama")
    model.train()
    ids, mask = batch(8, "none")
    with pytest.raises(AttncodaError) as info, routed(model):
        forward(model, ids, mask)
    assert str(info.value) == (
        "LlamaAttention is in training mode: attention capture runs in eval mode only "
        "(call model.eval())"
    )


def test_an_unknown_keyword_is_refused_by_name():
    module = torch.nn.Module().eval()
    q = torch.zeros(1, 2, 3, 4)
    with pytest.raises(AttncodaError) as info:
        attncoda_attention(module, q, q, q, None, alibi_slopes=0.5)
    assert str(info.value) == (
        "Module passes the attention keyword alibi_slopes=0.5, which the attncoda attention "
        "function does not implement: capture this model with mode='outputs' (eager "
        "output_attentions)"
    )


def test_softcap_is_applied_before_the_mask():
    module = torch.nn.Module().eval()
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 8) * 4, torch.randn(1, 2, 5, 8) * 4, torch.randn(1, 2, 5, 8)
    mask = torch.zeros(1, 1, 5, 5).masked_fill(torch.ones(5, 5).triu(1).bool(), -3.4e38)
    out, weights = attncoda_attention(module, q, k, v, mask, scaling=0.5, softcap=2.0)
    # Hand-written Gemma 2 soft-capping: tanh(z / c) * c, then the mask, then the softmax.
    capped = torch.tanh(q @ k.transpose(-1, -2) * 0.5 / 2.0) * 2.0
    probs = torch.softmax(capped + mask, -1)
    assert float(capped.abs().max()) <= 2.0
    assert torch.allclose(weights, probs, atol=1e-7)
    assert torch.allclose(out, (probs @ v).transpose(1, 2), atol=1e-6)


def test_function_without_recorder_returns_eager_weights():
    module = torch.nn.Module().eval()
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    out, weights = attncoda_attention(module, q, k, v, None, scaling=0.5)
    expanded_k, expanded_v = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    probs = torch.softmax(q @ expanded_k.transpose(-1, -2) * 0.5, -1)
    assert out.shape == (1, 5, 4, 8)
    assert torch.allclose(weights, probs, atol=1e-7)
    assert torch.allclose(out, (probs @ expanded_v).transpose(1, 2), atol=1e-6)


@pytest.mark.parametrize("family", ["bloom", *(f for f in ROUTES_FROM if not routes_here(f))])
def test_unroutable_models_are_named(family):
    model = tiny(family)
    name = type(model).__name__
    with pytest.raises(AttncodaError) as info, routed(model):
        pass
    assert str(info.value) == (
        f"{name} does not route its attention through transformers' AttentionInterface, so "
        f"capture cannot read its scores: use mode='outputs' (eager output_attentions with an "
        f"explicit zero policy)"
    )


# ----------------------------------------------------------------------- row statistics


def stats_of(probs, sink, visible=None):
    logp = torch.log(torch.tensor(probs, dtype=torch.float64))
    logp = logp.reshape(1, 1, 1, -1)
    if visible is None:
        visible = torch.isfinite(logp)
    else:
        visible = torch.tensor(visible).reshape(1, 1, 1, -1)
    sink_mask = torch.zeros(1, logp.shape[-1], dtype=torch.bool)
    sink_mask[0, list(sink)] = True
    # As an additive mask leaves them: finite entries off the visible keys.
    out = row_statistics(logp.masked_fill(~visible, -1e30), visible, sink_mask)
    return {name: value.reshape(()).item() for name, value in out.items()}


def test_row_statistics_by_hand():
    p = [0.5, 0.25, 0.125, 0.125]
    got = stats_of(p, [0])
    q = np.array([0.5, 0.25, 0.25])
    assert got["n_keys"] == 4 and got["n_sink"] == 1
    assert got["sink_mass"] == pytest.approx(0.5, abs=1e-15)
    assert got["entropy"] == pytest.approx(1.75 * math.log(2), abs=1e-14)
    assert got["content_entropy"] == pytest.approx(-(q * np.log(q)).sum(), abs=1e-14)
    assert got["within_sink_entropy"] == 0.0
    balance = math.sqrt(3 / 4) * (math.log(0.5) - np.log(p[1:]).mean())
    assert got["sink_balance"] == pytest.approx(balance, abs=1e-14)


def test_row_statistics_two_sinks_and_identity():
    p = [0.4, 0.2, 0.1, 0.3]
    got = stats_of(p, [0, 1])
    s = 0.6
    within = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    content = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert got["within_sink_entropy"] == pytest.approx(within, abs=1e-14)
    assert got["content_entropy"] == pytest.approx(content, abs=1e-14)
    binary = -(s * math.log(s) + (1 - s) * math.log(1 - s))
    assert got["entropy"] == pytest.approx(binary + s * within + (1 - s) * content, abs=1e-14)
    balance = math.sqrt(2 * 2 / 4) * (np.log(p[:2]).mean() - np.log(p[2:]).mean())
    assert got["sink_balance"] == pytest.approx(balance, abs=1e-14)


def test_row_without_content_or_sink_is_zero_not_nan():
    no_content = stats_of([0.7, 0.3, 0.0], [0, 1], visible=[True, True, False])
    assert no_content["n_keys"] == 2 and no_content["n_sink"] == 2
    assert no_content["content_entropy"] == 0.0 and no_content["sink_balance"] == 0.0
    assert no_content["sink_mass"] == pytest.approx(1.0, abs=1e-15)
    no_sink = stats_of([0.0, 0.5, 0.5], [0], visible=[False, True, True])
    assert no_sink["n_sink"] == 0
    assert no_sink["sink_mass"] == 0.0 and no_sink["within_sink_entropy"] == 0.0
    assert no_sink["sink_balance"] == 0.0
    assert no_sink["content_entropy"] == pytest.approx(math.log(2), abs=1e-15)
    empty = row_statistics(
        torch.zeros(1, 1, 1, 3),
        torch.zeros(1, 1, 1, 3, dtype=torch.bool),
        torch.tensor([[True, False, False]]),
    )
    assert all(not torch.isnan(v).any() for v in empty.values())


def test_content_entropy_survives_float64_underflow():
    # Content logs near -800 underflow exp() in float64; log(1-s) must stay in log space.
    logp = torch.tensor([0.0, -800.0, -800.0 - math.log(3.0)], dtype=torch.float64)
    row = logp.reshape(1, 1, 1, 3)
    visible = torch.ones(1, 1, 1, 3, dtype=torch.bool)
    sink = torch.tensor([[True, False, False]])
    out = row_statistics(row, visible, sink)
    q = np.array([0.75, 0.25])
    assert out["content_entropy"].item() == pytest.approx(-(q * np.log(q)).sum(), abs=1e-12)
    assert out["sink_mass"].item() == 1.0


@pytest.mark.parametrize(
    ("family", "padding", "widths"),
    [
        ("llama", "none", [16, 32, 40]),  # causal: a block sees no key after its last query
        ("llama", "left", [40, 32, 40]),  # the first block holds queries that see no key
        ("gpt2", "right", [16, 32, 40]),
        ("bert", "none", [40, 40, 40]),  # bidirectional: every block sees every key
    ],
)
def test_blocks_skip_the_keys_the_mask_hides_and_stay_close_to_eager(
    family, padding, widths, monkeypatch
):
    seen = []
    original = _exact._scores

    def spy(module, query, key, *args):
        seen.append(key.shape[2])
        return original(module, query, key, *args)

    model = tiny(family)
    ids, mask = batch(40, padding)
    model.set_attn_implementation("eager")
    eager = output_of(forward(model, ids, mask))
    monkeypatch.setattr(_exact, "_scores", spy)
    with routed(model, recorder_for(mask, block_size=16)):
        ours = output_of(forward(model, ids, mask))
    assert seen == widths * 2  # two layers
    # The skipped keys have probability exactly 0; what changes is float32 rounding of sums
    # over shorter rows, as for any block size (test_odd_blocks_are_close_to_eager).
    assert float((ours - eager).abs().max()) <= 1e-6


def test_last_visible_key():
    causal = torch.ones(10, 10, dtype=torch.bool).tril()[None, None].expand(2, 1, 10, 10)
    additive = torch.zeros(2, 1, 10, 10).masked_fill(~causal, torch.finfo(torch.float32).min)
    for mask in (causal, additive):
        assert _exact.last_visible_key(mask, 0, 4, 10) == 4
        assert _exact.last_visible_key(mask, 4, 10, 10) == 10
    window = causal & ~torch.ones(10, 10, dtype=torch.bool).tril(-3)  # a sliding window
    assert _exact.last_visible_key(window, 2, 5, 10) == 5
    assert _exact.last_visible_key(None, 0, 4, 10) == 10
    assert _exact.last_visible_key(torch.zeros_like(causal), 0, 4, 10) == 10
    padded = causal.clone()
    padded[1, :, :2] = False  # two queries of document 1 see nothing: keep every key
    assert _exact.last_visible_key(padded, 0, 4, 10) == 10
    assert _exact.last_visible_key(padded, 2, 4, 10) == 4
