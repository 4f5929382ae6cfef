"""Live wrappers: a TransformerLens TransformerBridge and an nnsight LanguageModel of the
same random GPT-2, captured and recorded like the Hugging Face model itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture, capture_windows  # noqa: E402
from attncoda.capture.given import from_attentions  # noqa: E402
from attncoda.capture.live import recording  # noqa: E402
from models.tiny_hf import tiny_tokenizer  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
WINDOWS = [[3, 5, 7, 9, 4, 8, 6, 2, 11], [4, 6, 8], [10, 3, 5, 7, 9, 30]]
# The bridge computes the same scores with its own op sequence (a joint-QKV split and its
# own matmuls): float32 rounding of scores ~1, so the statistics agree to ~1e-7; the
# acceptance bound is 1e-6.
ATOL = 1e-6


def _gpt2(seed=0):
    config = transformers.GPT2Config(
        vocab_size=120, n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=1
    )
    torch.manual_seed(seed)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("gpt2")
    _gpt2().save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


def _bridge(folder):
    bridge_mod = pytest.importorskip("transformer_lens.model_bridge")
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    bridge = bridge_mod.TransformerBridge.boot_transformers(
        str(folder), hf_model=hf, tokenizer=tokenizer
    )
    return bridge.eval()


def _nnsight(folder):
    nnsight = pytest.importorskip("nnsight")
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    with warnings.catch_warnings():
        # nnsight 0.8 warns that TransformersModel replaces LanguageModel, the class users know.
        warnings.simplefilter("ignore")
        return nnsight.LanguageModel(hf, tokenizer=tiny_tokenizer())


def _assert_close(got, ref, atol=ATOL):
    np.testing.assert_array_equal(got.n_keys, ref.n_keys)
    np.testing.assert_array_equal(got.token_ids, ref.token_ids)
    for name in FLOATS:
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=atol, rtol=0)


@pytest.mark.parametrize("wrap", ["bridge", "nnsight"])
def test_capture_windows_of_a_wrapper_equals_the_hf_model(folder, wrap):
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder).eval()
    wrapper = _bridge(folder) if wrap == "bridge" else _nnsight(folder)
    ref = capture_windows(hf, WINDOWS, batch_size=2, record_rows="all")
    got = capture_windows(wrapper, WINDOWS, batch_size=2, record_rows="all")
    _assert_close(got, ref)
    # The bridge's own attention components make its forward; nnsight runs the routed one.
    assert got.forward == ("transformer_lens" if wrap == "bridge" else "eager")
    for a, b in zip(got.rows, ref.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(b)], b[np.isfinite(b)], atol=ATOL)


def test_recording_around_run_with_cache_equals_from_attentions(folder):
    bridge = _bridge(folder)
    ids = torch.tensor([WINDOWS[0]])
    with recording(bridge) as rec, torch.no_grad():
        _, cache = bridge.run_with_cache(ids)
    got = rec.capture()
    assert (got.forward, got.read_dtype) == ("transformer_lens", "float32")
    ref = from_attentions(cache, kind="logits")
    for name in FLOATS:
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), atol=ATOL, rtol=0)
    np.testing.assert_array_equal(got.n_keys, ref.n_keys)


def test_a_bridge_recorded_in_query_blocks_equals_from_attentions(folder):
    # 9 queries in blocks of 4: rows 0-3, 4-7 and 8 are folded in separately.
    bridge = _bridge(folder)
    ids = torch.tensor([WINDOWS[0]])
    with recording(bridge, block_size=4, record_rows="all") as rec, torch.no_grad():
        _, cache = bridge.run_with_cache(ids)
    got = rec.capture()
    ref = from_attentions(cache, kind="logits", record_rows="all", tokens=ids.numpy())
    _assert_close(got, ref)
    np.testing.assert_array_equal(got.row_positions[0], np.arange(len(WINDOWS[0])))
    for a, b in zip(got.rows, ref.rows, strict=True):
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(b))
        np.testing.assert_allclose(a[np.isfinite(b)], b[np.isfinite(b)], atol=ATOL)


def test_a_bridge_hook_that_zeroes_a_head_is_recorded_as_the_model_computed_it(folder):
    bridge = _bridge(folder)
    ids = torch.tensor([WINDOWS[0]])

    def zero_head(z, hook):
        z[:, :, 1] = 0.0
        return z

    hooks = [("blocks.0.attn.hook_z", zero_head)]
    with recording(bridge) as rec, torch.no_grad():
        bridge(ids)
        bridge.run_with_hooks(ids, fwd_hooks=hooks)
    cap = rec.capture()
    with torch.no_grad(), bridge.hooks(fwd_hooks=hooks):
        _, cache = bridge.run_with_cache(ids)
    edited = from_attentions(cache, kind="logits")
    for name in FLOATS:
        np.testing.assert_allclose(getattr(cap, name)[1], getattr(edited, name)[0], atol=ATOL)
    # Layer 0 runs before the edit, so its scores are the same bits; layer 1 reads the
    # edited residual stream (the random weights are small, so the change is ~1e-5 nats).
    np.testing.assert_array_equal(cap.entropy[0, 0], cap.entropy[1, 0])
    assert np.abs(cap.entropy[0, 1] - cap.entropy[1, 1]).max() > 1e-6


def test_a_bridge_score_hook_is_seen_by_the_statistics(folder):
    bridge = _bridge(folder)
    ids = torch.tensor([WINDOWS[0]])

    def flatten(scores, hook):  # every visible key of head 2 gets the same score
        visible = scores > torch.finfo(scores.dtype).min / 2
        scores[:, 2] = torch.where(visible[:, 2], 0.0, scores[:, 2])
        return scores

    with recording(bridge) as rec, torch.no_grad():
        bridge.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_attn_scores", flatten)])
    cap = rec.capture()
    n = np.arange(1, len(WINDOWS[0]) + 1)
    np.testing.assert_allclose(cap.entropy[0, 0, 2], np.log(n), atol=1e-6)  # uniform rows


def test_an_nnsight_trace_with_an_intervention_is_recorded(folder):
    model = _nnsight(folder)
    hf = model._module
    ids = torch.tensor([WINDOWS[0]])
    with recording(model) as rec, torch.no_grad():
        with model.trace(ids):
            model.transformer.h[0].attn.output[0][:] = 0.0
    got = rec.capture()
    # The same intervention by hand on the Hugging Face model, with a forward hook.
    handle = hf.transformer.h[0].attn.register_forward_hook(
        lambda m, i, out: (torch.zeros_like(out[0]), *out[1:])
    )
    try:
        ref = capture(hf, ids, method="exact")
    finally:
        handle.remove()
    _assert_close(got, ref)
    plain = capture(hf, ids, method="exact")
    # Layer 1 reads the edited residual stream (small random weights: a ~1e-5 nats change,
    # where the same op sequence without the edit gives the same bits).
    np.testing.assert_array_equal(plain.entropy[0, 0], got.entropy[0, 0])
    assert np.abs(plain.entropy[0, 1] - got.entropy[0, 1]).max() > 1e-6


def test_wrappers_are_restored_and_refuse_what_they_cannot_do(folder):
    bridge = _bridge(folder)
    hooks = {name: len(m._forward_hooks) for name, m in bridge.named_modules()}
    with pytest.raises(RuntimeError):
        with recording(bridge):
            raise RuntimeError("inside")
    assert {name: len(m._forward_hooks) for name, m in bridge.named_modules()} == hooks
    with pytest.raises(AttncodaError, match="pad on the right"):
        capture(bridge, torch.tensor([[0, 3, 4]]), torch.tensor([[0, 1, 1]]))
    with pytest.raises(AttncodaError, match="keep_outputs=True is not available"):
        capture(bridge, torch.tensor([[3, 4]]), keep_outputs=True)
    with pytest.raises(AttncodaError, match="cannot capture a dict"):
        capture({}, torch.tensor([[3, 4]]))
