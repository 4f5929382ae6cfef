"""The compiled fused kernel on a CUDA device (``pytest -m gpu``; ``bench/gpu.py`` runs
them): against the exact path, on random layers shaped like three model families, within
the compiled kernel's derived bound (docs/design.md, "Bounds per kernel").

- Llama-3-8B: 32 query heads, 8 key/value heads, head dim 128, causal;
- Gemma 3: a sliding window of 512, head dim 256, Gemma's scaling, and a second sink key
  in each document's middle (after the prefix: the kernel's per-tile sink masks);
- GPT-OSS: learned sinks ``s_aux`` (a virtual key), a window of 128, head dim 64;

each in bfloat16 and float32, at L = 1024 and 8192, two documents, the second left-padded.
Every test skips where CUDA is absent, and says so.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none here)"),
]

from attncoda.capture.kernels import (  # noqa: E402
    KernelRefused,
    MaskShape,
    Problem,
    Refused,
    fused_bounds,
    launch_for,
    reference,
    triton_attention,
)

#: name -> (heads, kv heads, head dim, window, learned sinks, scaling)
FAMILIES = {
    "llama3-8b": (32, 8, 128, None, False, 128**-0.5),
    "gemma3": (8, 4, 256, 512, False, 256**-0.5),
    "gpt-oss": (16, 2, 64, 128, True, 64**-0.5),
}
COMPARED = ("sink_mass", "entropy", "content_entropy", "within_sink_entropy", "sink_balance")
PAD = 37  # document 1 is left-padded by this many keys
ROWS = 512  # queries of the float64 reference at a time


def layer(family: str, length: int, dtype, seed: int = 0):
    """Random queries, keys and values of one layer, key 0 of each document a sink."""
    heads, kv, d, window, learned, scaling = FAMILIES[family]
    generator = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((2, heads, length, d), generator=generator, device="cuda")
    k = torch.randn((2, kv, length, d), generator=generator, device="cuda")
    v = torch.randn((2, kv, length, d), generator=generator, device="cuda")
    # Key 0 (key PAD in the padded document) aligned with the queries of its group.
    mean = q.reshape(2, kv, heads // kv, length, d).mean((2, 3))
    k[:, :, 0] = 3.0 * mean / d**0.5
    k[1, :, PAD] = 3.0 * mean[1] / d**0.5
    lo = torch.tensor([0, PAD], dtype=torch.int32, device="cuda")
    hi = torch.full((2,), length, dtype=torch.int32, device="cuda")
    sink = torch.zeros((2, length), dtype=torch.bool, device="cuda")
    sink[0, 0] = sink[1, PAD] = True
    if family == "gemma3":
        # A sink key after the prefix ([SEP]-like): masked only in the key tiles holding it.
        sink[:, length // 2] = True
    s_aux = torch.linspace(-1.0, 3.0, heads, device="cuda") if learned else None
    mask = MaskShape(lo, hi, True, window)
    return q.to(dtype), k.to(dtype), v.to(dtype), mask, sink, s_aux, scaling


@pytest.mark.parametrize("length", [1024, 8192])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_compiled_kernel_against_the_exact_path(family, dtype, length):
    # The exact path's definition (scores, log-softmax, row_statistics) in float64, ROWS
    # queries at a time; every statistic and the output within the compiled kernel's bound.
    torch_dtype = getattr(torch, dtype)
    q, k, v, mask, sink, s_aux, scaling = layer(family, length, torch_dtype)
    heavy = s_aux is not None or family == "gemma3"  # learned sinks; a sink after the prefix
    config = launch_for(q.device, torch_dtype, q.shape[-1], heavy)
    if isinstance(config, Refused):  # the table refuses it: the kernel says so, by name
        with pytest.raises(KernelRefused, match=config.why):
            triton_attention(q, k, v, scaling=scaling, sink=sink, shape=mask, s_aux=s_aux)
        return
    with torch.inference_mode():
        out, got = triton_attention(q, k, v, scaling=scaling, sink=sink, shape=mask, s_aux=s_aux)
        assert bool(torch.isfinite(out).all())
        eps = torch.finfo(torch_dtype).eps * float(v.double().abs().max())
        for r0 in range(0, length, ROWS):
            rows = slice(r0, min(length, r0 + ROWS))
            qb = q[:, :, rows]
            # Queries r0.. of a causal layer: the key offset keeps their positions.
            ref_out, ref, z, content, visible = _reference_rows(
                qb, k, v, mask, sink, scaling, s_aux, r0
            )
            problem = Problem(qb, k, v, mask, sink, scaling, s_aux=s_aux)
            limits = fused_bounds(problem, z, content, visible, compiled=config.precision)
            seen = visible.any(-1).expand_as(ref["sink_mass"])
            for name in COMPARED:
                err = (got[name][:, :, rows] - ref[name]).abs()
                assert bool((err[seen] <= limits[name][seen]).all()), (
                    name, float(err[seen].max()), float(limits[name][seen].min())
                )  # fmt: skip
            err = (out[:, :, rows].double() - ref_out).abs().amax(-1)
            assert bool((err[seen] <= limits["output"][seen] + 2 * eps).all()), float(err.max())


def _reference_rows(query, key, value, shape, sink, scaling, s_aux, first):
    """:func:`attncoda.capture.kernels.reference` for the queries ``first..`` of a causal
    layer: their keys are all keys up to the last of them."""
    stop = first + query.shape[2]
    sub = MaskShape(shape.lo, torch.clamp(shape.hi, max=stop), shape.causal, shape.window)
    keys, values = key[:, :, :stop], value[:, :, :stop]
    return reference(Problem(query, keys, values, sub, sink[:, :stop], scaling, s_aux=s_aux))
