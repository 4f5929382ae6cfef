"""The fast kernels of ``method="fast"``: each layer's row statistics without the attention
matrix.

What it holds:

- the SDPA path (PyTorch's fused attention called twice, :func:`fast_attention`);
- the one-pass Triton kernel (:func:`fused_attention`, its ``@triton.jit`` source) and the
  choice between the two (:func:`resolve_kernel`, :func:`triton_available`);
- the mask geometry the kernels read (:func:`boolean_mask`, :func:`read_mask`,
  :func:`mask_shape`);
- the per-layer recorder glue (:func:`record_sdpa_layer`, :func:`record_triton_layer`);
- the error bounds of the fast path against the exact one (:func:`fast_bounds` and kin);
- the fused kernel's launch table per (architecture, dtype, head dim), and its offline
  compile for CUDA targets without a GPU (:func:`launch_config`, :func:`compile_offline`).

What it may import: :mod:`attncoda.capture.stats`, :mod:`attncoda.capture.names`,
:mod:`attncoda._errors`, torch (and triton, lazily).
"""

from __future__ import annotations

from ._bounds import (
    FLOAT64_ROUNDOFF,
    UNIT_ROUNDOFF,
    difference_bounds,
    exact_bounds,
    fast_bounds,
    float64_part,
    fused_bounds,
    score_perturbation,
    score_scale,
)
from ._configs import (
    ARCHITECTURES,
    DTYPES,
    FLAGS,
    HEAD_DIMS,
    LaunchConfig,
    Refused,
    architecture_of,
    compile_offline,
    compiled_kernels,
    launch_config,
)
from ._fused import (
    KernelRefused,
    MaskShape,
    fused_attention,
    interpreting,
    launch_for,
    mask_shape,
    resolve_kernel,
    triton_available,
)
from ._fused import record_layer as record_triton_layer
from ._masks import MASK_ROWS, boolean_mask
from ._sdpa import FAST_STATISTICS, fast_attention, read_mask, visible_keys
from ._sdpa import record_layer as record_sdpa_layer
from ._select import checked_configurations, first_use_check, reference

__all__ = [
    "ARCHITECTURES",
    "DTYPES",
    "FAST_STATISTICS",
    "FLAGS",
    "HEAD_DIMS",
    "KernelRefused",
    "LaunchConfig",
    "Refused",
    "architecture_of",
    "compile_offline",
    "compiled_kernels",
    "launch_config",
    "launch_for",
    "FLOAT64_ROUNDOFF",
    "MASK_ROWS",
    "UNIT_ROUNDOFF",
    "MaskShape",
    "boolean_mask",
    "checked_configurations",
    "difference_bounds",
    "exact_bounds",
    "fast_attention",
    "fast_bounds",
    "first_use_check",
    "float64_part",
    "fused_attention",
    "fused_bounds",
    "interpreting",
    "mask_shape",
    "read_mask",
    "reference",
    "record_sdpa_layer",
    "record_triton_layer",
    "resolve_kernel",
    "score_perturbation",
    "score_scale",
    "triton_available",
    "visible_keys",
]
