"""The options of a run that say where and how a model runs: :class:`CaptureOptions`, the
devices and dtypes it allows, and the keywords it gives the loader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from attncoda._errors import AttncodaError, check_choice

__all__ = [
    "DEVICES",
    "DTYPES",
    "CaptureOptions",
    "check_choice",
    "check_dtype",
    "resolve_device",
]

#: Where a run puts its models, captures and head distances (``auto``: CUDA when present).
DEVICES = ("cpu", "cuda", "auto")
#: Model parameter dtypes a run may ask for (statistics accumulate in float32 or wider).
DTYPES = ("float32", "bfloat16", "float16", "float64")


def resolve_device(device: str) -> str:
    """``"cpu"`` or ``"cuda"`` for a device option of :data:`DEVICES`.

    ``"auto"`` is CUDA when torch sees a GPU, else the CPU; ``"cuda"`` without a GPU is
    refused rather than silently run elsewhere.
    """
    check_choice("device", device, DEVICES)
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
    if dtype is not None:
        check_choice("dtype", dtype, DTYPES)
    return dtype


@dataclass(frozen=True)
class CaptureOptions:
    """How a run loads and captures every model: built and checked once (by the CLI or the
    API), then handed through whole (a run holds them in its run config).

    Attributes
    ----------
    device : str
        Where models run: ``"cpu"``, ``"cuda"`` or ``"auto"`` (the default: CUDA when torch
        sees a GPU, else the CPU; docs/design.md, "Devices").
    dtype : str or None
        The models' parameter dtype (:data:`DTYPES`; None: float32).
    method : str
        The capture method: ``"exact"`` (the reference) or ``"fast"``.
    kernel : str
        The fast path's kernel, one of :data:`attncoda.capture.kernels.registry.KERNELS`
        (``"auto"``, or a kernel's name); anything but ``"auto"`` needs ``method="fast"``.
    device_map : str or dict or None
        Spread each model over GPUs, the CPU and the disk instead of ``device`` (which then
        stays ``"auto"`` or ``"cpu"``), as for :func:`attncoda.load_model`.
    max_memory : dict or str or None
        Memory limits per device of the map, ``{device: size}`` (text keys as a run config
        stores them are read back; the text ``"0=2GiB,cpu=8GiB"`` is parsed).
    offload_folder : str or None
        Where the map's disk weights go (a run's default: ``<run folder>/offload``).
    sink : str
        The sink spec (docs/design.md, "Sinks").
    seed : int
        The run's seed (row sampling, bootstrap, MDS, random pruning).

    Raises
    ------
    AttncodaError
        On construction: an unknown device, ``"cuda"`` where torch sees no GPU, an unknown
        dtype, method or kernel, a kernel without the fast method, a bad sink or seed, or a
        placement :func:`attncoda.load_model` refuses.
    """

    device: str = "auto"
    dtype: str | None = None
    method: str = "exact"
    kernel: str = "auto"
    device_map: str | Mapping[str, Any] | None = None
    max_memory: Mapping[Any, Any] | None = None
    offload_folder: str | None = None
    sink: str = "first"
    seed: int = 0

    def __post_init__(self) -> None:
        from attncoda.capture.kernels.registry import KERNELS
        from attncoda.capture.names import METHODS
        from attncoda.capture.sinks import parse_sink
        from attncoda.models.placement import check_run_placement

        seed = self.seed
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise AttncodaError(f"seed must be an integer of at least 0; got {seed!r}")
        if not isinstance(self.sink, str):
            raise AttncodaError(f"sink must be a sink spec string; got {self.sink!r}")
        parse_sink(self.sink)
        check_choice("device", self.device, DEVICES)
        check_dtype(self.dtype)
        check_choice("method", self.method, METHODS)
        check_choice("kernel", self.kernel, KERNELS)
        if self.kernel != "auto" and self.method != "fast":
            raise AttncodaError(
                f"--kernel {self.kernel} is for --method fast (the {self.method} method has no "
                "kernel): add --method fast, or drop --kernel"
            )
        if isinstance(self.max_memory, str):  # the command line's "0=2GiB,cpu=8GiB"
            from attncoda.models.placement import parse_max_memory

            object.__setattr__(self, "max_memory", parse_max_memory(self.max_memory))
        # The disk needs a folder: a run's default is <run folder>/offload.
        folder = self.offload_folder
        if self.device_map is not None and folder is None:
            folder = "offload"
        check_run_placement(self.device, self.device_map, self.max_memory, folder)
        if self.device == "cuda":
            resolve_device(self.device)  # refused here, before anything is written or loaded
        if self.offload_folder is not None:
            object.__setattr__(self, "offload_folder", str(self.offload_folder))

    def placement(self) -> dict[str, Any]:
        """The placement keywords of :func:`attncoda.load_model`: the resolved ``device``, or
        without it the device map, its memory limits (the JSON keys of a run config read
        back) and offload folder."""
        if self.device_map is None:
            return {"device": resolve_device(self.device)}
        from attncoda.models.placement import max_memory_from_config

        return {
            "device_map": self.device_map,
            "max_memory": max_memory_from_config(self.max_memory),
            "offload_folder": self.offload_folder,
        }
