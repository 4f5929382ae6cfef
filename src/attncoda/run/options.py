"""A run's capture options as its config records them (:mod:`attncoda.run.config`): checked
and resolved once (:func:`recorded`); their JSON is the options' own
(:meth:`CaptureOptions.to_json <attncoda.capture.options.CaptureOptions.to_json>`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from attncoda.capture.options import CaptureOptions, resolve_device

__all__ = ["recorded"]


def recorded(options: CaptureOptions) -> CaptureOptions:
    """``options`` as a run config records them: the fast path's kernel (``method`` fast,
    or auto where a kernel takes the dtype) resolved to the one that runs on the run's
    device (:func:`attncoda.capture.kernels.resolve_kernel`), a device map and its memory
    limits normalised (their keys as text), a given offload
    folder made absolute (without one, a map's disk weights go to ``<run folder>/offload``:
    :meth:`attncoda.run.config.RunConfig.options_at`).

    Raises
    ------
    AttncodaError
        A placement the loader refuses, a kernel that does not run on the run's device, or
        a dtype no kernel takes there (float64 on CUDA), before anything loads.
    """
    from attncoda.capture.kernels.registry import check_dtype, resolve_kernel, takes_dtype
    from attncoda.models.placement import check_run_placement

    device, device_map = options.device, options.device_map
    # A run's offloaded weights go to <run folder>/offload unless a folder is given.
    folder = options.offload_folder
    folder = "offload" if device_map is not None and folder is None else folder
    placed, limits = check_run_placement(device, device_map, options.max_memory, folder)
    kernel = "auto"  # the exact path has none
    if options.method == "fast":  # the one that runs there, and a dtype none takes refused
        where = resolve_device(device)
        check_dtype(where, options.dtype)
        kernel = resolve_kernel(options.kernel, where)
    elif options.method == "auto" and takes_dtype(resolve_device(device), options.dtype):
        kernel = resolve_kernel(options.kernel, resolve_device(device))
    return replace(
        options,
        kernel=kernel,
        device_map=placed,
        max_memory={str(k): v for k, v in limits.items()} if limits else None,
        offload_folder=(
            str(Path(options.offload_folder).resolve()) if options.offload_folder else None
        ),
    )
