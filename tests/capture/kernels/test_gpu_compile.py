"""The fused kernel compiled for CUDA targets without a GPU (docs/design.md, "GPU kernels
before a GPU"): a representative subset of the launch table (sm_80 and sm_90, float32 and
bfloat16, head dims 64, 128 and 256) fits each architecture's shared memory and spills
nothing; offsets are 64-bit in the compiled IR; two lengths share one compile.

The full matrix is ``bench/gpu_compile.py``; both compile through ``bench/_offline.py``. The
compiles run in two worker processes (Triton's compiler and ptxas are single-threaded);
nothing here needs a GPU or runs a kernel.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("triton.backends.nvidia")

from attncoda.capture.kernels import ARCHITECTURES, LaunchConfig, Refused, launch_config  # noqa: E402
from attncoda.capture.kernels._configs import Variant  # noqa: E402

_SPEC = importlib.util.spec_from_file_location(
    "bench_offline", Path(__file__).resolve().parents[3] / "bench" / "_offline.py"
)
offline = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(offline)

#: Every compile-time switch at once (the most code one kernel carries), in the heavy
#: entries; the plain entries of sm_90's bfloat16 (the blocks timed on a GPU) in a window.
HEAVY = ("causal", "window", "softcap", "sink", "learned", "sparse")
PLAIN = ("causal", "window")
SUBSET = [
    (arch, dtype, head_dim, HEAVY)
    for arch in ("sm_80", "sm_90")
    for dtype in ("float32", "bfloat16")
    for head_dim in (64, 128, 256)
] + [("sm_90", "bfloat16", head_dim, PLAIN) for head_dim in (128, 256)]


def _one(job):
    arch, dtype, head_dim, flags = job
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    variant = Variant.of(flags)
    config = launch_config(arch, dtype, head_dim, variant.heavy)
    if isinstance(config, Refused):
        return job, config, None
    launch = offline.llama_launch(dtype, head_dim, variant, config)
    return job, config, offline.compile_offline(arch, launch)


@pytest.fixture(scope="module")
def compiled_subset():
    """``{(arch, dtype, head_dim): (config, figures or None)}`` for :data:`SUBSET`."""
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        return {job: (config, found) for job, config, found in pool.map(_one, SUBSET)}


def test_the_subset_fits_shared_memory_and_spills_nothing(compiled_subset):
    compiles = [found for _, found in compiled_subset.values() if found is not None]
    assert len(compiles) >= len(SUBSET) - sum(
        isinstance(config, Refused) for config, _ in compiled_subset.values()
    )
    for (arch, dtype, head_dim, _), (config, found) in compiled_subset.items():
        if isinstance(config, Refused):
            # Only float32 may be refused, and the refusal names the architecture.
            assert dtype == "float32" and arch in config.why, (arch, dtype, head_dim)
            continue
        assert isinstance(config, LaunchConfig)
        where = (arch, dtype, head_dim, config)
        assert found["shared_bytes"] <= ARCHITECTURES[arch], (where, found["shared_bytes"])
        assert found["spill_bytes"] == 0, (where, found["spill_bytes"])
        assert 0 < found["registers"] <= 255, where


def test_bfloat16_is_never_refused():
    for arch in ARCHITECTURES:
        for dtype in ("bfloat16", "float16"):
            for head_dim in (64, 80, 96, 128, 256):
                for heavy in (False, True):
                    found = launch_config(arch, dtype, head_dim, heavy)
                    assert isinstance(found, LaunchConfig)


def test_offsets_are_64_bit_in_the_compiled_ir(compiled_subset):
    # Triton's IR of a compiled kernel: the batch/head bases of the queries, keys, values,
    # outputs and sink flags are int64 offsets of the arguments; the per-row offsets of the
    # query, key, value and output tiles and of the per-row outputs are int64 tensors. Only
    # offsets inside one tile (a head dim) and those bounded by the batch, the heads or the
    # sink count stay int32.
    _, found = compiled_subset[("sm_80", "bfloat16", 128, HEAVY)]
    ttir = found["ttir"]
    bases = re.findall(r"tt\.addptr %(Q|K|V|OUT|IS_SINK|TILE_SINK), %\S+ : \S+, (\S+)", ttir)
    assert {name for name, _ in bases} == {"Q", "K", "V", "OUT", "IS_SINK", "TILE_SINK"}, bases
    assert all(kind == "i64" for _, kind in bases), bases
    rows = re.findall(
        r"tt\.addptr %\S+, %\S+ : tensor<\d+x1x!tt\.ptr<(bf16|f32)>>, tensor<\d+x1x(i\d+)>", ttir
    )
    assert len(rows) >= 4 and all(kind == "i64" for _, kind in rows), rows  # q, k, v, out
    per_row = re.findall(
        r"tt\.addptr %\S+, %\S+ : tensor<\d+x!tt\.ptr<f32>>, tensor<\d+x(i\d+)>", ttir
    )
    assert per_row.count("i64") >= 3  # lse, ent, sum_z (and the sink scores)


def test_two_lengths_and_sink_counts_share_one_compile():
    # The kernel's own launch path (warmup, on a driver for sm_80 without a device): the
    # lengths, the offset and the sink count are not specialised, so documents of 1000 and
    # 4096 tokens with one or three sink keys run one compiled kernel.
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    config = launch_config("sm_80", "bfloat16", 64)
    variant = Variant.of(("causal",))
    before = offline.compiled_kernels("sm_80")
    one = offline.llama_launch("bfloat16", 64, variant, config, q_len=1000, n_sink=1)
    three = offline.llama_launch("bfloat16", 64, variant, config, q_len=4096, n_sink=3)
    assert offline.warm("sm_80", one) is offline.warm("sm_80", three)
    assert offline.compiled_kernels("sm_80") == before + 1
