"""A run's capture options as its config records them (:mod:`attncoda.run.config`): checked
and resolved once (:func:`recorded`), spread over the config's JSON keys
(:func:`options_json`) and read back from them (:func:`options_from_json`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attncoda.capture.options import CaptureOptions, resolve_device

__all__ = ["options_from_json", "options_json", "recorded"]


def recorded(options: CaptureOptions) -> CaptureOptions:
    """``options`` as a run config records them: the fast path's kernel resolved to the one
    that runs on the run's device (:func:`attncoda.capture.kernels.resolve_kernel`), a
    device map and its memory limits normalised (their keys as text), a given offload
    folder made absolute (without one, a map's disk weights go to ``<run folder>/offload``:
    :meth:`attncoda.run.config.RunConfig.options_at`).

    Raises
    ------
    AttncodaError
        A placement the loader refuses, a kernel that does not run on the run's device, or
        a dtype no kernel takes there (float64 on CUDA), before anything loads.
    """
    from attncoda.models.placement import check_run_placement

    device, method, device_map = options.device, options.method, options.device_map
    # A run's offloaded weights go to <run folder>/offload unless a folder is given.
    folder = options.offload_folder
    folder = "offload" if device_map is not None and folder is None else folder
    placed, limits = check_run_placement(device, device_map, options.max_memory, folder)
    ran = _kernel(options.kernel, method, device, options.dtype)
    return CaptureOptions(
        device=device,
        dtype=options.dtype,
        method=method,
        kernel=ran or "auto",
        device_map=placed,
        max_memory={str(k): v for k, v in limits.items()} if limits else None,
        offload_folder=(
            str(Path(options.offload_folder).resolve()) if options.offload_folder else None
        ),
        sink=options.sink,
        seed=options.seed,
    )


def _kernel(kernel: str, method: str, device: str, dtype: str | None = None) -> str | None:
    """The fast path's kernel on ``device`` (None for the exact path; the options checked
    the kernel's name), and a dtype no kernel takes there (float64 on CUDA) refused before
    any load (:func:`attncoda.capture.kernels.check_dtype`)."""
    from attncoda.capture.kernels.registry import check_dtype, resolve_kernel

    if method != "fast":
        return None
    where = resolve_device(device)
    check_dtype(where, dtype)
    return resolve_kernel(kernel, where)


def options_json(options: CaptureOptions) -> dict[str, Any]:
    """The run config's keys of recorded ``options``: ``sink``, ``seed``, ``device``,
    ``dtype``, ``method``; ``kernel`` for the fast path only; ``device_map`` and
    ``max_memory`` only with a map, ``offload_folder`` only when one is given."""
    o, placed = options, options.device_map
    if isinstance(placed, Mapping):
        placed = dict(placed)  # a copy: the JSON is the caller's
    return {
        "sink": o.sink,
        "seed": o.seed,
        "device": o.device,
        "dtype": o.dtype,
        "method": o.method,
        **({"kernel": o.kernel} if o.method == "fast" else {}),
        **({"device_map": placed} if placed is not None else {}),
        **({"max_memory": dict(o.max_memory)} if o.max_memory else {}),
        **({"offload_folder": o.offload_folder} if o.offload_folder else {}),
    }


def options_from_json(stored: Mapping[str, Any]) -> CaptureOptions:
    """The options a run config records (:func:`options_json`), as recorded: not checked
    again. They were when the run was made, and a manifest is also read where the run's
    device is absent (the report of a GPU run, rendered on a laptop); a model's load checks
    its device where it runs (:meth:`CaptureOptions.placement`)."""
    method = stored["method"]
    options = object.__new__(CaptureOptions)  # as unpickling makes it: no checks
    vars(options).update(
        device=stored["device"],
        dtype=stored["dtype"],
        method=method,
        kernel=stored["kernel"] if method == "fast" else "auto",
        device_map=stored.get("device_map"),
        max_memory=stored.get("max_memory"),
        offload_folder=stored.get("offload_folder"),
        sink=stored["sink"],
        seed=stored["seed"],
    )
    return options
