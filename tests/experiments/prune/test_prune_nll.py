"""A window's next-token NLL and the bound of its rounding (prune's ``nll_rounding``), and
the rounding of gradient importance: against float64 recomputations and plain loops."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.experiments.prune import (  # noqa: E402
    LogitRows,
    gradient_importance,
    gradient_rounding,
    logit_rows,
    nll_rounding,
    window_nll,
)
from attncoda.experiments.prune._nll import BLOCK, LAMBDA  # noqa: E402
from tiny_models import tiny  # noqa: E402

U = 2.0**-24


def head_case(seed, vocab=1000, d=96, batch=3, pos=20, bias=False, scale=3.0):
    """A random language-model head, its float32 input and logits, and token ids whose
    last window is padded on the right."""
    gen = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(d, vocab, bias=bias)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, d, generator=gen) / math.sqrt(d) * scale)
        if bias:
            head.bias.copy_(torch.randn(vocab, generator=gen))
    hidden = torch.randn(batch, pos, d, generator=gen) * 4.0
    with torch.no_grad():
        logits = head(hidden)
    ids = torch.randint(0, vocab, (batch, pos), generator=gen)
    mask = torch.ones(batch, pos, dtype=torch.long)
    mask[-1, pos - 5 :] = 0
    norms = head.weight.detach().double().norm(dim=-1)
    if bias:
        norms = torch.sqrt(norms**2 + head.bias.detach().double() ** 2)
    rows = LogitRows(module=head, norms=norms.float(), width=d + bias, unit=U, cap=0.0)
    return head, hidden, logits, ids, mask, rows


def float64_nll(head, hidden, ids, mask):
    """Each window's mean next-token NLL with the head's product and the log-softmax in
    float64 from the same float32 input: what float32 rounds."""
    h = hidden.double()
    z = h @ head.weight.detach().double().T
    if head.bias is not None:
        z = z + head.bias.detach().double()
    logp = torch.log_softmax(z[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    valid = (mask[:, 1:] * mask[:, :-1]).double()
    return (-(logp * valid).sum(-1) / valid.sum(-1)).numpy()


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_bound_covers_the_float32_head_and_log_sum_exp(seed, bias):
    head, hidden, logits, ids, mask, rows = head_case(seed, bias=bias)
    nll, bound = nll_rounding(logits, hidden, ids, mask, rows)
    want = float64_nll(head, hidden, ids, mask)
    moved = np.abs(nll - want)
    assert (moved <= bound).all(), (moved, bound)
    # and it is a bound of that rounding, not of the NLL: well below a nat, above what moved
    assert (bound < 1e-2).all() and (moved > 0).any()


def test_the_nll_is_the_float64_log_softmax_of_the_float32_logits():
    head, hidden, logits, ids, mask, rows = head_case(2, vocab=5000)
    nll, _ = nll_rounding(logits, hidden, ids, mask, rows)
    logp = torch.log_softmax(logits[:, :-1].double(), -1).gather(-1, ids[:, 1:, None])[..., 0]
    valid = (mask[:, 1:] * mask[:, :-1]).double()
    want = (-(logp * valid).sum(-1) / valid.sum(-1)).numpy()
    # the float32 exp and blocked float32 sums: at most u (BLOCK + 1 + log V) nats per token
    np.testing.assert_allclose(nll, want, rtol=0, atol=U * (BLOCK + 1 + math.log(5000)))


def test_the_bound_equals_a_plain_loop_over_tokens():
    head, hidden, logits, ids, mask, rows = head_case(3, vocab=300, d=40, bias=True)
    _, bound = nll_rounding(logits, hidden, ids, mask, rows)
    w = head.weight.detach().double().numpy()
    b = head.bias.detach().double().numpy()
    norms = [math.sqrt(sum(x * x for x in w[j]) + b[j] ** 2) for j in range(300)]
    z_all = logits.double().numpy()
    want = []
    for doc in range(ids.shape[0]):
        per_token = []
        for t in range(1, ids.shape[1]):
            if not (mask[doc, t] and mask[doc, t - 1]):
                continue
            z = z_all[doc, t - 1]
            top = max(z)
            weights = [math.exp(v - top) for v in z]
            total = sum(weights)
            p = [v / total for v in weights]
            y = int(ids[doc, t])
            h_norm = math.sqrt(sum(float(v) ** 2 for v in hidden[doc, t - 1]) + 1.0)
            sensitivity = sum(p[j] * norms[j] for j in range(300)) + (1 - 2 * p[y]) * norms[y]
            product = LAMBDA * math.sqrt(41 + 2) * U * h_norm * sensitivity
            per_token.append(product + U * (BLOCK + 1 + math.log(300)))
        want.append(sum(per_token) / len(per_token))
    # The implementation's p and norms are float32: a bound is good to far fewer digits.
    np.testing.assert_allclose(bound, want, rtol=1e-5)


def test_a_soft_cap_adds_its_own_rounding():
    head, hidden, logits, ids, mask, rows = head_case(4)
    _, bound = nll_rounding(logits, hidden, ids, mask, rows)
    capped = LogitRows(rows.module, rows.norms, rows.width, rows.unit, cap=30.0)
    _, more = nll_rounding(logits, hidden, ids, mask, capped)
    np.testing.assert_allclose(more - bound, 8 * U * 30.0, rtol=1e-9)


def test_window_nll_reads_the_models_head():
    model = tiny("llama", positions=64, eager=True)
    rng = np.random.default_rng(0)
    windows = [rng.integers(0, 120, size=n).tolist() for n in (12, 9, 14)]
    got = window_nll(model, windows, batch_size=2)
    seen = []
    handle = model.lm_head.register_forward_pre_hook(lambda m, a: seen.append(a[0]))
    with torch.no_grad():
        for window in windows:
            ids = torch.as_tensor([window])
            logits = model(input_ids=ids).logits
            nll, bound = nll_rounding(
                logits, seen[-1], ids, torch.ones_like(ids), logit_rows(model)
            )
            index = windows.index(window)
            # one window alone against a padded batch of two: the forward's own rounding
            np.testing.assert_allclose(got.losses[index], nll[0], rtol=1e-5)
            np.testing.assert_allclose(got.rounding[index], bound[0], rtol=1e-5)
    handle.remove()
    rows = logit_rows(model)
    assert rows.width == 32 and rows.unit == U and rows.cap == 0.0 and not rows.bias
    np.testing.assert_allclose(
        rows.norms.double().numpy(),
        model.lm_head.weight.detach().double().norm(dim=-1).numpy(),
        rtol=1e-6,
    )


def test_gradient_rounding_by_hand():
    model = tiny("gpt_neox", positions=64, eager=True)  # 4 heads of 32 / 4 = 8 units
    windows = [[1, 2, 3, 4, 5], [6, 7, 8]]
    importance = gradient_importance(model, windows)
    got = gradient_rounding(importance, model, windows)
    # the gate's gradient sums 5 positions x 8 units; u (N + 2) |I|
    np.testing.assert_allclose(got, U * (5 * 8 + 2) * importance, rtol=1e-15)
    model.config.head_dim = 16
    np.testing.assert_allclose(
        gradient_rounding(importance, model, windows), U * 82 * importance, rtol=1e-15
    )


def test_errors():
    with pytest.raises(
        AttncodaError,
        match=re.escape(
            "Module has no language-model head with a 2-D weight (get_output_embeddings()): "
            "prune bounds each window's NLL through it; use a causal language model of "
            "transformers"
        ),
    ):
        logit_rows(torch.nn.Module())
    head, hidden, logits, ids, mask, rows = head_case(5)
    with pytest.raises(
        AttncodaError,
        match=re.escape(
            "the language-model head read hidden states of shape (3, 19, 96) for logits of "
            "shape (3, 20, 1000): prune bounds the NLL of a head that maps each position's "
            "hidden state to its logits"
        ),
    ):
        nll_rounding(logits, hidden[:, 1:], ids, mask, rows)
