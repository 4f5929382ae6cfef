"""The fast kernels of ``method="fast"``: each layer's row statistics without the attention
matrix.

What it holds:

- the kernel registry (:mod:`attncoda.capture.kernels.registry`): the :class:`Kernel`
  protocol, the kernels in the order ``"auto"`` prefers them, and every choice and
  capability check in one place: :data:`KERNELS` (the names users type),
  :func:`resolve_kernel` (which kernel serves a device), :func:`check_dtype` (the fast path
  in a dtype no kernel takes on the device, float64 on CUDA) and :func:`serve` (which
  kernel runs a routed layer), and the one object a routed layer's call is handed down as
  (:class:`LayerCall`: the pass's plan, the layer, its inputs and keywords, and what was
  decided of it once), whole; a kernel reads it and returns its results (the recorded rows
  are the call's own, :func:`recorded_rows`), and a new one is a module and one entry in the
  registry (:func:`attncoda.capture.kernels.registry.register`);
- one module per kernel, named as users type it, declaring it to the registry:
  :mod:`~attncoda.capture.kernels.sdpa` (PyTorch's fused attention called twice,
  :func:`sdpa_attention`, in ``_sdpa``), :mod:`~attncoda.capture.kernels.cpp` (one fused
  flash-style pass on the CPU, C++ built on first use through torch's extension builder:
  :func:`cpp_attention` in ``_cpp``, its source ``_cpp.cpp``) and
  :mod:`~attncoda.capture.kernels.triton` (one
  fused Triton pass, :func:`triton_attention`: its launcher in ``_triton``, its argument
  list in ``_launch``, its ``@triton.jit`` source in ``_triton_jit``; whether triton runs
  here, :func:`triton_available`, :func:`interpreting`), and the fused kernel's first-use
  check under ``"auto"`` (:func:`first_use_check`);
- the mask geometry both read (:func:`boolean_mask`, :func:`read_mask`, :class:`MaskShape`,
  :func:`mask_shape`), read once per mask in a forward pass;
- the error bounds of the fast path against the exact one (:func:`fast_bounds` and kin),
  and of the fused kernel (:func:`fused_bounds`, compiled terms included);
- the fused kernel's launch table per (architecture, dtype, head dim, variant)
  (:func:`launch_config`; its entries compiled for CUDA targets without a GPU by
  ``bench/gpu_compile.py``).

What it may import: :mod:`attncoda.capture.stats`, :mod:`attncoda.capture.names`,
:mod:`attncoda._errors`, torch (and triton, lazily). The names below
are served lazily, so that the registry and the kernels' declarations import without torch
(the command line reads :data:`KERNELS`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from ._call import LayerCall
    from ._check import Problem, checked_configurations, first_use_check, reference
    from ._configs import (
        ARCHITECTURES,
        DTYPES,
        FLAGS,
        HEAD_DIMS,
        LaunchConfig,
        Refused,
        architecture_of,
        launch_config,
    )
    from ._cpp import cpp_attention
    from ._masks import MASK_ROWS, MaskShape, boolean_mask, mask_shape, read_mask
    from ._record import recorded_rows
    from ._sdpa import FAST_STATISTICS, sdpa_attention, visible_keys
    from ._triton import KernelRefused, launch_for, triton_attention
    from ._triton_jit import interpreting, triton_available
    from .registry import KERNELS, Kernel, check_dtype, lookup, resolve_kernel, serve

_MODULES = {
    "._bounds": (
        "FLOAT64_ROUNDOFF",
        "UNIT_ROUNDOFF",
        "difference_bounds",
        "exact_bounds",
        "fast_bounds",
        "float64_part",
        "fused_bounds",
        "score_perturbation",
        "score_scale",
    ),
    "._call": ("LayerCall",),
    "._check": ("Problem", "checked_configurations", "first_use_check", "reference"),
    "._configs": (
        "ARCHITECTURES",
        "DTYPES",
        "FLAGS",
        "HEAD_DIMS",
        "LaunchConfig",
        "Refused",
        "architecture_of",
        "launch_config",
    ),
    "._cpp": ("cpp_attention",),
    "._masks": ("MASK_ROWS", "MaskShape", "boolean_mask", "mask_shape", "read_mask"),
    "._record": ("recorded_rows",),
    "._sdpa": ("FAST_STATISTICS", "sdpa_attention", "visible_keys"),
    "._triton": ("KernelRefused", "launch_for", "triton_attention"),
    ".registry": ("KERNELS", "Kernel", "check_dtype", "lookup", "resolve_kernel", "serve"),
    "._triton_jit": ("interpreting", "triton_available"),
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "ARCHITECTURES",
    "DTYPES",
    "FAST_STATISTICS",
    "FLAGS",
    "FLOAT64_ROUNDOFF",
    "HEAD_DIMS",
    "KERNELS",
    "Kernel",
    "KernelRefused",
    "LaunchConfig",
    "LayerCall",
    "MASK_ROWS",
    "MaskShape",
    "Problem",
    "Refused",
    "UNIT_ROUNDOFF",
    "architecture_of",
    "boolean_mask",
    "check_dtype",
    "checked_configurations",
    "cpp_attention",
    "difference_bounds",
    "exact_bounds",
    "fast_bounds",
    "first_use_check",
    "float64_part",
    "fused_bounds",
    "interpreting",
    "launch_config",
    "launch_for",
    "lookup",
    "mask_shape",
    "read_mask",
    "recorded_rows",
    "reference",
    "resolve_kernel",
    "score_perturbation",
    "score_scale",
    "sdpa_attention",
    "serve",
    "triton_attention",
    "triton_available",
    "visible_keys",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME[name], __name__), name)
    globals()[name] = value
    return value
