"""The two-call SDPA path's CUDA branch, run on the CPU with the private op replaced by a
checker (docs/design.md, "The fast path"): every bias it hands to
``aten._scaled_dot_product_efficient_attention`` has 16-element aligned rows, keys and
values come expanded to the query heads, rows without content give a zero output (never
NaN), and the statistics equal the CPU branch's.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from attncoda._errors import AttncodaError  # noqa: E402
from attncoda.capture.kernels import (  # noqa: E402
    MaskShape,
    _sdpa,  # noqa: E402
    check_dtype,
    sdpa_attention,
)

FLOATS = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")


@pytest.fixture
def cuda_branch(monkeypatch):
    """The CUDA branch on CPU tensors, its op a checker; returns the widths it saw."""
    seen: list[int] = []

    def checker(query, key, value, bias, compute_lse, dropout, causal, scale=None):
        assert compute_lse and dropout == 0.0
        assert query.shape[1] == key.shape[1] == value.shape[1]  # no groups: expanded
        z = torch.matmul(query.double(), key.double().transpose(-1, -2)) * scale
        if bias is not None:
            assert bias.stride(-1) == 1, bias.stride()
            assert bias.stride(-2) % 16 == 0, (bias.shape, bias.stride())
            assert bias.data_ptr() % (16 * bias.element_size()) == 0
            seen.append(bias.shape[-1])
            z = z + bias.double()
        if causal:
            q, k = z.shape[-2:]
            z = z.masked_fill(torch.ones(q, k, dtype=torch.bool).triu(1), -math.inf)
        lse = torch.logsumexp(z, -1)
        # A row the bias masks entirely: NaN output, as a kernel may leave it.
        out = torch.matmul(torch.softmax(z, -1), value.double()).to(query.dtype)
        pad = -(-lse.shape[-1] // 32) * 32 - lse.shape[-1]
        lse = torch.nn.functional.pad(lse, (0, pad)).float()
        return out, lse, torch.tensor(0), torch.tensor(0)

    original = torch.ops.aten._scaled_dot_product_efficient_attention

    class Checked:
        """The checker where the op was; its overloads (read by modules torch imports
        lazily) stay the op's."""

        __call__ = staticmethod(checker)

        def __getattr__(self, name):
            return getattr(original, name)

    monkeypatch.setattr(torch.ops.aten, "_scaled_dot_product_efficient_attention", Checked())
    monkeypatch.setitem(_sdpa.KERNEL_FOR_DEVICE, "cpu", _sdpa._cuda_kernel)
    return seen


def _inputs(b, h, kv, length, d=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, d, generator=generator)
    k = torch.randn(b, kv, length, d, generator=generator)
    v = torch.randn(b, kv, length, d, generator=generator)
    return q, k, v


def _close(a, b):
    out_a, stats_a = a
    out_b, stats_b = b
    assert not bool(torch.isnan(out_b).any())
    torch.testing.assert_close(out_b, out_a, atol=1e-5, rtol=1e-5)
    for name in ("n_keys", "n_sink"):
        assert torch.equal(stats_a[name], stats_b[name])
    for name in FLOATS:
        torch.testing.assert_close(stats_b[name], stats_a[name], atol=1e-5, rtol=1e-5)


def test_every_content_width_from_1_to_130_is_aligned(cuda_branch, monkeypatch):
    # One query per block, query i seeing keys 0..i, key 0 the sink: the blocks' content is
    # keys 1..i, a bias of every width from 1 to 130 (and none for query 0).
    length = 131
    q, k, v = _inputs(1, 4, 2, length, seed=1)
    sink = torch.zeros(1, length, dtype=torch.bool)
    sink[0, 0] = True
    visible = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
    kwargs = dict(query=q, key=k, value=v, scaling=0.35, sink=sink, visible=visible, block_size=1)
    with monkeypatch.context() as undo:
        undo.setitem(_sdpa.KERNEL_FOR_DEVICE, "cpu", _sdpa._cpu_kernel)
        cpu = sdpa_attention(**kwargs)
    _close(cpu, sdpa_attention(**kwargs))
    assert set(range(1, 131)) <= set(cuda_branch)


@pytest.mark.parametrize("kind", ["padded", "window"])
def test_padded_batches_and_sliding_windows_are_aligned(cuda_branch, monkeypatch, kind):
    b, h, kv, length = 2, 4, 2, 45
    q, k, v = _inputs(b, h, kv, length, seed=3)
    lo = torch.tensor([0, 6], dtype=torch.int32)
    hi = torch.full((2,), length, dtype=torch.int32)
    window = 7 if kind == "window" else None
    shape = MaskShape(lo, hi, True, window)
    visible = shape.visible(torch.arange(length), length, 0)
    sink = torch.zeros(b, length, dtype=torch.bool)
    sink[0, 0] = sink[1, 6] = True  # each document's first real token
    kwargs = dict(query=q, key=k, value=v, scaling=0.35, sink=sink, visible=visible, block_size=8)
    with monkeypatch.context() as undo:
        undo.setitem(_sdpa.KERNEL_FOR_DEVICE, "cpu", _sdpa._cpu_kernel)
        cpu = sdpa_attention(**kwargs)
    got = sdpa_attention(**kwargs)
    _close(cpu, got)
    assert cuda_branch  # every bias went through the checker
    # The first real token sees only itself, the sink: no content, a zero content output.
    assert int(got[1]["n_keys"][1, 0, 6]) == 1
    assert bool(torch.isfinite(got[0]).all())


def test_float64_with_the_fast_path_on_cuda_is_refused():
    # The registry's one rule (also per routed layer: tests/capture/kernels/test_registry.py).
    with pytest.raises(AttncodaError, match=r"method='fast' on cuda takes float32"):
        check_dtype("cuda", torch.float64)
    check_dtype("cpu", torch.float64)  # the CPU op takes float64
