"""The fast kernels of ``method="fast"``: each layer's row statistics without the attention
matrix.

What it holds:

- the SDPA path (PyTorch's fused attention called twice, :func:`fast_attention`);
- the one-pass Triton kernel (:func:`fused_attention`, its ``@triton.jit`` source, and
  whether triton runs here: :func:`triton_available`, :func:`interpreting`);
- the mask geometry both read (:func:`boolean_mask`, :func:`read_mask`, :class:`MaskShape`,
  :func:`mask_shape`), read once per mask in a forward pass;
- kernel selection, in one place: :func:`resolve_kernel` (which kernel serves a device) and
  :func:`record_layer` (which kernel runs a routed layer, with the recorder glue they share),
  and the fused kernel's first-use check under ``"auto"`` (:func:`first_use_check`);
- the error bounds of the fast path against the exact one (:func:`fast_bounds` and kin),
  and of the fused kernel (:func:`fused_bounds`, compiled terms included);
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
from ._check import checked_configurations, first_use_check, reference
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
from ._fused import KernelRefused, fused_attention, launch_for
from ._masks import MASK_ROWS, MaskShape, boolean_mask, mask_shape, read_mask
from ._sdpa import FAST_STATISTICS, fast_attention, visible_keys
from ._select import record_layer, resolve_kernel
from ._triton import interpreting, triton_available

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
    "record_layer",
    "reference",
    "resolve_kernel",
    "score_perturbation",
    "score_scale",
    "triton_available",
    "visible_keys",
]
