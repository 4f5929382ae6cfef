"""Head ablation and gates inside the routed attention function, against hand-written hooks."""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import capture, forward  # noqa: E402
from attncoda.capture.ablation._ablation import (  # noqa: E402
    ablate,
    head_counts,
    head_gates,
    head_labels,
    parse_heads,
)
from attncoda.capture.routing import routed  # noqa: E402
from attncoda.capture.stats import PassPlan, Recorder  # noqa: E402
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

HEAD_DIM = 8  # hidden 32 / 4 heads


def tiny(family: str, seed: int = 0):
    return _tiny(family, seed=seed, positions=256, eager=True)


def out_projection(model, layer: int):
    """The attention output projection of ``layer``: its input is the heads' outputs."""
    if isinstance(model, transformers.LlamaForCausalLM):
        return model.model.layers[layer].self_attn.o_proj
    if isinstance(model, transformers.GPTNeoXForCausalLM):
        return model.gpt_neox.layers[layer].attention.dense
    return model.transformer.h[layer].attn.c_proj


def batch():
    """Two documents of 11 and 8 tokens, the second left-padded by 3."""
    rng = np.random.default_rng(1)
    ids = torch.as_tensor(rng.integers(2, VOCAB, size=(2, 11)))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    return ids, mask


def logits(model, ids, mask):
    return forward(model, ids, mask).logits


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt2"])
def test_no_ablation_is_bit_identical_to_eager(family):
    model = tiny(family)
    ids, mask = batch()
    eager = logits(model, ids, mask)
    with ablate(model, {}, "zero"):
        routed_out = logits(model, ids, mask)
    with head_gates(model, torch.ones(2, 4)):
        gated = logits(model, ids, mask)
    assert torch.equal(eager, routed_out)
    assert torch.equal(eager, gated)
    assert model.config._attn_implementation == "eager"


@pytest.mark.parametrize("family", ["llama", "gpt_neox", "gpt2"])
@pytest.mark.parametrize(("layer", "heads"), [(0, [2]), (1, [1]), (1, [0, 3])])
def test_zero_equals_zeroing_the_heads_slice_of_the_output_projection(family, layer, heads):
    model = tiny(family)
    ids, mask = batch()

    def zero_slice(module, args):
        x = args[0].clone()
        for head in heads:
            x[..., head * HEAD_DIM : (head + 1) * HEAD_DIM] = 0.0
        return (x,)

    handle = out_projection(model, layer).register_forward_pre_hook(zero_slice)
    try:
        reference = logits(model, ids, mask)
    finally:
        handle.remove()
    with ablate(model, {layer: heads}, "zero"):
        ablated = logits(model, ids, mask)
    assert float((ablated - reference).abs().max()) == 0.0
    assert not torch.equal(ablated, logits(model, ids, mask))


def head_outputs_and_values(model, layer, heads, mode, ids, mask):
    """Under ``ablate``: (o_proj input, v_proj output) of ``layer`` for Llama."""
    seen = {}
    attn = model.model.layers[layer].self_attn
    hooks = [
        attn.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("o", a[0].clone())),
        attn.v_proj.register_forward_hook(lambda m, a, o: seen.__setitem__("v", o.clone())),
    ]
    try:
        if mode is None:
            forward(model, ids, mask)
        else:
            with ablate(model, {layer: heads}, mode):
                forward(model, ids, mask)
    finally:
        for hook in hooks:
            hook.remove()
    b, q, _ = seen["o"].shape
    outputs = seen["o"].reshape(b, q, 4, HEAD_DIM)
    values = seen["v"].reshape(b, q, 2, HEAD_DIM)  # 2 kv heads: head h reads kv head h // 2
    return outputs, values


@pytest.mark.parametrize("layer", [0, 1])
def test_uniform_is_the_mean_of_the_visible_values(layer):
    model = tiny("llama")
    ids, mask = batch()
    outputs, values = head_outputs_and_values(model, layer, [1, 2], "uniform", ids, mask)
    plain, _ = head_outputs_and_values(model, layer, [], None, ids, mask)
    for doc in range(2):
        start = int(mask[doc].argmax())
        for query in range(start, ids.shape[1]):
            for head in (1, 2):
                expected = values[doc, start : query + 1, head // 2].double().mean(0)
                got = outputs[doc, query, head].double()
                assert torch.allclose(got, expected, rtol=0, atol=1e-6)
    # The other heads keep their outputs exactly.
    assert torch.equal(outputs[:, :, [0, 3]], plain[:, :, [0, 3]])


@pytest.mark.parametrize("layer", [0, 1])
def test_sink_is_the_value_at_the_first_real_token(layer):
    model = tiny("llama")
    ids, mask = batch()
    outputs, values = head_outputs_and_values(model, layer, [3], "sink", ids, mask)
    plain, _ = head_outputs_and_values(model, layer, [], None, ids, mask)
    for doc in range(2):
        start = int(mask[doc].argmax())
        for query in range(start, ids.shape[1]):
            assert torch.equal(outputs[doc, query, 3], values[doc, start, 1])
    assert torch.equal(outputs[:, :, :3], plain[:, :, :3])


def test_padding_side_does_not_change_the_ablated_logits():
    model = tiny("llama")
    ids, mask = batch()
    right_ids = torch.zeros_like(ids)
    right_ids[0], right_ids[1, :8] = ids[0], ids[1, 3:]
    right_mask = torch.zeros_like(mask)
    right_mask[0], right_mask[1, :8] = 1, 1
    for mode in ("zero", "uniform", "sink"):
        with ablate(model, {0: [0], 1: [2, 3]}, mode):
            left = logits(model, ids, mask)
            right = logits(model, right_ids, right_mask)
        assert torch.allclose(left[1, 3:], right[1, :8], atol=1e-5)
        assert torch.allclose(left[0], right[0], atol=1e-5)


def test_gates_scale_heads_and_zero_gates_equal_zero_ablation():
    model = tiny("gpt_neox")
    ids, mask = batch()
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    with head_gates(model, gates):
        gated = logits(model, ids, mask)
    with ablate(model, {1: [2]}, "zero"):
        zeroed = logits(model, ids, mask)
    assert float((gated - zeroed).abs().max()) == 0.0
    per_doc = torch.ones(2, 2, 4)
    per_doc[1, 1, 2] = 0.0  # only document 1 loses head 1.2
    with head_gates(model, per_doc):
        mixed = logits(model, ids, mask)
    assert torch.equal(mixed[0], logits(model, ids, mask)[0])
    assert torch.equal(mixed[1], zeroed[1])


def test_gates_carry_gradients():
    model = tiny("llama")
    ids, mask = batch()
    gates = torch.ones(2, 4, requires_grad=True)
    with head_gates(model, gates):
        out = model(input_ids=ids, attention_mask=mask).logits
    out.sum().backward()
    assert gates.grad is not None and gates.grad.shape == (2, 4)
    assert bool((gates.grad != 0).all())


def test_ablation_nests_inside_capture_and_keeps_the_recorder():
    model = tiny("llama")
    ids, mask = batch()
    plain = capture(model, ids, mask, record_rows="none", keep_outputs=True, method="exact")
    with ablate(model, {1: [0]}, "zero"):
        ablated = capture(model, ids, mask, record_rows="none", keep_outputs=True, method="exact")
    # Layer 0 is untouched by ablating layer 1; the logits change.
    assert np.array_equal(plain.entropy[:, 0], ablated.entropy[:, 0])
    assert np.array_equal(plain.entropy[:, 1], ablated.entropy[:, 1])  # scores come before
    assert not np.array_equal(plain.outputs, ablated.outputs)
    plan = PassPlan(mask.bool(), mask.argmax(-1), mask.bool() & False, [torch.zeros(0)] * 2)
    recorder = Recorder(plan)
    with routed(model, recorder), ablate(model, {0: [1]}, "zero"):
        forward(model, ids, mask)
    assert len(recorder.stats) == 2


@pytest.mark.parametrize("mode", ["zero", "uniform", "sink"])
def test_a_fast_capture_of_an_unpadded_batch_counts_each_ablated_layer_once(mode):
    # Without padding the fast path's masks are skipped (plain causal rows); an ablated
    # layer takes the exact path with its causal pattern made explicit. Each layer is one
    # attention call of the forward pass: a second count would name a third layer of two.
    model = tiny("llama")
    ids = batch()[0][:1]
    with ablate(model, {0: [1], 1: [0, 2]}, mode):
        fast = capture(model, ids, method="fast", record_rows="none", keep_outputs=True)
        eager = logits(model, ids, torch.ones_like(ids))
    assert fast.kernel == "exact" and fast.forward == "eager"  # every layer is ablated
    # The exact path on a boolean causal mask is eager's op sequence on the additive one.
    assert np.array_equal(fast.outputs, eager.numpy())


@pytest.mark.parametrize("method", ["exact", "fast"])
def test_an_ablation_and_a_recording_nest_either_way(method):
    # Each rebinds the model's route, keeping what the other bound: the same edited pass,
    # recorded, whichever context is outside.
    from attncoda.capture.live import recording

    model = tiny("llama")
    ids, mask = batch()
    found = []
    for recording_outside in (True, False):
        with contextlib.ExitStack() as stack:
            contexts = [recording(model, method=method), ablate(model, {0: [1]}, "uniform")]
            entered = [stack.enter_context(c) for c in contexts[:: 1 if recording_outside else -1]]
            logits = forward(model, ids, mask).logits
        rec = entered[0] if recording_outside else entered[1]
        found.append((logits, rec.capture().entropy))
    (a, entropy_a), (b, entropy_b) = found
    assert torch.equal(a, b) and np.array_equal(entropy_a, entropy_b)
    if method == "exact":  # the recorded pass is the ablated pass, bit for bit
        with ablate(model, {0: [1]}, "uniform"):
            assert torch.equal(forward(model, ids, mask).logits, a)


def test_inner_ablate_keeps_outer_gates():
    model = tiny("llama")
    ids, mask = batch()
    gates = torch.ones(2, 4)
    gates[0, 0] = 0.0
    with head_gates(model, gates), ablate(model, {1: [1]}, "zero"):
        both = logits(model, ids, mask)
    with ablate(model, {0: [0], 1: [1]}, "zero"):
        reference = logits(model, ids, mask)
    assert float((both - reference).abs().max()) == 0.0


def test_parse_heads_and_labels():
    assert parse_heads("3.1, 4.2,3.5,3.1") == {3: [1, 5], 4: [2]}
    assert parse_heads("") == {}
    assert head_labels({3: [1, 5], 4: [2]}) == "3.1,3.5,4.2"
    assert head_labels([(4, 2), (0, 1)]) == "4.2,0.1"
    message = "cannot read head '3:1': write heads as 'layer.head', e.g. '3.1,4.2'"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        parse_heads("0.1,3:1")


def test_head_counts():
    assert head_counts(tiny("gpt2")) == (2, 4)


def raises(message: str):
    return pytest.raises(AttncodaError, match=f"^{re.escape(message)}$")


def test_argument_errors():
    model = tiny("llama")
    with raises("unknown ablation mode 'mean': use 'zero', 'uniform' or 'sink'"):
        with ablate(model, {0: [0]}, "mean"):
            pass
    with raises("layer 2 is out of range: LlamaForCausalLM has 2 layers (0..1)"):
        with ablate(model, {2: [0]}):
            pass
    with raises("layer True is out of range: LlamaForCausalLM has 2 layers (0..1)"):
        with ablate(model, {True: [0]}):
            pass
    with raises("head 4 of layer 1 is out of range: LlamaForCausalLM has 4 heads per layer (0..3)"):
        with ablate(model, {1: [0, 4]}):
            pass
    with raises(
        "head -1 of layer 0 is out of range: LlamaForCausalLM has 4 heads per layer (0..3)"
    ):
        with ablate(model, {0: [-1]}):
            pass
    with raises("heads must map a layer to its heads, e.g. {3: [1, 5]}, got list"):
        with ablate(model, [(0, 1)]):
            pass
    shape_message = (
        "gates must be a tensor of shape (layer, head) or (batch, layer, head) = (..., 2, 4) "
        "for LlamaForCausalLM, got {}"
    )
    with raises(shape_message.format((4, 2))):
        with head_gates(model, torch.ones(4, 2)):
            pass
    with raises(shape_message.format((8,))):
        with head_gates(model, torch.ones(8)):
            pass
    with raises(shape_message.format("list")):
        with head_gates(model, [[1.0] * 4] * 2):
            pass
    ids, mask = batch()
    with raises("gates have a batch of 3 documents, the forward pass has 2"):
        with head_gates(model, torch.ones(3, 2, 4)):
            logits(model, ids, mask)


def test_a_submodule_called_directly_is_refused():
    model = tiny("llama")
    ids, _ = batch()
    message = (
        "attention call 2 of one forward pass has 4 heads, but LlamaForCausalLM has 2 layers of "
        "4 heads: ablation counts the attention calls of each forward pass of the model itself "
        "(call the model, not a submodule; cross-attention is not supported)"
    )
    with ablate(model, {0: [0]}):
        with torch.no_grad():
            model.model(input_ids=ids)  # the first call still counts from 0
            with raises(message):
                model.model(input_ids=ids)


def test_unroutable_model_is_refused():
    torch.manual_seed(0)
    config = transformers.BloomConfig(vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=4)
    model = transformers.BloomForCausalLM(config).eval()
    with pytest.raises(AttncodaError, match="^BloomForCausalLM does not route its attention"):
        with ablate(model, {0: [0]}):
            pass
