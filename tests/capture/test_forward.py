"""The forward helpers: padding, positions and keywords of a batch, and the next-token NLL."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture import _capture as capture_module  # noqa: E402
from attncoda.capture._forward import (  # noqa: E402
    check_batch,
    first_position,
    forward,
    forward_kwargs,
    next_token_nll,
    pad,
    position_ids,
)
from tiny_models import VOCAB  # noqa: E402
from tiny_models import tiny as _tiny  # noqa: E402

DOCS = [np.array([5, 6, 7]), np.array([8]), [9, 10]]


def test_pad_right_and_left():
    ids, mask = pad(DOCS, 0, left=False)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0], [9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0]]
    ids, mask = pad(DOCS, 2, left=True)
    assert ids.tolist() == [[5, 6, 7], [2, 2, 8], [2, 9, 10]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1], [0, 1, 1]]
    assert ids.dtype == mask.dtype == torch.long
    assert check_batch(ids, mask)[0].tolist() == ids.tolist()  # a valid batch


def test_check_batch_refuses_a_hole_in_the_mask():
    message = "document 0 has padding between real tokens: pad on the left or the right only"
    with pytest.raises(AttncodaError, match=f"^{re.escape(message)}$"):
        check_batch([[1, 2, 3]], [[1, 0, 1]])


def test_positions_only_for_left_padding():
    model = _tiny("llama")
    _, right = pad(DOCS, 0, left=False)
    _, left = pad(DOCS, 0, left=True)
    assert position_ids(model, right) is None
    assert "position_ids" not in forward_kwargs(model, *pad(DOCS, 0, left=False))
    assert position_ids(model, left).tolist() == [[0, 1, 2], [0, 0, 0], [0, 0, 1]]
    kwargs = forward_kwargs(model, *pad(DOCS, 0, left=True), output_attentions=True)
    assert kwargs["position_ids"].tolist() == [[0, 1, 2], [0, 0, 0], [0, 0, 1]]
    assert kwargs["use_cache"] is False and kwargs["output_attentions"] is True
    # RoBERTa numbers positions from padding_idx + 1.
    roberta = _tiny("roberta", pad_token_id=1)
    assert first_position(roberta) == 2
    assert position_ids(roberta, left).tolist() == [[2, 3, 4], [1, 1, 2], [1, 2, 3]]


def test_next_token_nll_by_hand():
    # Two-token vocabulary, uniform logits: every prediction costs ln 2.
    logits = torch.zeros((1, 3, 2))
    ids = torch.tensor([[0, 1, 0]])
    mask = torch.ones_like(ids)
    assert next_token_nll(logits, ids, mask).tolist() == pytest.approx([math.log(2)], abs=1e-7)
    # A certain prediction (logit gap 100) costs about e^-100: 0 in float32; padding is out.
    logits = torch.tensor([[[100.0, 0.0], [0.0, 0.0], [5.0, 5.0]]])
    ids = torch.tensor([[1, 0, 1]])
    got = next_token_nll(logits, ids, torch.tensor([[1, 1, 0]]))
    assert got.dtype == torch.float32
    assert got.tolist() == [0.0]


def test_next_token_nll_matches_cross_entropy_on_a_padded_batch():
    model = _tiny("llama")
    docs = [np.arange(3, 3 + n) % VOCAB for n in (7, 4, 9)]
    ids, mask = pad(docs, 0, left=False)
    got = next_token_nll(forward(model, ids, mask).logits, ids, mask)
    for d, doc in enumerate(docs):
        alone = torch.as_tensor(doc)[None]
        logits = forward(model, alone, torch.ones_like(alone)).logits[0, :-1].double()
        want = torch.nn.functional.cross_entropy(logits, alone[0, 1:])
        # float32 logsumexp against a float64 reference of the same model's logits: the
        # rounding of a 120-way logsumexp is ~1e-7 nats, and a padded batch changes the
        # logits only by the blocking of its matmuls (~1e-6).
        assert float(got[d]) == pytest.approx(float(want), abs=1e-5)


def test_the_capture_module_serves_the_forward_helpers():
    for name in ("check_batch", "first_position", "forward_kwargs", "position_ids"):
        assert getattr(capture_module, name) is globals()[name]


def test_without_logits_a_language_model_projects_only_the_last_position():
    model = _tiny("llama")
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    assert "logits_to_keep" not in forward_kwargs(model, ids, mask)
    assert forward_kwargs(model, ids, mask, logits=False)["logits_to_keep"] == 1
    full = forward(model, ids, mask)
    last = forward(model, ids, mask, logits=False)
    assert full.logits.shape == (1, 4, VOCAB)
    assert last.logits.shape == (1, 1, VOCAB)
    # The same forward pass up to the head; the head's matmul over one row instead of four
    # may round differently (BLAS picks its kernel by shape), hence a float32 tolerance.
    torch.testing.assert_close(last.logits[0, -1], full.logits[0, -1], rtol=1e-5, atol=1e-6)


def test_an_encoder_takes_no_logits_to_keep():
    model = _tiny("bert")
    ids = torch.tensor([[5, 6, 7]])
    assert "logits_to_keep" not in forward_kwargs(model, ids, torch.ones_like(ids), logits=False)


def test_capture_statistics_do_not_depend_on_keeping_the_outputs():
    from attncoda.capture import capture_windows

    model = _tiny("llama")
    windows = [[5, 6, 7, 8, 9], [10, 11, 12]]
    kept = capture_windows(model, windows, keep_outputs=True)
    dropped = capture_windows(model, windows)
    assert kept.outputs is not None and dropped.outputs is None
    for name in ("sink_mass", "entropy", "content_entropy", "sink_balance"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(dropped, name))
