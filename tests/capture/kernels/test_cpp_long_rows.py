"""The ``cpp`` kernel at long rows (capture/kernels/_cpp.py, _cpp.cpp): one synthetic layer
of a few thousand keys (grouped heads, a first-token sink whose score reaches 30 nats above
the content scores, a sliding window, a left-padded document), float32 and bfloat16 inputs.
Its statistics are held per row to float64 statistics of the same rounded queries and keys
within the derived bounds of :func:`attncoda.capture.kernels.fast_bounds`, and its output
to PyTorch's ``scaled_dot_product_attention`` under the same mask. Only the last queries of
each sequence are run (the kernel aligns them with the last keys), so each row is as long as
a causal row at that length and each case takes a second or two."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from attncoda.capture.kernels import (  # noqa: E402
    UNIT_ROUNDOFF,
    MaskShape,
    _cpp,
    cpp,
    cpp_attention,
    fast_bounds,
    float64_part,
    score_perturbation,
)

pytestmark = pytest.mark.skipif(
    cpp.prerequisites() is not None, reason=f"the cpp kernel: {cpp.prerequisites()}"
)

HEAD_DIM = 32
SCALING = HEAD_DIM**-0.5
#: The sink's score against the last query of a document, in nats (the queries' sink
#: component runs from 0 to 1, so a row's sink mass runs from ~1/n to 1 - 1e-9).
SINK_SCORE = 30.0
#: Each document's first real key (document 1 is left-padded): its sink.
LO = (0, 37)


def long_layer(dtype, k_len, q_len=64, heads=4, kv_heads=2, seed=0):
    """``(q, k, v)`` of one layer in ``dtype``: ``q_len`` queries (the last positions) over
    ``k_len`` keys, two documents, grouped heads. Content scores are those of random
    vectors (a standard deviation of ~1.4 nats, the largest ~7); each document's first real
    key scores ``SINK_SCORE * q[..., 0]``, and ``q[..., 0]`` runs from 0 to 1 over the
    queries."""
    g = torch.Generator().manual_seed(seed)
    b = len(LO)
    q = torch.randn(b, heads, q_len, HEAD_DIM, generator=g) * 1.2
    k = torch.randn(b, kv_heads, k_len, HEAD_DIM, generator=g) * 1.2
    v = torch.randn(b, kv_heads, k_len, HEAD_DIM, generator=g)
    q[..., 0] = torch.linspace(0.0, 1.0, q_len)
    k[..., 0] = 0.0
    for doc, first in enumerate(LO):
        k[doc, :, first] = 0.0
        k[doc, :, first, 0] = SINK_SCORE / SCALING
    return q.to(dtype), k.to(dtype), v.to(dtype)


def visible_of(q_len, k_len, window):
    """bool ``(batch, 1, q_len, k_len)``: query ``i`` at key position ``i + k_len - q_len``
    sees keys ``lo <= j <= pos`` within ``window``."""
    keys = torch.arange(k_len)[None, None, None, :]
    pos = torch.arange(q_len)[None, None, :, None] + (k_len - q_len)
    lo = torch.tensor(LO)[:, None, None, None]
    seen = (keys >= lo) & (keys <= pos)
    if window is not None:
        seen = seen & (pos - keys < window)
    return seen


def float64_rows(q, k, v, visible):
    """The float64 statistics of every row, from the rounded inputs themselves: ``n``,
    ``n_sink``, ``A``, ``s``, ``H``, ``H(q)``, ``lse_C``, ``E_q[z]`` and the output
    ``E_p[v]`` (sink included)."""
    group = q.shape[1] // k.shape[1]
    k64 = k.double().repeat_interleave(group, 1)
    v64 = v.double().repeat_interleave(group, 1)
    q64 = q.double()
    z = (q64 @ k64.transpose(-1, -2)) * SCALING
    keys = torch.arange(k.shape[2])
    sink = (keys[None, :] == torch.tensor(LO)[:, None])[:, None, None, :] & visible
    content = visible & ~sink
    lse = torch.logsumexp(z.masked_fill(~visible, -math.inf), -1, keepdim=True)
    log_p = torch.where(visible, z - lse, 0.0)
    p = torch.where(visible, log_p.exp(), 0.0)
    lse_c = torch.logsumexp(z.masked_fill(~content, -math.inf), -1, keepdim=True)
    log_q = torch.where(content, z - lse_c, 0.0)
    p_c = torch.where(content, log_q.exp(), 0.0)
    k_norm = torch.linalg.vector_norm(k64, dim=-1)[:, :, None, :]
    return {
        "n_keys": visible.sum(-1).expand(z.shape[:3]),
        "n_sink": sink.sum(-1).expand(z.shape[:3]),
        "scale": SCALING
        * torch.linalg.vector_norm(q64, dim=-1)
        * torch.where(visible, k_norm, 0.0).amax(-1),
        "sink_mass": (p * sink).sum(-1),
        "entropy": -(p * log_p).sum(-1),
        "content_entropy": -(p_c * log_q).sum(-1),
        "lse_c": lse_c[..., 0],
        "ez": (p_c * z).sum(-1),
        "output": p @ v64,
    }


def sdpa_output(q, k, v, visible):
    """PyTorch's SDPA of the same rounded inputs, in float32, under the same mask."""
    group = q.shape[1] // k.shape[1]
    k32 = k.float().repeat_interleave(group, 1)
    v32 = v.float().repeat_interleave(group, 1)
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k32, v32, attn_mask=visible, scale=SCALING
    )


CASES = {
    # Causal rows of 4,097 to 4,160 keys, each seeing its document's sink.
    "causal": (4160, None),
    # A window of 4,112 keys whose edge passes the sink: the first 16 queries of document
    # 0 see it, the others do not (document 1's later sink is seen by 53).
    "window": (4160, 4112),
    # Rows of 16,321 to 16,384 keys.
    "causal_16k": (16384, None),
}


def run_kernel(q, k, v, window):
    """The kernel on a layer of :func:`long_layer`: its output and statistics, and the
    content pass's ``lse_C`` and ``E_q[z]``."""
    k_len = k.shape[2]
    shape = MaskShape(
        torch.tensor(LO, dtype=torch.int32), torch.full((2,), k_len, dtype=torch.int32),
        True, window,
    )  # fmt: skip
    sink = torch.zeros(2, k_len, dtype=torch.bool)
    sink[torch.arange(2), torch.tensor(LO)] = True
    out, stats = cpp_attention(q, k, v, scaling=SCALING, sink=sink, shape=shape)
    _, lse_c, ez = _cpp.content_pass(q, k, v, shape, torch.tensor(LO)[:, None], SCALING)
    return out, {**stats, "lse_c": lse_c, "ez": ez}


def check_rows(q, k, v, window, out, stats):
    """Each row's statistics within their derived bounds of the float64 ones, and the
    output within its derived tolerance of SDPA's and of float64's."""
    dtype = q.dtype
    visible = visible_of(q.shape[2], k.shape[2], window)
    ref = float64_rows(q, k, v, visible)
    n, a = ref["n_keys"].numpy(), ref["scale"].numpy()
    assert torch.equal(stats["n_keys"], ref["n_keys"])
    assert torch.equal(stats["n_sink"], ref["n_sink"])
    s = ref["sink_mass"].numpy()
    assert s.min() < 1e-3 and 1 - s.max() < 1e-6  # the regimes s ~ 1/n and s -> 1 are there
    bound = fast_bounds(
        n_keys=n, head_dim=HEAD_DIM, scale=a, sink_mass=s, entropy=ref["entropy"].numpy(),
        content_entropy=ref["content_entropy"].numpy(), dtype=dtype,
    )  # fmt: skip
    # The float64 reference rounds too, as the path's own float64 steps at most.
    slack = float64_part(n, a, s)
    eta = score_perturbation(n, HEAD_DIM, a, dtype)
    # lse_C is the log-sum-exp of scores each within eta of their exact value; E_q[z] =
    # lse_C - H(q) moves as H(q) does less the eta of lse_C (fast_bounds' derivation).
    limits = {
        "sink_mass": bound["sink_mass"] + slack,
        "entropy": bound["entropy"] + slack,
        "content_entropy": bound["content_entropy"] + slack,
        "lse_c": eta + slack,
        "ez": bound["content_entropy"] - eta + slack,
    }
    for name, limit in limits.items():
        err = np.abs(stats[name].double().numpy() - ref[name].numpy())
        assert (err <= limit).all(), (name, float(err.max()), float((err / limit).max()))
        assert err.max() > 0  # float32 arithmetic, not a copy of the reference
    # The output against SDPA's. Each is the exact attention of scores moved by at most eta
    # (each weight p_j within 2 eta p_j) plus the rounding of its weighted n-term sum, the
    # division by l and the sink's share (n + d + 4 roundings of terms of size max |v|):
    # |o - o_exact| <= (2 eta + (n + d + 4) u) max |v|, and the two differ by at most twice
    # that. A bfloat16 layer's output is rounded once more to bfloat16 (2**-9 of |o|).
    v_max = float(v.double().abs().max())
    per_path = (2 * eta + (n + HEAD_DIM + 4) * UNIT_ROUNDOFF) * v_max
    got_out = out.double().numpy()  # (batch, head, query_pos, head_dim)
    rounded = 2.0**-9 * np.abs(got_out) if dtype != torch.float32 else 0.0
    diff = np.abs(got_out - sdpa_output(q, k, v, visible).double().numpy())
    assert (diff <= 2 * per_path[..., None] + rounded).all(), float(diff.max())
    exact = np.abs(got_out - ref["output"].numpy())
    assert (exact <= per_path[..., None] + rounded).all(), float(exact.max())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_long_rows_are_within_their_derived_bounds_of_float64(case, dtype):
    k_len, window = CASES[case]
    q, k, v = long_layer(dtype, k_len)
    out, stats = run_kernel(q, k, v, window)
    check_rows(q, k, v, window, out, stats)


#: The kernel under ``ATEN_CPU_CAPABILITY=default``, in a process of its own (the build is
#: chosen once per process): its build's name, and its results on the saved layer.
DEFAULT_BUILD = """
import sys, torch
from attncoda.capture.kernels import _cpp, cpp
from test_cpp_long_rows import run_kernel
q, k, v, window = torch.load(sys.argv[1])
out, stats = run_kernel(q, k, v, window)
torch.save((cpp.vector_width(), _cpp._library().__name__, out, stats), sys.argv[2])
"""


def test_the_portable_build_under_aten_cpu_capability_default(tmp_path):
    # ATen's generic Vectorized<float> (8 floats in an array, std::exp), no -m flag: the
    # same bounds hold. Its first build takes a minute; torch's cache keeps it after.
    import attncoda

    k_len, window = CASES["window"]
    q, k, v = long_layer(torch.bfloat16, k_len)
    torch.save((q, k, v, window), tmp_path / "layer.pt")
    src = str(Path(attncoda.__file__).parents[1])
    paths = [src, str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, "-c", DEFAULT_BUILD, str(tmp_path / "layer.pt"), str(tmp_path / "o.pt")],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    width, name, out, stats = torch.load(tmp_path / "o.pt")
    assert (width, name) == ("default", "attncoda_cpp_default")
    check_rows(q, k, v, window, out, stats)


def test_the_long_row_bounds_catch_a_wrong_mask():
    # Not vacuous: statistics of the same layer with one key block (512 keys) too few in the
    # window, as a wrong skip of a block would give, or with the sink counted as content,
    # leave the bounds the kernel's statistics are held to. (The bounds are worst-case, about
    # 8 n u in lse_C at these lengths, so a single key more or less is within them.)
    k_len, window = CASES["window"]
    q, k, v = long_layer(torch.float32, k_len)
    ref = float64_rows(q, k, v, visible_of(64, k_len, window))
    moved = float64_rows(q, k, v, visible_of(64, k_len, window - _cpp.KV_BLOCK))
    bound = fast_bounds(
        n_keys=ref["n_keys"].numpy(), head_dim=HEAD_DIM, scale=ref["scale"].numpy(),
        sink_mass=ref["sink_mass"].numpy(), entropy=ref["entropy"].numpy(),
        content_entropy=ref["content_entropy"].numpy(),
    )  # fmt: skip
    eta = score_perturbation(ref["n_keys"].numpy(), HEAD_DIM, ref["scale"].numpy())
    lse_err = np.abs(moved["lse_c"].numpy() - ref["lse_c"].numpy())
    assert (lse_err > eta).all()
    s = ref["sink_mass"].numpy()
    seen = ref["n_sink"].numpy() > 0
    # A sink left in the content gives a sink mass of 0, off by s on each row that sees it.
    assert (s > bound["sink_mass"])[seen].all() and seen.sum() > 64
