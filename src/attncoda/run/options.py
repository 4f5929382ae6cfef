"""The options of a run that say where and how a model runs: devices, dtypes, placement."""

from __future__ import annotations

from typing import Any

from attncoda._errors import AttncodaError

__all__ = ["DEVICES", "DTYPES", "check_dtype", "load_options", "resolve_device"]

#: Where a run puts its models, captures and head distances (``auto``: CUDA when present).
DEVICES = ("cpu", "cuda", "auto")
#: Model parameter dtypes a run may ask for (statistics accumulate in float32 or wider).
DTYPES = ("float32", "bfloat16", "float16", "float64")


def load_options(
    device: str,
    device_map: Any = None,
    max_memory: Any = None,
    offload_folder: Any = None,
) -> dict[str, Any]:
    """The placement keywords of :func:`attncoda.load_model` for a run's options: the
    resolved ``device``, or without it the device map, its memory limits (JSON keys of a run
    config read back) and offload folder."""
    if device_map is None:
        return {"device": resolve_device(device)}
    from attncoda.models.placement import max_memory_from_config

    limits = max_memory_from_config(max_memory)
    return {"device_map": device_map, "max_memory": limits, "offload_folder": offload_folder}


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a device option of :data:`DEVICES`.

    ``"auto"`` is CUDA when torch sees a GPU, else the CPU; ``"cuda"`` without a GPU is
    refused rather than silently run elsewhere.
    """
    if device not in DEVICES:
        raise AttncodaError(f"unknown device {device!r}: use one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise AttncodaError("device 'cuda' asked for, but torch sees no GPU: use cpu or auto")
    return "cpu"


def check_dtype(dtype: str | None) -> str | None:
    """A dtype option of :data:`DTYPES` (None: the model's default, float32)."""
    if dtype is not None and dtype not in DTYPES:
        raise AttncodaError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    return dtype
