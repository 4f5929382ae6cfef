"""capture(): statistics, padding invariance, sinks, rows, tables."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import forward  # noqa: E402
from attncoda.capture._capture import (  # noqa: E402
    Capture,
    capture,
    capture_frame,
    capture_windows,
)
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


def tiny(family: str, dtype=torch.float32):
    return _tiny(family, dtype, positions=512)


def spiked_gpt2(token: int = 7):
    """A tiny GPT-2 whose every head sends almost all attention to ``token``: a forced sink."""
    model = tiny("gpt2")
    with torch.no_grad():
        model.transformer.wte.weight[token, 0] = 100.0
        for block in model.transformer.h:
            weight, bias = block.attn.c_attn.weight, block.attn.c_attn.bias
            weight[:, :32] = 0.0
            bias[:32] = 1.0  # constant queries
            weight[:, 32:64] = 0.0
            weight[0, 32:64] = 1.0  # keys read the spiked dimension
    return model


def docs(lengths=(12, 9, 5), seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def pad(windows, side, pad_id=0):
    width = max(len(w) for w in windows)
    ids = torch.full((len(windows), width), pad_id)
    mask = torch.zeros_like(ids)
    for row, window in enumerate(windows):
        span = slice(width - len(window), width) if side == "left" else slice(0, len(window))
        ids[row, span] = torch.tensor(window)
        mask[row, span] = 1
    return ids, mask


def raises(call, message):
    with pytest.raises(AttncodaError) as info:
        call()
    assert str(info.value) == message


def output_of(out):
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


class FakeTokenizer:
    bos_token_id = 1
    pad_token_id = 0

    def get_vocab(self):
        return {"[CLS]": 2, "[SEP]": 3, "<s>": 1}


FAMILIES = ["gpt2", "gpt_neox", "opt", "llama", "qwen2", "mistral", "bert"]


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_side_does_not_change_statistics(family):
    model = tiny(family)
    windows = docs()
    # The exact path, whose outputs are eager's bit for bit.
    alone = [capture(model, torch.tensor([w]), record_rows="all", method="exact") for w in windows]
    for side in ("left", "right"):
        ids, mask = pad(windows, side)
        cap = capture(model, ids, mask, record_rows="all", keep_outputs=True, method="exact")
        assert cap.n_tokens.tolist() == [12, 9, 5]
        for d, single in enumerate(alone):
            n = len(windows[d])
            for name in FLOATS:
                ours = getattr(cap, name)[d, :, :, :n]
                np.testing.assert_allclose(ours, getattr(single, name)[0], rtol=0, atol=1e-6)
            assert np.array_equal(cap.n_keys[d, :, :, :n], single.n_keys[0])
            assert np.array_equal(cap.has_content[d, :, :, :n], single.has_content[0])
            np.testing.assert_allclose(cap.rows[d], single.rows[0], rtol=0, atol=1e-5)
        # outputs are bit-identical to eager on the very same padded batch
        model.set_attn_implementation("eager")
        eager = output_of(forward(model, ids, mask)).numpy()
        for d, window in enumerate(windows):
            start = int(mask[d].argmax())
            assert np.array_equal(
                cap.outputs[d, : len(window)], eager[d, start : start + len(window)]
            )
            assert not cap.outputs[d, len(window) :].any()


def test_statistics_layout_and_masks():
    model = tiny("llama")
    ids, mask = pad(docs(), "left")
    cap = capture(model, ids, mask)
    assert isinstance(cap, Capture)
    assert cap.sink_mass.shape == (3, 2, 4, 12)
    assert (cap.n_docs, cap.n_layers, cap.n_heads) == (3, 2, 4)
    assert cap.n_keys.dtype == np.int64 and cap.sink_mass.dtype == np.float64
    assert cap.query_mask.sum(1).tolist() == [12, 9, 5]
    assert cap.causal and cap.model_class == "LlamaForCausalLM" and cap.sink_spec == "first"
    expected_keys = np.broadcast_to(np.arange(1, 13), (2, 4, 12))
    assert np.array_equal(cap.n_keys[0], expected_keys)
    assert not cap.n_keys[2, :, :, 5:].any() and not cap.sink_mass[2, :, :, 5:].any()
    assert cap.token_ids[2, 5:].tolist() == [-1] * 7
    assert cap.token_ids[2, :5].tolist() == ids[2, 7:].tolist()
    for name in FLOATS:
        assert np.isfinite(getattr(cap, name)).all()


def test_has_content_and_has_sink():
    model = tiny("gpt2")
    windows = docs()
    windows[0][3] = windows[1][3] = windows[2][3] = 7  # token 7 at position 3 of every doc
    ids, mask = pad(windows, "right")
    first = capture(model, ids, mask)
    assert not first.has_content[:, :, :, 0].any()
    assert first.has_content[:, :, :, 1:][
        np.broadcast_to(first.query_mask[:, None, None, 1:], (3, 2, 4, 11))
    ].all()
    assert (first.content_entropy[:, :, :, 0] == 0).all()
    assert (first.sink_balance[:, :, :, 0] == 0).all()
    np.testing.assert_allclose(first.sink_mass[:, :, :, 0], 1.0, atol=1e-12)
    token = capture(model, ids, mask, sink="id:7")
    assert [s.tolist() for s in token.sink_positions] == [[3], [3], [3]]
    assert not token.has_sink[:, :, :, :3].any() and token.has_sink[:, :, :, 3].all()
    assert (token.sink_mass[:, :, :, :3] == 0).all()
    assert (token.within_sink_entropy == 0).all()
    real = np.broadcast_to(token.query_mask[:, None, None, :], token.has_content.shape)
    assert token.has_content[real].all()  # no row is all sink when the sink is key 3
    for cap in (first, token):
        for name in FLOATS:
            assert not np.isnan(getattr(cap, name)).any()
    frame = capture_frame(first)
    assert list(frame.columns) == [
        "doc",
        "layer",
        "head",
        "query_pos",
        "n_keys",
        "sink_mass",
        "entropy",
        "content_entropy",
        "within_sink_entropy",
        "sink_balance",
        "has_content",
        "has_sink",
    ]
    assert len(frame) == 2 * 4 * (12 + 9 + 5)
    assert str(frame["content_entropy"].dtype) == "Float64"
    assert str(frame["sink_balance"].dtype) == "Float64"
    assert frame["content_entropy"].isna().tolist() == (~frame["has_content"]).tolist()
    assert frame["sink_balance"].isna().sum() == 2 * 4 * 3
    assert frame.loc[frame["query_pos"] == 0, "has_content"].eq(False).all()
    assert first.to_frame().equals(frame)


@pytest.mark.parametrize("sink", ["first", "0,1"])
def test_entropy_identity(sink):
    model = tiny("qwen2")
    ids, mask = pad(docs(), "left")
    cap = capture(model, ids, mask, sink=sink)
    s = cap.sink_mass
    with np.errstate(divide="ignore", invalid="ignore"):
        binary = -(np.where(s > 0, s * np.log(s), 0) + np.where(s < 1, (1 - s) * np.log1p(-s), 0))
    rebuilt = binary + s * cap.within_sink_entropy + (1 - s) * cap.content_entropy
    keep = np.broadcast_to(cap.query_mask[:, None, None, :], s.shape)
    # The rows are float32 log-softmax and float32 softmax of the same scores (as the layer
    # computes them), summed in float64: the identity holds to float32 rounding.
    np.testing.assert_allclose(rebuilt[keep], cap.entropy[keep], rtol=0, atol=1e-6)
    if sink == "0,1":
        assert (cap.within_sink_entropy[:, :, :, 1:][keep[:, :, :, 1:]] > 0).all()


@pytest.mark.parametrize("family", ["llama", "bert"])
def test_statistics_match_eager_probabilities(family):
    """Cross-check against eager output_attentions, with plain numpy maths."""
    model = tiny(family)
    ids, mask = pad(docs(), "right")
    cap = capture(model, ids, mask, sink="0,2")
    model.set_attn_implementation("eager")
    atts = forward(model, ids, mask, output_attentions=True).attentions
    for d in range(3):
        n = int(cap.n_tokens[d])
        for layer, probs in enumerate(atts):
            for query in range(n):
                row = probs[d, :, query].double().numpy()
                keys = np.arange(n) if family == "bert" else np.arange(query + 1)
                p = row[:, keys]
                sink = [k for k in (0, 2) if k in keys]
                content = [k for k in keys if k not in (0, 2)]
                s = p[:, sink].sum(-1)
                np.testing.assert_allclose(cap.sink_mass[d, layer, :, query], s, atol=1e-6)
                total = -(p * np.log(p)).sum(-1)
                np.testing.assert_allclose(cap.entropy[d, layer, :, query], total, atol=1e-6)
                assert (cap.n_keys[d, layer, :, query] == len(keys)).all()
                if content:
                    q = p[:, content] / p[:, content].sum(-1, keepdims=True)
                    h_q = -(q * np.log(q)).sum(-1)
                    np.testing.assert_allclose(
                        cap.content_entropy[d, layer, :, query], h_q, atol=1e-6
                    )
                    if sink:
                        k, m = len(sink), len(content)
                        logp = np.log(p)
                        b = math.sqrt(k * m / (k + m)) * (
                            logp[:, sink].mean(-1) - logp[:, content].mean(-1)
                        )
                        np.testing.assert_allclose(
                            cap.sink_balance[d, layer, :, query], b, atol=1e-5
                        )


def test_statistics_match_coda():
    from attncoda import coda

    model = tiny("mistral")
    ids, mask = pad(docs(), "left")
    cap = capture(model, ids, mask, sink="0,1", record_rows="all")
    for d in range(3):
        rows = cap.rows[d].astype(np.float64)
        for query in range(2, int(cap.n_tokens[d])):
            logp = rows[:, :, query, : query + 1]
            split = coda.entropy_split(logp, sink=[0, 1])
            for ours, theirs in (
                ("entropy", split.total),
                ("sink_mass", split.sink_mass),
                ("content_entropy", split.content),
                ("within_sink_entropy", split.within_sink),
            ):
                np.testing.assert_allclose(
                    getattr(cap, ours)[d, :, :, query], np.asarray(theirs), atol=1e-5
                )
            balance = coda.sink_balance(logp, sink=[0, 1])
            np.testing.assert_allclose(cap.sink_balance[d, :, :, query], balance, atol=1e-4)


def test_blocks_give_the_same_statistics():
    model = tiny("llama")
    ids, mask = pad(docs((40, 33)), "left")
    whole = capture(model, ids, mask)
    blocked = capture(model, ids, mask, block_size=16)
    odd = capture(model, ids, mask, block_size=7)
    # Blocks skip the keys hidden from all their queries, so their float32 row sums run
    # over shorter rows: the same values summed in another grouping, within 1e-6 nats
    # (float32 rounding of entropies of a few nats).
    for name in FLOATS:
        np.testing.assert_allclose(getattr(blocked, name), getattr(whole, name), atol=1e-6)
        np.testing.assert_allclose(getattr(odd, name), getattr(whole, name), atol=1e-6)


def test_recorded_rows():
    model = tiny("gpt2")
    windows = docs((150, 20))
    ids, mask = pad(windows, "right")
    cap = capture(model, ids, mask, seed=3)
    assert len(cap.row_positions[0]) == 128 and cap.row_positions[1].tolist() == list(range(20))
    assert np.all(np.diff(cap.row_positions[0]) > 0) and cap.row_positions[0].max() < 150
    assert cap.rows[0].shape == (2, 4, 128, 150) and cap.rows[0].dtype == np.float32
    assert cap.rows[1].shape == (2, 4, 20, 20)
    again = capture(model, ids, mask, seed=3)
    other = capture(model, ids, mask, seed=4)
    assert np.array_equal(again.row_positions[0], cap.row_positions[0])
    assert not np.array_equal(other.row_positions[0], cap.row_positions[0])
    for d in range(2):
        positions = cap.row_positions[d]
        mask_d = cap.row_key_mask[d]
        assert np.array_equal(mask_d, np.isfinite(cap.rows[d]))
        causal = np.arange(cap.rows[d].shape[-1])[None, :] <= positions[:, None]
        assert np.array_equal(mask_d, np.broadcast_to(causal, mask_d.shape))
        np.testing.assert_allclose(
            np.exp(cap.rows[d][..., 0]), cap.sink_mass[d][:, :, positions], atol=1e-6
        )
        total = np.logaddexp.reduce(cap.rows[d].astype(np.float64), axis=-1)
        np.testing.assert_allclose(total, 0.0, atol=1e-6)
    none = capture(model, ids, mask, record_rows="none")
    assert none.rows[0].shape == (2, 4, 0, 150) and none.row_positions[0].size == 0
    some = capture(model, ids, mask, record_rows=5)
    assert [len(p) for p in some.row_positions] == [5, 5]


def test_sink_specs_through_capture():
    model = tiny("bert")
    windows = [[2, 5, 6, 3], [2, 9, 3, 4, 8]]
    ids, mask = pad(windows, "right")
    tok = FakeTokenizer()
    for spec, expected in [
        ("first", [[0], [0]]),
        ("[CLS]", [[0], [0]]),
        ("[SEP]", [[3], [2]]),
        ("id:3", [[3], [2]]),
        ([1], [[1], [1]]),
        ("0,1", [[0, 1], [0, 1]]),
    ]:
        cap = capture(model, ids, mask, sink=spec, tokenizer=tok)
        assert [s.tolist() for s in cap.sink_positions] == expected, spec
        assert not cap.causal
        assert (cap.n_keys[0, :, :, :4] == 4).all() and (cap.n_keys[1] == 5).all()
    raises(
        lambda: capture(model, ids, mask, sink="4"),
        "sink position 4 is beyond document 0, which has 4 tokens",
    )
    raises(
        lambda: capture(model, ids, mask, sink="id:8"),
        "sink token 'id:8' (id 8) does not occur in document 0",
    )
    raises(
        lambda: capture(model, ids, mask, sink="frist"),
        "unknown sink spec 'frist': use 'first', 'auto', positions like '0' or '0,1', a token "
        "like '[CLS]' or 'id:101', 'learned', or one of these with ',learned'",
    )


@pytest.mark.parametrize("mode", ["attention", "outputs"])
def test_auto_sink_finds_a_forced_sink(mode):
    model = spiked_gpt2(token=7)
    windows = docs((12, 10))
    for w in windows:
        w[3] = 7
    ids, mask = pad(windows, "left")
    cap = capture(model, ids, mask, sink="auto", mode=mode)
    assert [s.tolist() for s in cap.sink_positions] == [[3], [3]]
    assert cap.sink_spec == "auto"
    assert (
        cap.sink_mass[:, :, :, 3:][
            np.broadcast_to(cap.query_mask[:, None, None, 3:], (2, 2, 4, 9))
        ].min()
        > 0.99
    )
    random = capture(tiny("gpt2"), ids, mask, sink="auto", mode=mode)
    assert [s.tolist() for s in random.sink_positions] == [[], []]
    assert not random.has_sink.any()


def test_prepend_bos():
    model = tiny("llama")
    windows = docs((6, 4))
    ids, mask = pad(windows, "left", pad_id=5)
    cap = capture(model, ids, mask, prepend_bos=True, tokenizer=FakeTokenizer())
    assert cap.bos_token_id == 1 and cap.n_tokens.tolist() == [7, 5]
    assert cap.token_ids[:, 0].tolist() == [1, 1]
    assert cap.token_ids[1, 1:5].tolist() == windows[1]
    manual = capture(model, *pad([[1] + w for w in windows], "left"))
    assert manual.bos_token_id is None
    for name in FLOATS:
        np.testing.assert_allclose(getattr(cap, name), getattr(manual, name), atol=1e-6)
    from_config = capture(model, ids, mask, prepend_bos=True)
    assert from_config.bos_token_id == 1


def test_prepend_bos_without_any_bos_id():
    model = tiny("bert")
    model.config.bos_token_id = None
    raises(
        lambda: capture(model, torch.tensor([[4, 5]]), prepend_bos=True),
        "prepend_bos=True needs a BOS id: neither the tokenizer nor the model config defines "
        "bos_token_id",
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gives_finite_statistics(dtype):
    ids, mask = pad(docs(), "left")
    reference = capture(tiny("llama"), ids, mask)
    cap = capture(tiny("llama", dtype), ids, mask, keep_outputs=True)
    for name in FLOATS:
        values = getattr(cap, name)
        assert np.isfinite(values).all()
        np.testing.assert_allclose(values, getattr(reference, name), atol=0.05)
    assert cap.outputs.dtype == np.float32


def test_token_logprob_is_the_next_token_log_likelihood():
    model = tiny("gpt2")
    windows = docs((8, 5))
    ids, mask = pad(windows, "left")
    cap = capture(model, ids, mask, keep_outputs=True)
    logits = torch.tensor(cap.outputs, dtype=torch.float64).log_softmax(-1)
    for d, window in enumerate(windows):
        expected = logits[d, torch.arange(len(window) - 1), torch.tensor(window[1:])]
        np.testing.assert_allclose(cap.token_logprob[d, : len(window) - 1], expected.numpy())
        assert not cap.token_logprob[d, len(window) - 1 :].any()
    assert capture(tiny("bert"), ids, mask).token_logprob is None


def test_capture_windows_concatenates_batches():
    model = tiny("llama")
    windows = docs((7, 12, 3, 9, 5))
    whole = capture(model, *pad(windows, "right"), record_rows=4)
    parts = capture_windows(model, windows, batch_size=2, record_rows=4, progress=True)
    left = capture_windows(model, windows, batch_size=3, padding_side="left", record_rows=4)
    assert parts.sink_mass.shape == whole.sink_mass.shape == (5, 2, 4, 12)
    for cap in (parts, left):
        assert cap.n_tokens.tolist() == [7, 12, 3, 9, 5]
        assert np.array_equal(cap.query_mask, whole.query_mask)
        assert np.array_equal(cap.token_ids, whole.token_ids)
        for name in FLOATS:
            np.testing.assert_allclose(getattr(cap, name), getattr(whole, name), atol=1e-6)
        for ours, theirs in zip(cap.row_positions, whole.row_positions, strict=True):
            assert np.array_equal(ours, theirs)
        assert len(cap.rows) == 5


def test_argument_errors():
    model = tiny("llama")
    ids = torch.tensor([[4, 5, 6]])
    raises(
        lambda: capture(model, ids, mode="eager"),
        "unknown mode 'eager': use 'auto' (route when possible), 'attention' (routed, exact) "
        "or 'outputs' (eager output_attentions)",
    )
    raises(
        lambda: capture(model, ids, zeros="clip"),
        "unknown zero policy 'clip': use one of raise, floor",
    )
    raises(
        lambda: capture(model, ids, block_size=0), "block_size must be a positive integer, got 0"
    )
    raises(
        lambda: capture(model, ids, record_rows="some"),
        "record_rows must be 'auto', 'all', 'none' or a non-negative integer, got 'some'",
    )
    raises(lambda: capture(model, ids[0]), "input_ids must be 2-D (batch, pos), got shape (3,)")
    raises(
        lambda: capture(model, ids, torch.ones(1, 2)),
        "attention_mask has shape (1, 2), input_ids has shape (1, 3): they must match",
    )
    raises(
        lambda: capture(model, ids, torch.tensor([[1, 2, 1]])),
        "attention_mask must hold only 0 and 1",
    )
    raises(
        lambda: capture(model, torch.tensor([[4, 5], [6, 7]]), torch.tensor([[1, 1], [0, 0]])),
        "document 1 has no real tokens (its attention_mask row is 0)",
    )
    raises(
        lambda: capture(model, ids, torch.tensor([[1, 0, 1]])),
        "document 0 has padding between real tokens: pad on the left or the right only",
    )
    raises(
        lambda: capture_windows(model, []),
        "windows is empty: give at least one window of token ids",
    )
    raises(lambda: capture_windows(model, [[4], []]), "window 1 is empty")
    raises(
        lambda: capture_windows(model, [[4]], padding_side="middle"),
        "unknown padding_side 'middle': use 'right' or 'left'",
    )
    raises(
        lambda: capture_windows(model, [[4]], batch_size=0),
        "batch_size must be a positive integer, got 0",
    )
    model.train()
    raises(
        lambda: capture(model, ids),
        "LlamaForCausalLM is in training mode: capture runs in eval mode only (call model.eval())",
    )


def test_options_handed_whole_choose_the_sink_seed_and_method_and_refuse_a_second_word():
    from attncoda.capture import capture_windows
    from attncoda.capture.options import CaptureOptions

    model = tiny("llama")
    rng = np.random.default_rng(3)
    windows = [rng.integers(3, VOCAB, size=n).tolist() for n in (20, 33)]
    options = CaptureOptions(sink="0,1", seed=4, method="fast", kernel="sdpa")
    given = capture_windows(model, windows, options=options, record_rows=3)
    spelled = capture_windows(
        model, windows, sink="0,1", seed=4, method="fast", kernel="sdpa", record_rows=3
    )
    assert (given.sink_spec, given.seed, given.method, given.kernel) == ("0,1", 4, "fast", "sdpa")
    for name in ("sink_mass", "entropy", "content_entropy"):
        np.testing.assert_array_equal(getattr(given, name), getattr(spelled, name))
    exact = capture_windows(model, windows, sink="0,1", seed=4, record_rows=3)
    assert not np.array_equal(exact.entropy, given.entropy)  # the fast path did run
    message = (
        "options= already says the sink, seed, method and kernel: drop sink='first,learned', "
        "seed=2 or set it in the options"
    )
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        capture_windows(model, windows, options=options, sink="first,learned", seed=2)


def test_the_capture_names_the_forward_it_followed_and_what_it_read():
    ids, mask = pad(docs(), "right")
    exact = capture(tiny("llama"), ids, mask, method="exact")
    assert (exact.forward, exact.read_dtype) == ("eager", None)
    fast = capture(tiny("llama"), ids, mask, method="fast", kernel="sdpa")
    assert (fast.forward, fast.read_dtype) == ("fast:sdpa", None)
    # Soft-capped layers take the exact path under method="fast": eager's output goes on.
    capped = capture(tiny("gemma2"), ids, mask, method="fast", kernel="sdpa")
    assert capped.forward == "eager"
    # Rows read from eager output_attentions carry the model's dtype.
    read = capture(tiny("llama"), ids, mask, mode="outputs")
    assert (read.forward, read.read_dtype) == ("eager", "float32")


def test_forwards_are_named_per_layer_where_they_differ():
    from attncoda.capture._pass import forwards_ran

    assert forwards_ran("exact", {}) == "eager"
    assert forwards_ran("fast", {0: "cpp", 1: "cpp"}) == "fast:cpp"
    assert forwards_ran("fast", {0: "cpp", 1: "exact", 2: "cpp"}) == "fast:cpp; eager on layer 1"
    found = forwards_ran("fast", {0: "exact", 1: "exact", 2: "sdpa"})
    assert found == "eager; fast:sdpa on layer 2"
