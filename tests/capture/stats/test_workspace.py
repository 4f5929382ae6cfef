"""The exact path's reused buffers and mask blocks, and the row sums that read unmasked rows."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda.capture import forward  # noqa: E402
from attncoda.capture.routing import routed  # noqa: E402
from attncoda.capture.stats import (  # noqa: E402
    STATISTICS,
    PassPlan,
    Recorder,
    Workspace,  # noqa: E402
    row_statistics,
)
from attncoda.capture.stats import _workspace as workspace_module  # noqa: E402
from tiny_models import VOCAB, tiny  # noqa: E402

MIN = torch.finfo(torch.float32).min


def test_take_reuses_one_buffer_and_grows_it_on_demand():
    space = Workspace()
    first = space.take("scores", (2, 3, 4, 5), torch.float32, torch.device("cpu"), capacity=200)
    smaller = space.take("scores", (2, 3, 4, 4), torch.float32, torch.device("cpu"))
    assert smaller.data_ptr() == first.data_ptr() and smaller.is_contiguous()
    wider = space.take("scores", (2, 3, 4, 8), torch.float32, torch.device("cpu"))
    assert wider.data_ptr() == first.data_ptr()  # 192 elements fit the reserved 200
    grown = space.take("scores", (2, 3, 4, 9), torch.float32, torch.device("cpu"))
    assert grown.shape == (2, 3, 4, 9) and grown.numel() == 216
    assert space.nbytes == 216 * 4
    other = space.take("probs", (2, 3, 4, 5), torch.float32, torch.device("cpu"))
    assert other.data_ptr() != grown.data_ptr()
    doubles = space.take("probs", (2, 3, 4, 5), torch.float64, torch.device("cpu"))
    assert doubles.dtype == torch.float64


def test_a_mask_block_is_derived_once_per_mask_tensor_and_block():
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    additive = torch.zeros(1, 1, 6, 6).masked_fill(~causal, MIN)
    space = Workspace()
    a = space.mask(additive, 2, 4, 4, torch.float32)
    assert space.mask(additive, 2, 4, 4, torch.float32) is a
    assert space.mask(additive.clone(), 2, 4, 4, torch.float32) is not a
    b = space.mask(causal, 2, 4, 4, torch.float32)
    assert torch.equal(a.visible, b.visible) and torch.equal(a.visible, causal[:, :, 2:4, :4])
    assert a.weights.tolist() == [[[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]]
    assert a.counts.tolist() == [[[3, 4]]]


def test_mask_blocks_past_the_budget_are_derived_again(monkeypatch):
    monkeypatch.setattr(workspace_module, "MASK_CACHE_BYTES", 0)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()[None, None]
    space = Workspace()
    a = space.mask(causal, 0, 6, 6, torch.float32)
    b = space.mask(causal, 0, 6, 6, torch.float32)
    assert a is not b and torch.equal(a.weights, b.weights)


def _causal_rows(seed=0, heads=3, queries=9, keys=9):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, heads, queries, keys, generator=generator) * 3
    scores[..., 0] += 4.0
    visible = torch.ones(queries, keys, dtype=torch.bool).tril()[None, None].expand(2, 1, -1, -1)
    masked = scores + torch.zeros(2, 1, queries, keys).masked_fill(~visible, MIN)
    probs = torch.softmax(masked, -1)
    sink = torch.zeros(2, keys, dtype=torch.bool)
    sink[:, 0] = True
    sink[1, 1] = True
    return torch.log_softmax(masked, -1), visible, sink, probs


def test_unmasked_row_sums_agree_with_the_masked_path():
    log_rows, visible, sink, probs = _causal_rows()
    plain = row_statistics(log_rows.clone(), visible, sink, probs=probs)
    masked = row_statistics(log_rows.clone(), visible, sink)
    for name in ("n_keys", "n_sink", "n_zero"):
        assert torch.equal(plain[name], masked[name])
    for name in STATISTICS:
        assert torch.allclose(plain[name], masked[name], atol=2e-6, rtol=0), name
    # And against float64 definitions computed here.
    logp = log_rows.double().masked_fill(~visible, -math.inf)
    p = logp.exp()
    entropy = -(p * torch.where(visible, logp, 0.0)).sum(-1)
    assert torch.allclose(plain["entropy"], entropy, atol=1e-6, rtol=0)
    assert torch.allclose(
        plain["sink_mass"], p[..., 0] + p[..., 1] * sink[:, None, None, 1], atol=1e-6
    )


def test_a_minus_inf_visible_key_sends_the_block_to_the_masked_path():
    log_rows, visible, sink, probs = _causal_rows()
    log_rows[1, 2, 5, 3] = -math.inf  # a visible key of probability exactly 0
    probs[1, 2, 5, 3] = 0.0
    plain = row_statistics(log_rows.clone(), visible, sink, probs=probs)
    masked = row_statistics(log_rows.clone(), visible, sink)
    assert int(plain["n_zero"].sum()) == 1 and int(plain["n_zero"][1, 2, 5]) == 1
    assert int(plain["n_keys"][1, 2, 5]) == 5  # six visible keys, one left out
    for name in STATISTICS:
        assert torch.isfinite(plain[name]).all()
        assert torch.allclose(plain[name], masked[name], atol=2e-6, rtol=0), name


def test_minus_inf_off_the_visible_keys_gives_no_nan():
    log_rows, visible, sink, probs = _causal_rows()
    log_rows = log_rows.masked_fill(~visible, -math.inf)
    out = row_statistics(log_rows, visible, sink, probs=probs)
    for name in STATISTICS:
        assert torch.isfinite(out[name]).all()
    assert int(out["n_zero"].sum()) == 0


def test_every_block_of_every_layer_writes_into_the_same_buffers(monkeypatch):
    model = tiny("llama", torch.float32)
    ids = torch.randint(3, VOCAB, (1, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    model.set_attn_implementation("eager")
    eager = forward(model, ids, mask).logits
    pointers: dict[str, set] = {}
    original = Workspace.take

    def spy(self, slot, *args, **kwargs):
        out = original(self, slot, *args, **kwargs)
        pointers.setdefault(slot, set()).add(out.data_ptr())
        return out

    monkeypatch.setattr(Workspace, "take", spy)
    real = mask.bool()
    sink = torch.zeros_like(real)
    sink[:, 0] = True
    record = [torch.zeros(0, dtype=torch.long)]
    rec = Recorder(PassPlan(real, torch.zeros(1, dtype=torch.long), sink, record, 16))
    with routed(model, rec):
        ours = forward(model, ids, mask).logits
    # Three blocks of 16, 16 and 8 queries in each of two layers: one buffer per slot, its
    # room reserved by the first block for the widest.
    assert set(pointers) == {"scores", "probs", "log_rows"}
    assert all(len(found) == 1 for found in pointers.values())
    assert float((ours - eager).abs().max()) <= 1e-6
    assert torch.isfinite(rec.stats[1]["entropy"]).all()
    # The pass is over: the recorder holds no buffer of it.
    assert rec.workspace.nbytes == 0
