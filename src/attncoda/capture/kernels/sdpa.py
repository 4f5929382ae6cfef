"""The ``sdpa`` kernel: PyTorch's fused attention called twice per layer.

Its declaration for :mod:`attncoda.capture.kernels.registry`, free of torch at import; the
two-call path itself is :mod:`attncoda.capture.kernels._sdpa` (:func:`sdpa_attention`), its
bounds :func:`attncoda.capture.kernels.fast_bounds`. It runs on the CPU
(``_scaled_dot_product_flash_attention_for_cpu``, float64 included) and on CUDA
(``_scaled_dot_product_efficient_attention``, which has no float64), everywhere the fast
path does; it does not model soft-capped scores or learned sinks, whose layers take the
exact path.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._call import LayerCall

__all__ = ["KERNEL", "Sdpa"]

_FLOATS = ("float32", "bfloat16", "float16")


class Sdpa:
    """The two-call SDPA path as a :class:`attncoda.capture.kernels.registry.Kernel`."""

    name = "sdpa"
    title = "the two-call SDPA path"
    summary = "PyTorch's fused attention twice per layer"
    covers = frozenset({"sliding_window"})
    dtypes = MappingProxyType({"cpu": (*_FLOATS, "float64"), "cuda": _FLOATS})
    auto_devices: tuple[str, ...] | None = None
    portable = True

    def refusal(self, device: str) -> str | None:
        """None: it is asked for anywhere (a device it has no op for fails when it runs)."""
        return None

    def bounds(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """:func:`attncoda.capture.kernels.fast_bounds`."""
        from ._bounds import fast_bounds

        return fast_bounds(*args, **kwargs)

    def note(self, reason: str) -> None:
        """Nothing: a layer it declines takes the exact path, which ``Capture.kernel``
        records per layer."""

    def prepare(self, call, *, auto: bool) -> LayerCall | str:
        """The call itself, unless its mask carries a bias (``auto`` unused: no check)."""
        return call if call.mask[2] else ""

    def run(self, call) -> tuple[Any, dict[str, Any]]:
        """:func:`attncoda.capture.kernels.sdpa_attention` of the call."""
        from ._sdpa import sdpa_attention

        visible, causal, _ = call.mask
        return sdpa_attention(
            call.query, call.key, call.value, scaling=call.scaling, sink=call.plan.sink,
            visible=visible, causal=causal, block_size=call.plan.block_size,
        )  # fmt: skip


#: The kernel, registered in :data:`attncoda.capture.kernels.registry.ORDER`.
KERNEL = Sdpa()
