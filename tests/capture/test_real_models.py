"""capture() of the embedded pretrained models: eager-exact outputs and the sink they have."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda.capture import capture, forward  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


def output_of(out):
    return out.logits if getattr(out, "logits", None) is not None else out.last_hidden_state


TEXTS = [
    "The old lighthouse keeper climbed the stairs every evening to light the lamp.",
    "Rain fell on the harbour all night, and by morning the boats had drifted.",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["smollm2", "minilm"])
def test_real_model_is_bit_identical_and_has_a_sink(name, embedded_model):
    model, tokenizer, _ = embedded_model(name)
    sink = "[CLS]" if name == "minilm" else "first"
    caps = {}
    for side in ("left", "right"):
        tokenizer.padding_side = side
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        enc = tokenizer(TEXTS, return_tensors="pt", padding=True)
        ids, mask = enc["input_ids"], enc["attention_mask"]
        eager = output_of(forward(model, ids, mask)).numpy()
        cap = capture(
            model, ids, mask, sink=sink, tokenizer=tokenizer, keep_outputs=True, method="exact"
        )
        for d in range(len(TEXTS)):
            n, start = int(cap.n_tokens[d]), int(mask[d].argmax())
            assert np.array_equal(cap.outputs[d, :n], eager[d, start : start + n])
        caps[side] = cap
    for stat in FLOATS:
        # Sums of float32 logs over rows padded differently: equal to float32 rounding. The
        # balance is a difference of means of logs of size ~10, so ~1e-6 of that.
        atol = 1e-5 if stat == "sink_balance" else 1e-6
        np.testing.assert_allclose(
            getattr(caps["left"], stat), getattr(caps["right"], stat), rtol=1e-6, atol=atol
        )
    cap = caps["right"]
    keep = np.broadcast_to(cap.query_mask[:, None, None, :], cap.sink_mass.shape)
    per_layer = np.array(
        [cap.sink_mass[:, layer][keep[:, layer]].mean() for layer in range(cap.n_layers)]
    )
    if name == "smollm2":
        assert cap.sink_mass.shape[1:3] == (30, 9)
        assert per_layer[12:].mean() > 0.4
    else:
        assert cap.sink_mass.shape[1:3] == (6, 12)
        assert per_layer[1:5].mean() > 0.3
    auto = capture(model, ids, mask, sink="auto")
    assert [s.tolist() for s in auto.sink_positions] == [[0], [0]]
    outputs = capture(
        model, ids, mask, sink=sink, tokenizer=tokenizer, mode="outputs", zeros="floor"
    )
    for stat in FLOATS:
        np.testing.assert_allclose(getattr(outputs, stat), getattr(cap, stat), atol=1e-5)
