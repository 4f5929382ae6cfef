"""The architecture matrix: every family capture routes, against transformers' own eager run.

For each family (tiny seeded models built from configs), for left and right padding and for
float32 and bfloat16 weights:

- the routed forward pass gives outputs bit-identical to eager: with one query block the
  attention function runs eager's own op sequence (``repeat_kv``, matmul, scale, soft-cap,
  mask, softmax, cast, matmul), so the equality holds by construction on any CPU;
- the sink mass and entropy capture reports equal those computed by hand, in float64, from
  eager ``output_attentions`` (within 1e-6 for float32 weights; for bfloat16 see
  ``BF16_TOL``);
- positions: the padded batch gives each document the outputs it has when run alone (for the
  families read through eager outputs, in float32 only).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import (  # noqa: E402
    capture,
    capture_windows,
    forward,  # noqa: E402
)
from attncoda.capture.routing import routable, routed  # noqa: E402
from tiny_models import ROUTES_FROM, VOCAB, routes_here  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

#: Families that route their attention through transformers' AttentionInterface.
ROUTED = (
    "gpt2",
    "gpt_neox",
    "opt",
    "llama",
    "qwen2",
    "qwen3",
    "mistral",
    "mixtral",
    "phi",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3",
    "gpt_oss",
    "olmo2",
    "starcoder2",
    "granite",
    "stablelm",
    "gptj",
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "electra",
    "distilbert",
)
#: Families capture reads through eager output_attentions (the automatic fallback), and
#: those that moved to the AttentionInterface in a later transformers (``ROUTES_FROM``), on
#: the side of the installed release.
FALLBACK = ("mpnet", "bloom", *(f for f in ROUTES_FROM if not routes_here(f)))
ROUTED = (*ROUTED, *(f for f in ROUTES_FROM if routes_here(f)))
#: bfloat16 keeps 8 significant bits (unit roundoff 2**-9 ~ 2e-3). Eager returns its
#: probabilities rounded to bfloat16, while capture takes a float32 log-softmax of float32
#: scores of the same queries and keys: a sink mass differs by at most one rounding (2e-3),
#: and an entropy by at most 2**-9 * sum p |1 + log p| <= 2e-3 * (1 + log n) ~ 1e-2 for these
#: short rows; eager's own bfloat16 scores (of order 0.1 in these random models) move each
#: score by about 2 * 2**-9 * 0.1 more, a few 1e-3 nats of entropy at most.
BF16_TOL = {"sink_mass": 4e-3, "entropy": 2e-2}
LENGTH = 12

_MODELS: dict[tuple[str, torch.dtype], object] = {}


def tiny(family: str, dtype=torch.float32):
    key = (family, dtype)
    if key not in _MODELS:
        _MODELS[key] = _tiny(family, dtype, positions=64)
    return _MODELS[key]


def documents(n_docs: int = 3, seed: int = 3) -> list[np.ndarray]:
    """Random ids of lengths 12, 9 and 6 (ids >= 3, so no pad or special id collides)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=LENGTH - 3 * d) for d in range(n_docs)]


def padded(docs, side: str, pad_id: int = 1):
    width = max(len(d) for d in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for index, doc in enumerate(docs):
        span = slice(width - len(doc), width) if side == "left" else slice(0, len(doc))
        ids[index, span] = torch.as_tensor(doc)
        mask[index, span] = 1
    return ids, mask


def output_of(out):
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


def eager_forward(model, ids, mask, **kwargs):
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        return forward(model, ids, mask, **kwargs)
    finally:
        model.set_attn_implementation(previous)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ROUTED)
def test_routed_outputs_are_eager_outputs(family, side, dtype):
    model = tiny(family, dtype)
    assert routable(model)
    ids, mask = padded(documents(), side)
    eager = output_of(eager_forward(model, ids, mask))
    with routed(model):
        ours = output_of(forward(model, ids, mask))
    # One query block: the same op sequence as eager by construction, so bit-identical.
    assert torch.equal(ours, eager), float((ours.float() - eager.float()).abs().max())


def reference_statistics(model, ids, mask, learned_sink: bool):
    """Sink mass (key: the first real token, or the learned sink) and entropy, float64,
    ``(batch, layer, head, query_pos)`` in real-token coordinates, by hand from eager
    ``output_attentions``. A learned sink's mass is what the token keys leave: 1 - sum p."""
    out = eager_forward(model, ids, mask, output_attentions=True)
    offsets = mask.argmax(-1)
    lengths = mask.sum(-1)
    width = int(lengths.max())
    layers = [a.detach().to(torch.float64).numpy() for a in out.attentions]
    shape = (len(ids), len(layers), layers[0].shape[1], width)
    sink_mass, entropy = np.zeros(shape), np.zeros(shape)
    real = mask.bool().numpy()
    for d in range(len(ids)):
        o, n = int(offsets[d]), int(lengths[d])
        for layer, probs in enumerate(layers):
            rows = probs[d][:, o : o + n][..., real[d]]  # (head, query, key): real keys only
            plogp = np.where(rows > 0, rows * np.log(np.where(rows > 0, rows, 1.0)), 0.0)
            h = -plogp.sum(-1)
            if learned_sink:
                rest = 1.0 - rows.sum(-1)
                h -= rest * np.log(rest)
                sink_mass[d, layer, :, :n] = rest
            else:
                sink_mass[d, layer, :, :n] = rows[..., 0]
            entropy[d, layer, :, :n] = h
    return sink_mass, entropy, lengths.numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ROUTED)
def test_statistics_are_those_of_eager_output_attentions(family, side, dtype):
    model = tiny(family, dtype)
    ids, mask = padded(documents(), side)
    learned = family == "gpt_oss"
    cap = capture(model, ids, mask, sink="learned" if learned else "first", record_rows="none")
    assert cap.mode == "attention"
    sink_mass, entropy, lengths = reference_statistics(model, ids, mask, learned)
    keep = cap.query_mask[:, None, None, :]
    for name, expected in (("sink_mass", sink_mass), ("entropy", entropy)):
        tol = 1e-6 if dtype == torch.float32 else BF16_TOL[name]
        diff = np.abs(np.where(keep, getattr(cap, name) - expected, 0.0))
        assert float(diff.max()) <= tol, (name, float(diff.max()))
    np.testing.assert_array_equal(cap.n_tokens, lengths)


#: (family, dtype) of the padding check: every family in float32, and the routed ones in
#: bfloat16 too (capture refuses the fallback's bfloat16 eager rows, which do not sum to 1
#: within bfloat16's rounding).
PADDED = [(f, torch.float32) for f in ROUTED + FALLBACK] + [(f, torch.bfloat16) for f in ROUTED]
#: Different batch shapes take other BLAS paths. float32 rounding of these O(1) outputs stays
#: below 1e-5; in bfloat16 one rounding of an output up to 3.3 is 2**-8 * 4 ~ 1.6e-2 (none
#: measured: the outputs agree exactly). A shifted position moves them by O(1).
PADDED_TOL = {torch.float32: 1e-5, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize(
    ("family", "dtype"),
    PADDED,
    ids=[f"{f}-{'bf16' if d == torch.bfloat16 else 'f32'}" for f, d in PADDED],
)
def test_a_padded_batch_gives_each_document_its_outputs_alone(family, dtype, side):
    """Capture never changes a model's positions: RoBERTa-style models number positions from
    ``padding_idx + 1``, the others from 0, and left padding must not shift either."""
    model = tiny(family, dtype)
    docs = documents()
    batch = capture_windows(
        model, docs, batch_size=3, padding_side=side, keep_outputs=True, record_rows="none"
    )
    for d, doc in enumerate(docs):
        ids = torch.as_tensor(doc)[None]
        alone = output_of(eager_forward(model, ids, torch.ones_like(ids))).float().numpy()[0]
        ours = batch.outputs[d, : len(doc)]
        np.testing.assert_allclose(ours, alone, rtol=0, atol=PADDED_TOL[dtype])


@pytest.mark.parametrize("family", FALLBACK)
def test_models_that_do_not_route_are_read_through_eager_outputs(family):
    model = tiny(family)
    ids, mask = padded(documents(), "right")
    cap = capture(model, ids, mask)
    assert cap.mode == "outputs"
    with pytest.raises(AttncodaError, match="does not route its attention"):
        capture(model, ids, mask, mode="attention")


def test_roberta_positions_start_after_the_padding_index():
    model = tiny("roberta")
    docs = documents()
    ids, mask = padded(docs, "left")
    left = capture(model, ids, mask, keep_outputs=True, record_rows="none")
    ids, mask = padded(docs, "right")
    right = capture(model, ids, mask, keep_outputs=True, record_rows="none")
    # Float32 rounding of other batch layouts; wrong positions (0..n-1) differ by O(1).
    np.testing.assert_allclose(left.outputs, right.outputs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(left.sink_mass, right.sink_mass, rtol=0, atol=1e-6)


# --- learned sinks (GPT-OSS s_aux) and soft-capping (Gemma 2) -------------------------------


def entropy_identity_gap(cap) -> float:
    """max |H - (h(s) + s H(p_S/s) + (1-s) H(q))| over rows with content and a sink."""
    s = cap.sink_mass
    binary = -(s * np.log(np.where(s > 0, s, 1.0)) + (1 - s) * np.log(np.where(s < 1, 1 - s, 1.0)))
    rebuilt = binary + s * cap.within_sink_entropy + (1 - s) * cap.content_entropy
    both = cap.has_content & cap.has_sink
    return float(np.abs(np.where(both, cap.entropy - rebuilt, 0.0)).max())


def test_learned_sink_is_a_virtual_key_of_the_sink_set():
    model = tiny("gpt_oss")
    ids, mask = padded(documents(), "left")
    learned = capture(model, ids, mask, sink="learned", record_rows="all")
    both = capture(model, ids, mask, sink="first,learned", record_rows="all")
    first = capture(model, ids, mask, sink="first", record_rows="all")
    assert learned.virtual_keys == both.virtual_keys == first.virtual_keys == 1
    assert learned.causal and first.causal
    n = learned.n_tokens
    # The virtual key is one more key of every row: query i of a causal row sees i + 2 in
    # the global layer 1 (layer 0 has a sliding window of 4 tokens).
    np.testing.assert_array_equal(learned.n_keys[0, 1, 0, : n[0]], np.arange(n[0]) + 2)
    np.testing.assert_array_equal(
        learned.n_keys[0, 0, 0, : n[0]], np.minimum(np.arange(n[0]) + 2, 5)
    )
    # Its column in the recorded rows is n_tokens, last, and it sits in the sink set.
    assert [list(p) for p in learned.sink_positions] == [[int(k)] for k in n]
    assert [list(p) for p in both.sink_positions] == [[0, int(k)] for k in n]
    assert learned.rows[0].shape[-1] == n[0] + 1
    probs = np.exp(learned.rows[0][0, 0])
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=0, atol=1e-6)
    np.testing.assert_allclose(probs[:, -1], learned.sink_mass[0, 0, 0, : n[0]], atol=1e-6)
    for cap in (learned, both, first):
        assert entropy_identity_gap(cap) <= 1e-6
        assert np.isfinite(cap.content_entropy).all() and np.isfinite(cap.sink_balance).all()
    # The same rows under every spec: the entropy does not depend on the sink set (up to
    # the float32 rounding of the row sums each spec closes the row with, ~1e-7 nats).
    np.testing.assert_allclose(learned.entropy, first.entropy, rtol=0, atol=1e-6)
    # Two sink keys: the token sink and the virtual key, a within-sink entropy > 0.
    assert float(both.within_sink_entropy[both.has_content].max()) > 0.0
    # With sink='first' the virtual key's mass is content mass: s(first) + s(learned) is
    # the mass of both.
    total = first.sink_mass + learned.sink_mass
    np.testing.assert_allclose(both.sink_mass, total, rtol=0, atol=1e-6)


def test_sink_learned_needs_learned_sink_logits():
    model = tiny("llama")
    ids, mask = padded(documents(), "right")
    with pytest.raises(AttncodaError) as info:
        capture(model, ids, mask, sink="first,learned")
    assert str(info.value) == (
        "sink 'learned' needs learned sink logits (s_aux), but attention call 0 of this model "
        "has none: use a token sink such as 'first'"
    )
    with pytest.raises(AttncodaError) as info:
        capture(tiny("gpt_oss"), ids, mask, sink="learned", mode="outputs")
    assert str(info.value) == (
        "sink 'learned' needs the learned sink logits, which eager outputs do not carry: "
        "capture GptOssForCausalLM with mode='attention'"
    )


def test_eager_rows_that_do_not_sum_to_one_are_refused():
    ids, mask = padded(documents(), "right")
    with pytest.raises(AttncodaError, match=r"rows of layer 0 sum to 0\.\d+, not 1"):
        capture(tiny("gpt_oss"), ids, mask, mode="outputs")


def test_gemma2_softcap_is_captured_with_every_identity():
    model = tiny("gemma2")
    ids, mask = padded(documents(), "left")
    cap = capture(model, ids, mask, sink="0,1", record_rows="all")
    assert cap.mode == "attention"
    assert entropy_identity_gap(cap) <= 1e-6
    # Sliding window of 4 in layer 0: rows see at most 4 keys; layer 1 is global.
    assert int(cap.n_keys[:, 0].max()) == 4
    assert int(cap.n_keys[:, 1].max()) == LENGTH
    # The soft cap bounds every logit by 2, so no probability ratio exceeds e**4 in a row.
    rows = cap.rows[0][1, 0]
    finite = np.where(np.isfinite(rows), rows, np.nan)
    spread = np.nanmax(finite, -1) - np.nanmin(finite, -1)
    assert float(np.nanmax(spread)) <= 4.0 + 1e-5
    assert math.isfinite(float(cap.sink_balance.sum()))


@pytest.mark.parametrize("family", ["gpt_oss", "gemma2", "llama"])
def test_query_blocks_that_skip_hidden_keys_give_the_statistics_of_one_block(family):
    """Blocks of 4 queries skip the keys the causal mask hides from the whole block; with
    learned sinks the virtual key stays the last column. Only float32 rounding of sums over
    shorter rows differs from one block (1e-6)."""
    model = tiny(family)
    ids, mask = padded(documents(), "left")
    spec = "first,learned" if family == "gpt_oss" else "first"
    one = capture(model, ids, mask, sink=spec, record_rows="all")
    blocks = capture(model, ids, mask, sink=spec, record_rows="all", block_size=4)
    for name in ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance"):
        np.testing.assert_allclose(getattr(blocks, name), getattr(one, name), atol=1e-6)
    np.testing.assert_array_equal(blocks.n_keys, one.n_keys)
    for a, b in zip(blocks.rows, one.rows, strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(np.exp(a), np.exp(b), atol=1e-6)
