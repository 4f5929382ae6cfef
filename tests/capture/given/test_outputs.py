"""capture(mode="outputs"): attention read from eager output_attentions, and its zero policy."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture, pad  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


def tiny(family: str):
    return _tiny(family, positions=512)


def docs(lengths=(12, 9, 5), seed=1):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=generator).tolist() for n in lengths]


def raises(call, message):
    with pytest.raises(AttncodaError) as info:
        call()
    assert str(info.value) == message


def test_outputs_mode_matches_routed():
    model = tiny("llama")
    ids, mask = pad(docs(), 0, left=True)
    routed = capture(model, ids, mask, sink="0,1", record_rows="all")
    eager = capture(model, ids, mask, sink="0,1", record_rows="all", mode="outputs")
    assert eager.mode == "outputs" and eager.n_floored == 0
    assert model.config._attn_implementation == "sdpa"
    for name in FLOATS:
        np.testing.assert_allclose(getattr(eager, name), getattr(routed, name), atol=1e-5)
    assert np.array_equal(eager.n_keys, routed.n_keys)
    for ours, theirs in zip(eager.rows, routed.rows, strict=True):
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_unroutable_model_falls_back_to_outputs_unless_routing_is_forced():
    model = tiny("bloom")
    ids, mask = pad(docs(), 0, left=True)
    raises(
        lambda: capture(model, ids, mask, mode="attention"),
        "BloomForCausalLM does not route its attention through transformers' "
        "AttentionInterface, so capture cannot read its scores: use mode='outputs' (eager "
        "output_attentions with an explicit zero policy)",
    )
    cap = capture(model, ids, mask, mode="outputs")
    fallback = capture(model, ids, mask)
    assert fallback.mode == cap.mode == "outputs"
    np.testing.assert_array_equal(fallback.entropy, cap.entropy)  # the same eager pass
    assert cap.causal and cap.model_class == "BloomForCausalLM"
    for name in FLOATS:
        assert np.isfinite(getattr(cap, name)).all()
    np.testing.assert_allclose(
        cap.sink_mass[:, :, :, 0][cap.query_mask[:, None, None, 0].repeat(2, 1).repeat(4, 2)], 1.0
    )


def test_zero_policy():
    model = tiny("gpt_neo")  # its local layer (window 4) returns exact zeros
    ids = torch.tensor([docs((9,))[0]])
    raises(
        lambda: capture(model, ids, mode="outputs"),
        "attention probability is exactly 0 at layer 1, head 0, document 0, query_pos 4, "
        "key_pos 0: its log is -inf; pass zeros='floor' to clip zeros to 1.17549e-38 (the "
        "smallest normal float32) and count them",
    )
    cap = capture(model, ids, mode="outputs", zeros="floor")
    assert cap.n_floored == 4 * (9 - 4) * (9 - 4 + 1) // 2
    assert cap.zeros == "floor"
    for name in FLOATS:
        assert np.isfinite(getattr(cap, name)).all()
