"""The fast kernels of ``method="fast"``: each layer's row statistics without the attention
matrix.

What it holds:

- the SDPA path (PyTorch's fused attention called twice, :func:`fast_attention`);
- the one-pass Triton kernel (:func:`fused_attention`, its ``@triton.jit`` source) and the
  choice between the two (:func:`resolve_kernel`, :func:`triton_available`);
- the mask geometry the kernels read (:func:`boolean_mask`, :func:`read_mask`,
  :func:`mask_shape`);
- the per-layer recorder glue (:func:`record_sdpa_layer`, :func:`record_triton_layer`);
- the error bounds of the fast path against the exact one (:func:`fast_bounds` and kin).

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
    score_perturbation,
    score_scale,
)
from ._fused import (
    MaskShape,
    fused_attention,
    interpreting,
    mask_shape,
    resolve_kernel,
    triton_available,
)
from ._fused import record_layer as record_triton_layer
from ._masks import MASK_ROWS, boolean_mask
from ._sdpa import FAST_STATISTICS, fast_attention, read_mask, visible_keys
from ._sdpa import record_layer as record_sdpa_layer

__all__ = [
    "FAST_STATISTICS",
    "FLOAT64_ROUNDOFF",
    "MASK_ROWS",
    "UNIT_ROUNDOFF",
    "MaskShape",
    "boolean_mask",
    "difference_bounds",
    "exact_bounds",
    "fast_attention",
    "fast_bounds",
    "float64_part",
    "fused_attention",
    "interpreting",
    "mask_shape",
    "read_mask",
    "record_sdpa_layer",
    "record_triton_layer",
    "resolve_kernel",
    "score_perturbation",
    "score_scale",
    "triton_available",
    "visible_keys",
]
