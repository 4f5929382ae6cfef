"""Kernel selection, in one place: which kernel serves ``method="fast"`` on a device
(:func:`resolve_kernel`), and which runs a routed layer (:func:`record_layer`: the fused
Triton kernel when asked for and it covers the layer, else the two-call SDPA path, else
None for the exact path).
"""

from __future__ import annotations

from attncoda._errors import AttncodaError, check_choice
from attncoda.capture.names import KERNELS

from ._check import first_use_check
from ._fused import record_layer as record_triton_layer
from ._sdpa import record_layer as record_sdpa_layer
from ._triton import interpreting, triton_available

__all__ = ["AUTO_DEVICES", "KERNELS", "record_layer", "resolve_kernel"]

#: The devices where ``kernel="auto"`` takes the fused kernel, after its first-use check
#: (:func:`attncoda.capture.kernels.first_use_check`); the tests add ``"cpu"`` under the
#: interpreter to exercise the check.
AUTO_DEVICES: tuple[str, ...] = ("cuda",)


def resolve_kernel(kernel: str, device: str) -> str:
    """The kernel that serves ``method="fast"`` on ``device`` (``"cpu"`` or ``"cuda"``).

    ``"auto"`` is ``"triton"`` on CUDA when triton imports (each configuration then checked
    on first use, :func:`record_layer`) and ``"sdpa"`` otherwise;
    ``"triton"`` is refused where it cannot run (the CPU without ``TRITON_INTERPRET=1``, or no
    triton); ``"sdpa"`` runs everywhere.
    """
    check_choice("kernel", kernel, KERNELS)
    if kernel == "sdpa":
        return kernel
    if kernel == "auto":
        return "triton" if device in AUTO_DEVICES and triton_available() else "sdpa"
    if not triton_available():
        raise AttncodaError(
            "kernel='triton' needs the triton package, which does not import here: install "
            "triton or use kernel='sdpa'"
        )
    if device != "cuda" and not interpreting():
        raise AttncodaError(
            f"kernel='triton' runs on cuda, or on the cpu under Triton's interpreter "
            f"(TRITON_INTERPRET=1, for tests); got device {device!r}: use kernel='sdpa'"
        )
    return kernel


def record_layer(recorder, layer, module, query, key, value, attention_mask, scaling, kwargs):
    """The fast path of one routed layer: statistics into ``recorder``; the layer's output.

    The kernel is resolved from where the layer runs (:func:`resolve_kernel` on the query's
    device: a device map may spread the layers over the CPU and GPUs). The fused Triton
    kernel goes first where it is chosen (it prints a note and declines a layer it does not
    cover; under ``"auto"`` each configuration must pass :func:`attncoda.capture.kernels.
    first_use_check` first); the two-call SDPA path takes what it declines, except
    soft-capped and learned-sink layers, which it does not model. ``recorder.ran[layer]``
    records which served the layer (``"exact"`` when neither did).

    Returns
    -------
    torch.Tensor or None
        ``attn_output`` ``(batch, query_pos, head, head_dim)``, or None: the caller runs
        the exact path.
    """
    out = None
    if resolve_kernel(recorder.kernel, query.device.type) == "triton":
        checked = recorder.kernel == "auto" and query.device.type in AUTO_DEVICES
        out = record_triton_layer(
            recorder, layer, module, query, key, value, attention_mask, scaling, kwargs,
            check=first_use_check if checked else None,
        )  # fmt: skip
        if out is not None:
            recorder.ran[layer] = "triton"
    if out is None and kwargs.get("softcap") is None and kwargs.get("s_aux") is None:
        out = record_sdpa_layer(recorder, layer, module, query, key, value, attention_mask, scaling)
        if out is not None:
            recorder.ran[layer] = "sdpa"
    if out is None:
        recorder.ran[layer] = "exact"
    return out
