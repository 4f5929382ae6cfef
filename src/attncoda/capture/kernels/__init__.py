"""The fast kernels of ``method="fast"``: each layer's row statistics without the attention
matrix.

What it holds:

- the SDPA path (PyTorch's fused attention called twice, :func:`fast_attention`);
- the one-pass Triton kernel (:func:`fused_attention`, its ``@triton.jit`` source, and
  whether triton runs here: :func:`triton_available`, :func:`interpreting`);
- the mask geometry both read (:func:`boolean_mask`, :func:`read_mask`, :class:`MaskShape`,
  :func:`mask_shape`), read once per mask in a forward pass;
- kernel selection, in one place: :func:`resolve_kernel` (which kernel serves a device) and
  :func:`record_layer` (which kernel runs a routed layer, with the recorder glue they share);
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
from ._fused import fused_attention
from ._masks import MASK_ROWS, MaskShape, boolean_mask, mask_shape, read_mask
from ._sdpa import FAST_STATISTICS, fast_attention, visible_keys
from ._select import record_layer, resolve_kernel
from ._triton import interpreting, triton_available

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
    "record_layer",
    "resolve_kernel",
    "score_perturbation",
    "score_scale",
    "triton_available",
    "visible_keys",
]
