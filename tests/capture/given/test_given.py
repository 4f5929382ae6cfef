"""from_attentions: attention a user already has gives the same Capture as a model run."""

from __future__ import annotations

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
from attncoda.capture.given import from_attentions  # noqa: E402
from attncoda.experiments.contract import head_rows  # noqa: E402
from attncoda.experiments.flips import flips  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

_MODELS: dict[str, object] = {}
FLOATS = ("sink_mass", "entropy", "within_sink_entropy")


def tiny(family: str):
    if family not in _MODELS:
        _MODELS[family] = _tiny(family, positions=64)
    return _MODELS[family]


def batch(side: str = "right"):
    rng = np.random.default_rng(5)
    docs = [rng.integers(3, VOCAB, size=n) for n in (10, 7, 4)]
    ids = torch.ones((3, 10), dtype=torch.long)
    mask = torch.zeros((3, 10), dtype=torch.long)
    for d, doc in enumerate(docs):
        span = slice(10 - len(doc), 10) if side == "left" else slice(0, len(doc))
        ids[d, span] = torch.as_tensor(doc)
        mask[d, span] = 1
    return docs, ids, mask


def eager_attentions(model, ids, mask):
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        return forward(model, ids, mask, output_attentions=True).attentions
    finally:
        model.set_attn_implementation(previous)


def assert_same_statistics(given, routed, atol: float = 1e-6, content_atol: float = 1e-5):
    """float32 eager probabilities vs capture's float32 log-softmax of the same scores: one
    float32 rounding apart (~1e-7 per probability), so 1e-6 on s and H; H(q) divides the
    content by 1 - s, which scales the same rounding, hence 1e-5."""
    np.testing.assert_array_equal(given.query_mask, routed.query_mask)
    np.testing.assert_array_equal(given.n_keys, routed.n_keys)
    np.testing.assert_array_equal(given.has_content, routed.has_content)
    for name in FLOATS:
        np.testing.assert_allclose(getattr(given, name), getattr(routed, name), atol=atol)
    content = routed.has_content
    np.testing.assert_allclose(
        given.content_entropy[content], routed.content_entropy[content], atol=content_atol
    )


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("family", ["llama", "bert"])
def test_a_hugging_face_tuple_gives_the_capture_of_the_model(family, side):
    model = tiny(family)
    _, ids, mask = batch(side)
    routed = capture(model, ids, mask, record_rows="all")
    given = from_attentions(eager_attentions(model, ids, mask), attention_mask=mask)
    assert given.mode == "given" and given.model_class == "tuple"
    assert given.causal == routed.causal == (family == "llama")
    assert_same_statistics(given, routed)
    for ours, theirs in zip(given.rows, routed.rows, strict=True):
        np.testing.assert_allclose(np.exp(ours), np.exp(theirs), atol=1e-6)


def test_stacked_arrays_and_a_list_of_documents_agree_with_the_tuple():
    model = tiny("llama")
    docs, ids, mask = batch()
    attentions = eager_attentions(model, ids, mask)
    from_tuple = from_attentions(attentions, attention_mask=mask)
    stacked = torch.stack(attentions, 1).numpy()  # (batch, layer, head, query, key)
    from_array = from_attentions(stacked, attention_mask=mask.numpy())
    for name in FLOATS:
        np.testing.assert_array_equal(getattr(from_array, name), getattr(from_tuple, name))
    alone = []
    for doc in docs:
        one = torch.as_tensor(doc)[None]
        alone.append(torch.stack(eager_attentions(model, one, torch.ones_like(one)), 1)[0])
    listed = from_attentions(alone)
    # Each document alone vs in a padded batch: other BLAS shapes, float32 rounding.
    assert_same_statistics(listed, from_tuple)
    single = from_attentions(alone[0])  # (layer, head, query, key): one document
    assert single.n_docs == 1 and int(single.n_tokens[0]) == len(docs[0])


def test_logits_with_minus_inf_masks_equal_probabilities():
    model = tiny("llama")
    _, ids, mask = batch()
    probs = torch.stack(eager_attentions(model, ids, mask), 1).double()
    # Logits up to a constant per row: log p, with -inf on the masked keys.
    logits = torch.log(probs) + 3.0
    from_probs = from_attentions(probs, attention_mask=mask)
    from_logits = from_attentions(logits, kind="logits", attention_mask=mask)
    assert from_logits.causal
    for name in FLOATS:
        np.testing.assert_allclose(
            getattr(from_logits, name), getattr(from_probs, name), atol=1e-12
        )


# bfloat16 probabilities (8-bit mantissa) sum to 1 within 2e-3 only, which the 1e-3 check
# refuses: bfloat16 is tested with logits.
@pytest.mark.parametrize(
    ("dtype", "kind"),
    [
        ("float32", "logits"),
        ("float32", "probs"),
        ("float16", "logits"),
        ("float16", "probs"),
        ("bfloat16", "logits"),
    ],
)
def test_narrow_input_gives_the_capture_of_its_float64_copy(dtype, kind):
    # Narrow input is kept as it is (in float32) and each layer taken to float64 only when
    # its statistics are computed: the same float64 values, the same ops, the same bits as
    # the input converted to float64 first.
    model = tiny("llama")
    _, ids, mask = batch()
    probs = torch.stack(eager_attentions(model, ids, mask), 1)
    given = (torch.log(probs) - 0.5 if kind == "logits" else probs).to(getattr(torch, dtype))
    narrow = from_attentions(given, kind=kind, attention_mask=mask, zeros="floor")
    wide = from_attentions(given.double(), kind=kind, attention_mask=mask, zeros="floor")
    for name in (*FLOATS, "content_entropy", "sink_balance"):
        np.testing.assert_array_equal(getattr(narrow, name), getattr(wide, name))
    np.testing.assert_array_equal(narrow.n_keys, wide.n_keys)
    assert narrow.n_floored == wide.n_floored


def test_a_transformer_lens_style_cache_reads_scores_before_patterns():
    model = tiny("llama")
    _, ids, mask = batch()
    ids, mask = ids[:1], mask[:1]  # TransformerLens runs unpadded batches
    probs = torch.stack(eager_attentions(model, ids, mask), 1)[0]
    scores = torch.log(probs.double()) - 1.5
    cache = {}
    for layer in range(probs.shape[0]):
        cache[f"blocks.{layer}.attn.hook_pattern"] = probs[layer][None]
        cache[f"blocks.{layer}.attn.hook_attn_scores"] = scores[layer][None]
    both = from_attentions(cache)
    patterns = from_attentions({k: v for k, v in cache.items() if "pattern" in k})
    assert both.model_class == "dict"
    np.testing.assert_allclose(both.entropy, patterns.entropy, atol=1e-6)
    with pytest.raises(AttncodaError, match="the cache holds no"):
        from_attentions({"blocks.0.hook_resid_pre": probs})


def test_sinks_auto_and_tokens():
    model = tiny("bert")
    _, ids, mask = batch()
    attentions = eager_attentions(model, ids, mask)
    tokens = ids.numpy()
    with pytest.raises(AttncodaError) as info:
        from_attentions(attentions, attention_mask=mask, sink=f"id:{tokens[0, 2]}")
    assert str(info.value) == (
        f"sink 'id:{tokens[0, 2]}' names a token: pass tokens= (the token ids)"
    )
    routed = capture(model, ids, mask, sink="0,2")
    given = from_attentions(attentions, attention_mask=mask, sink="0,2", tokens=tokens)
    np.testing.assert_array_equal(given.token_ids, routed.token_ids)
    assert_same_statistics(given, routed)
    auto = from_attentions(attentions, attention_mask=mask, sink="auto")
    assert auto.sink_spec == "auto" and len(auto.sink_positions) == 3


def test_bad_inputs_are_refused_by_name():
    model = tiny("llama")
    _, ids, mask = batch()
    probs = torch.stack(eager_attentions(model, ids, mask), 1).double()
    cases = [
        (
            lambda: from_attentions(probs, kind="pattern"),
            "unknown kind 'pattern': use one of probs, log_probs, logits",
        ),
        (
            lambda: from_attentions(probs, method="fast"),
            "method 'fast' does not apply to given attention: the rows are already "
            "materialised, so use method='exact'",
        ),
        (
            lambda: from_attentions(probs[..., :-1], attention_mask=mask),
            "attention has 10 queries and 9 keys: give self-attention over one sequence "
            "(query_pos == key_pos)",
        ),
        (
            lambda: from_attentions(probs[0, 0]),
            "attn has shape (4, 10, 10): give (batch, layer, head, query_pos, key_pos) or "
            "(layer, head, query_pos, key_pos)",
        ),
        (
            lambda: from_attentions(probs, attention_mask=mask[:2]),
            "attention_mask has shape (2, 10), the attention gives 3 documents of 10 "
            "positions: they must match",
        ),
        (
            lambda: from_attentions(probs * 0.5, attention_mask=mask),
            "attention rows sum to 0.5 on their visible keys, not 1 (within 1e-3): pass "
            "kind='logits' for unnormalised scores, or give the attention_mask that the rows "
            "were computed with",
        ),
        (
            lambda: from_attentions(-probs, attention_mask=mask),
            "attention probabilities must be finite and non-negative: pass kind='logits' or "
            "kind='log_probs' for other numbers",
        ),
        (
            lambda: from_attentions(probs, attention_mask=mask, causal=False, sink="learned"),
            "sink 'learned' needs the learned sink logits, which given attention does not "
            "carry: use a token sink such as 'first'",
        ),
    ]
    for call, message in cases:
        with pytest.raises(AttncodaError) as info:
            call()
        assert str(info.value) == message
    bert = torch.stack(eager_attentions(tiny("bert"), ids, mask), 1)
    with pytest.raises(AttncodaError, match="causal=True, but some query gives weight"):
        from_attentions(bert, attention_mask=mask, causal=True)


def test_zero_probabilities_follow_the_zero_policy():
    model = tiny("bert")
    _, ids, mask = batch()
    probs = torch.stack(eager_attentions(model, ids, mask), 1).double()
    probs[0, 1, 2, 3, :] = torch.softmax(torch.tensor([0.0, -1e4] + [0.0] * 8), 0)
    with pytest.raises(AttncodaError) as info:
        from_attentions(probs, attention_mask=mask)
    assert str(info.value).startswith(
        "attention probability is exactly 0 at document 0, layer 1, head 2, query_pos 3, "
        "key_pos 1 on a visible key"
    )
    floored = from_attentions(probs, attention_mask=mask, zeros="floor")
    assert floored.n_floored == 1
    assert np.isfinite(floored.entropy).all() and np.isfinite(floored.sink_balance).all()


def test_flips_on_given_attention_equal_flips_on_the_capture():
    model = tiny("llama")
    _, ids, mask = batch()
    routed = capture(model, ids, mask, record_rows="all")
    given = from_attentions(eager_attentions(model, ids, mask), attention_mask=mask)
    ours = flips(head_rows(given, "tiny"), n_boot=20, seed=0, tol=1e-5)
    theirs = flips(head_rows(routed, "tiny"), n_boot=20, seed=0, tol=1e-5)
    assert_same_verdicts(ours.table, theirs.table)


def assert_same_verdicts(ours, theirs):
    """The two inputs differ by float32 rounding (~1e-7 in each distance), far below the
    tie tolerance (1e-5): a verdict can change only where a distance gap sits within that
    rounding of the tolerance itself. Allow at most one such verdict per metric."""
    assert list(ours["metric"]) == list(theirs["metric"])
    np.testing.assert_array_equal(ours["n_triplets"], theirs["n_triplets"])
    assert (np.abs(ours["flips"] - theirs["flips"]) <= 1).all()
    assert (np.abs(ours["n_ties"] - theirs["n_ties"]) <= 1).all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_real_models_from_their_own_outputs(name):
    from attncoda.models.load import load_model

    model, tokenizer, _ = load_model(name)
    texts = [
        "The lighthouse keeper climbed the spiral stairs each evening, counting the steps "
        "as the fog rolled in over the harbour and the gulls fell silent.",
        "By morning the storm had passed, and the fishing boats slipped out one by one "
        "past the breakwater into a flat grey sea.",
    ]
    docs = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    routed = capture_windows(model, docs, record_rows="all", batch_size=2)
    ids, mask = pad_right(docs, int(model.config.pad_token_id or 0))
    attentions = eager_attentions(model, ids, mask)
    stacked = torch.stack(attentions, 1).numpy()
    for given in (
        from_attentions(attentions, attention_mask=mask),
        from_attentions(stacked, attention_mask=mask.numpy()),
    ):
        assert_same_statistics(given, routed, atol=1e-5, content_atol=1e-4)
        ours = flips(head_rows(given, name), n_boot=20, seed=0, tol=1e-5)
        theirs = flips(head_rows(routed, name), n_boot=20, seed=0, tol=1e-5)
        # As in assert_same_verdicts, with many more triplets: a few boundary verdicts.
        gap = np.abs(ours.table["flips"] - theirs.table["flips"]) / ours.table["n_triplets"]
        assert float(gap.max()) <= 1e-4


def pad_right(docs, pad_id: int):
    width = max(len(d) for d in docs)
    ids = torch.full((len(docs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for d, doc in enumerate(docs):
        ids[d, : len(doc)] = torch.as_tensor(doc)
        mask[d, : len(doc)] = 1
    return ids, mask


@pytest.mark.slow
def test_transformer_lens_cache_of_a_real_bridge():
    """A real TransformerLens ``ActivationCache`` from ``run_with_cache`` of a
    ``TransformerBridge`` around a small random GPT-2 (MiniLM's tokenizer, offline)."""
    pytest.importorskip("transformer_lens")
    from transformer_lens.model_bridge import TransformerBridge

    from attncoda.models.load import load_model

    _, tokenizer, _ = load_model("minilm")
    config = transformers.GPT2Config(
        vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=64
    )
    torch.manual_seed(0)
    hf_model = transformers.GPT2LMHeadModel(config).eval()
    text = "the tide came in over the sand while the children built their castle"
    ids = torch.as_tensor(tokenizer(text, add_special_tokens=False)["input_ids"])[None]
    # The model's own capture first: the bridge takes the model over (hooks, eager).
    routed = capture(hf_model, ids, record_rows="all")
    bridge = TransformerBridge.boot_transformers("gpt2", hf_model=hf_model, tokenizer=tokenizer)
    _, cache = bridge.run_with_cache(ids)
    assert type(cache).__name__ == "ActivationCache"
    from_scores = from_attentions(cache)  # reads hook_attn_scores: exact logits
    patterns = {k: cache[k] for k in cache.keys() if k.endswith("hook_pattern")}
    from_patterns = from_attentions(patterns)
    assert from_scores.causal and from_patterns.causal
    for name in FLOATS:
        np.testing.assert_allclose(
            getattr(from_scores, name), getattr(from_patterns, name), atol=1e-6
        )
    # By hand from the cache's own patterns, float64: sink mass (key 0) and entropy.
    probs = torch.stack([patterns[f"blocks.{i}.attn.hook_pattern"] for i in range(2)], 1)
    probs = probs.double().numpy()[0]
    plogp = np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1.0)), 0.0)
    np.testing.assert_allclose(from_scores.sink_mass[0], probs[..., 0], atol=1e-6)
    np.testing.assert_allclose(from_scores.entropy[0], -plogp.sum(-1), atol=1e-6)
    assert_same_statistics(from_scores, routed)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_given_attention_records_the_dtype_it_read(dtype):
    model = tiny("llama")
    _, ids, mask = batch()
    probs = torch.stack(eager_attentions(model, ids, mask), 1).to(getattr(torch, dtype))
    cap = from_attentions(probs, kind="probs", attention_mask=mask, zeros="floor")
    assert (cap.forward, cap.read_dtype) == (None, dtype)
    listed = from_attentions(list(probs.numpy()), kind="probs", zeros="floor")
    assert listed.read_dtype == dtype
