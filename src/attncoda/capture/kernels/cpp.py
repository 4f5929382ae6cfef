"""The ``cpp`` kernel: one fused pass per layer on the CPU (docs/design.md, "The fused CPU
kernel").

Its declaration for :mod:`attncoda.capture.kernels.registry`, free of torch (the checks of
what the build needs, :mod:`attncoda.capture.kernels._cpp_host`, import none either). The
pass is C++ (``_cpp.cpp``), built on first use through torch's extension builder and kept
in torch's cache; its loader and the call are :mod:`attncoda.capture.kernels._cpp`. It
computes each score once, where the ``sdpa`` kernel's two calls compute it twice, and has
the same error bounds (:func:`attncoda.capture.kernels.fast_bounds`). ``"auto"`` takes it
on the CPU wherever it can be built (:func:`prerequisites`: Linux x86-64, torch
:data:`TORCH_FLOOR` or later, a C++ compiler, ninja; read before any build is tried), else
the ``sdpa`` kernel, saying why once per process and recording it beside the kernel that
served; a build that fails all the same is said once, and ``sdpa`` serves. Its build
follows ``ATEN_CPU_CAPABILITY`` (``default``, ``avx2``, ``avx512``), capped by the CPU
(:func:`vector_width`). It models padding, causal rows and sliding windows from the mask's
shape (:class:`attncoda.capture.kernels.MaskShape`; a layer whose mask has none goes to
``sdpa``), not soft-capped scores or learned sinks, and takes float32, bfloat16 and float16
layers (their statistics accumulate in float32); a float64 layer goes to ``sdpa``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ._cpp_host import TORCH_FLOOR, compiler, prerequisites, vector_width

if TYPE_CHECKING:
    from ._call import LayerCall

__all__ = ["KERNEL", "TORCH_FLOOR", "Cpp", "compiler", "prerequisites", "vector_width"]


class Cpp:
    """The fused CPU pass as a :class:`attncoda.capture.kernels.registry.Kernel`."""

    name = "cpp"
    title = "the fused CPU kernel"
    summary = "one fused pass per layer on the CPU, compiled here on first use"
    covers = frozenset({"sliding_window"})
    dtypes = MappingProxyType({"cpu": ("float32", "bfloat16", "float16")})
    auto_devices: tuple[str, ...] | None = ("cpu",)
    portable = False

    def refusal(self, device: str) -> str | None:
        """Another device than the CPU, or a machine it is not built on
        (:func:`prerequisites`, a torch older than :data:`TORCH_FLOOR` included; no build
        happens here)."""
        if device != "cpu":
            return f"kernel='cpp' runs on the cpu; got device {device!r}: use kernel='auto'"
        why = prerequisites()
        return None if why is None else f"kernel='cpp' cannot run here: {why}; use kernel='sdpa'"

    def bounds(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:func:`attncoda.capture.kernels.fast_bounds` (the ``sdpa`` kernel's model)."""
        from ._bounds import fast_bounds

        return fast_bounds(*args, **kwargs)

    def note(self, reason: str) -> None:
        """Nothing: a layer it declines goes to ``sdpa``, which ``Capture.kernel`` records
        per layer."""

    def prepare(self, call, *, auto: bool) -> LayerCall | str:
        """The call itself (``auto`` unused), not where the pass cannot be built or loaded
        (said once per process) or the layer's mask has no :class:`attncoda.capture.kernels.
        MaskShape`: ``sdpa`` then serves the layer."""
        from ._cpp import runs_here

        return call if runs_here() and call.shape is not None else ""

    def run(self, call) -> tuple[Any, dict[str, Any]]:
        """:func:`attncoda.capture.kernels.cpp_attention` of the call."""
        from ._cpp import cpp_attention

        return cpp_attention(
            call.query, call.key, call.value, scaling=call.scaling, sink=call.geometry,
            shape=call.shape,
        )  # fmt: skip


#: The kernel, registered in :data:`attncoda.capture.kernels.registry.ORDER`.
KERNEL = Cpp()
