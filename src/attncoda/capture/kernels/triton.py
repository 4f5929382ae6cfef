"""The ``triton`` kernel: one fused Triton pass per layer (docs/design.md, "The fused kernel").

Its declaration for :mod:`attncoda.capture.kernels.registry`, free of torch (and of triton)
at import; whether triton runs here is :func:`attncoda.capture.kernels.triton_available`
and :func:`attncoda.capture.kernels.interpreting`.
The kernel itself is three modules: :mod:`attncoda.capture.kernels._triton`, the launcher
(:func:`triton_attention`: the launch table, the grid, the float64 statistics after the
pass, and its ``record_layer``), :mod:`attncoda.capture.kernels._launch`, the kernel's
argument list (which the offline compile of ``bench/gpu_compile.py`` shares), and
:mod:`attncoda.capture.kernels._triton_jit`, the ``@triton.jit`` source it launches. Its bounds are
:func:`attncoda.capture.kernels.fused_bounds`; ``"auto"`` takes it on CUDA, each
configuration after its first-use check (:func:`attncoda.capture.kernels.first_use_check`).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from . import _triton_jit

if TYPE_CHECKING:
    from ._call import LayerCall

__all__ = ["KERNEL", "Triton"]

_FLOATS = ("float32", "bfloat16", "float16")


class Triton:
    """The fused Triton kernel as a :class:`attncoda.capture.kernels.registry.Kernel`."""

    name = "triton"
    title = "the fused Triton kernel"
    summary = "one fused Triton pass per layer"
    covers = frozenset({"softcap", "sliding_window", "s_aux"})
    dtypes = MappingProxyType({"cpu": _FLOATS, "cuda": _FLOATS})
    #: Where ``"auto"`` takes it, after its first-use check; the tests add ``"cpu"`` under
    #: the interpreter to exercise the check.
    auto_devices: tuple[str, ...] | None = ("cuda",)
    portable = False

    def refusal(self, device: str) -> str | None:
        """No triton, or a device other than CUDA without Triton's interpreter."""
        if not _triton_jit.triton_available():
            return (
                "kernel='triton' needs the triton package, which does not import here: "
                "install triton or use kernel='sdpa'"
            )
        if device != "cuda" and not _triton_jit.interpreting():
            return (
                f"kernel='triton' runs on cuda, or on the cpu under Triton's interpreter "
                f"(TRITON_INTERPRET=1, for tests); got device {device!r}: use kernel='sdpa'"
            )
        return None

    def bounds(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:func:`attncoda.capture.kernels.fused_bounds`."""
        from ._bounds import fused_bounds

        return fused_bounds(*args, **kwargs)

    def note(self, reason: str) -> str:
        """That a layer left the fused kernel for ``reason`` (said once per pass)."""
        return (
            f"note: the fused Triton kernel does not cover {reason}: those layers take the "
            f"two-call SDPA path (the exact path where that does not apply)"
        )

    def prepare(self, call, *, auto: bool) -> LayerCall | str:
        """:func:`attncoda.capture.kernels._triton.prepare`, each configuration checked on
        first use where ``"auto"`` chose the kernel on a device it prefers it on."""
        from ._check import first_use_check
        from ._triton import prepare

        checked = auto and call.query.device.type in (self.auto_devices or ())
        return prepare(call, first_use_check if checked else None)

    def run(self, call) -> tuple[Any, dict[str, Any]]:
        """:func:`attncoda.capture.kernels.triton_attention` of the call, as prepared."""
        from ._triton import triton_attention

        return triton_attention(
            call.query, call.key, call.value, scaling=call.scaling, sink=call.plan.sink,
            shape=call.shape, softcap=call.softcap, s_aux=call.s_aux,
            learned=call.plan.learned, planned=call.launch,
        )  # fmt: skip


#: The kernel, registered in :data:`attncoda.capture.kernels.registry.ORDER`.
KERNEL = Triton()
