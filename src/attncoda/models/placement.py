"""Where a model's modules live: device maps, memory limits and the offload folder.

A *device map* spreads one model over several devices, the CPU and the disk (docs/design.md,
"Models over several devices"). It is a strategy name of :data:`DEVICE_MAPS` (transformers
and accelerate place the modules: ``"auto"`` and ``"balanced"`` spread them evenly over the
GPUs, ``"balanced_low_0"`` keeps GPU 0 light, ``"sequential"`` fills the GPUs in order, then
the CPU, then the disk) or a dict ``{module name: device}`` whose devices are a GPU index
(``0``), a device string (``"cuda:1"``, ``"mps"``), ``"cpu"`` or ``"disk"``. Modules on the
disk are read from ``offload_folder`` when their layer runs; those on the CPU of a GPU
machine are copied to the GPU when their layer runs.

The checks here import neither torch nor transformers (the CLI refuses a bad option before
anything loads); :func:`input_device` (from :mod:`attncoda._devices`, where the one helper
that moves a model's inputs lives) and :func:`device_map_of` read a loaded model.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from attncoda._devices import input_device
from attncoda._errors import AttncodaError

__all__ = [
    "DEVICE_MAPS",
    "check_map_fits",
    "check_placement",
    "check_run_placement",
    "device_map_of",
    "input_device",
    "max_memory_from_config",
    "parse_max_memory",
]

#: The device-map strategies transformers' ``from_pretrained(device_map=...)`` computes.
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

_DEVICE = re.compile(r"^(cuda|mps|xpu|npu|hpu)(:\d+)?$")
_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B|B)$", re.IGNORECASE)
_PLACES = "a GPU index such as 0, a device such as 'cuda:1' or 'mps', 'cpu' or 'disk'"


def _place_ok(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 0
    return isinstance(value, str) and (value in ("cpu", "disk") or bool(_DEVICE.match(value)))


def _memory_key(key: object) -> Any:
    """A key of ``max_memory``: a GPU index, ``"cpu"`` or a device string (digits: an int)."""
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key.strip())
    if isinstance(key, bool) or not (
        (isinstance(key, int) and key >= 0)
        or (isinstance(key, str) and (key in ("cpu", "disk") or _DEVICE.match(key)))
    ):
        raise AttncodaError(
            f"max_memory key {key!r} is no device: use a GPU index such as 0, 'cpu' or a "
            f"device such as 'cuda:1'"
        )
    return key


def _memory_value(key: object, value: object) -> int | str:
    if isinstance(value, bool) or not (
        (isinstance(value, int) and value > 0)
        or (isinstance(value, str) and _SIZE.match(value.strip()))
    ):
        raise AttncodaError(
            f"max_memory[{key!r}] = {value!r} is no memory size: give a positive number of "
            f"bytes or a size such as '2GiB' or '500MB'"
        )
    return value.strip() if isinstance(value, str) else value


def check_placement(
    device_map: Any,
    max_memory: Any = None,
    offload_folder: str | os.PathLike[str] | None = None,
    *,
    device: Any = None,
) -> tuple[str | dict[str, int | str] | None, dict[Any, int | str] | None]:
    """Check a device map, its memory limits and offload folder; return them normalised.

    Parameters
    ----------
    device_map : str, dict or None
        None (the whole model on ``device``), a strategy of :data:`DEVICE_MAPS`, or a
        non-empty dict ``{module name: device}`` (see the module docstring).
    max_memory : dict, optional
        ``{device: size}``, a device a GPU index, ``"cpu"`` or a device string (a key of
        digits counts as a GPU index), a size bytes (int) or text such as ``"2GiB"``.
    offload_folder : str or os.PathLike, optional
        Where modules placed on ``"disk"`` are kept.
    device : optional
        The ``device`` argument given beside the map; it must be None with a device map.

    Returns
    -------
    device_map, max_memory
        The map (a dict copied) and the limits with GPU indices as ints, or None.

    Raises
    ------
    AttncodaError
        ``device`` together with a device map, an unknown strategy, a dict with a bad module
        name or device, ``"disk"`` without ``offload_folder``, a bad memory limit, or
        ``max_memory`` or ``offload_folder`` without a device map.
    """
    if device_map is None:
        for name, value in (("max_memory", max_memory), ("offload_folder", offload_folder)):
            if value is not None:
                raise AttncodaError(
                    f"{name}={value!r} needs a device map: give device_map='auto' (or "
                    f"another of {', '.join(DEVICE_MAPS)}, or a dict), or drop {name}"
                )
        return None, None
    if device is not None:
        raise AttncodaError(
            f"device={str(device)!r} and device_map={device_map!r} both say where the model "
            f"goes: drop device (the map places every module) or drop device_map"
        )
    placed = _checked_map(device_map, offload_folder)
    if max_memory is None:
        return placed, None
    if not isinstance(max_memory, Mapping) or not max_memory:
        raise AttncodaError(
            f"max_memory must be a non-empty dict {{device: size}} such as "
            f"{{0: '2GiB', 'cpu': '8GiB'}}; got {max_memory!r}"
        )
    return placed, {_memory_key(k): _memory_value(k, v) for k, v in max_memory.items()}


def _checked_map(device_map: Any, offload_folder: object) -> str | dict[str, int | str]:
    """``device_map``, a strategy of :data:`DEVICE_MAPS` or a dict (copied) whose every name
    is a string and every place one of :data:`_PLACES` (``"disk"`` with an offload folder)."""
    if isinstance(device_map, str):
        if device_map not in DEVICE_MAPS:
            raise AttncodaError(
                f"unknown device_map {device_map!r}: use one of {', '.join(DEVICE_MAPS)}, or a "
                f"dict {{module name: device}}"
            )
        return device_map
    if not isinstance(device_map, Mapping):
        raise AttncodaError(
            f"device_map must be one of {', '.join(DEVICE_MAPS)} or a dict {{module name: "
            f"device}}; got {device_map!r}"
        )
    if not device_map:
        raise AttncodaError(
            "device_map is an empty dict: give {module name: device} for every module, "
            "e.g. {'': 'cpu'}, or a strategy such as 'auto'"
        )
    placed = {}
    for name, where in device_map.items():
        if not isinstance(name, str):
            raise AttncodaError(
                f"device_map key {name!r} is no module name: use names such as "
                f"'model.layers.0' (or '' for the whole model)"
            )
        if not _place_ok(where):
            raise AttncodaError(f"device_map[{name!r}] = {where!r}: use {_PLACES}")
        placed[name] = where
    if "disk" in placed.values() and offload_folder is None:
        disk = [n for n, w in placed.items() if w == "disk"]
        raise AttncodaError(
            f"device_map puts {disk[0]!r} on 'disk' but no offload_folder is given: pass "
            f"offload_folder=<a folder> for the offloaded weights, or place it on 'cpu'"
        )
    return placed


def parse_max_memory(text: str) -> dict[Any, str]:
    """``"0=2GiB,cpu=8GiB"`` as ``{0: "2GiB", "cpu": "8GiB"}`` (the CLI's ``--max-memory``).

    Raises
    ------
    AttncodaError
        An item without ``=``, or a key or size :func:`check_placement` refuses.
    """
    limits: dict[Any, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, eq, size = item.partition("=")
        if not eq or not key.strip() or not size.strip():
            raise AttncodaError(
                f"--max-memory item {item!r} is not DEVICE=SIZE: write e.g. 0=2GiB,cpu=8GiB"
            )
        device = _memory_key(key.strip())
        limits[device] = str(_memory_value(device, size.strip()))
    if not limits:
        raise AttncodaError(f"--max-memory {text!r} is empty: write e.g. 0=2GiB,cpu=8GiB")
    return limits


def max_memory_from_config(stored: Mapping[str, Any] | None) -> dict[Any, int | str] | None:
    """Memory limits as a run config stores them (JSON keys are text) for the loader."""
    if stored is None:
        return None
    return {_memory_key(k): v for k, v in stored.items()}


def device_map_of(model: Any) -> dict[str, int | str] | None:
    """The device each module of a dispatched model was put on, JSON-able, or None.

    Reads ``model.hf_device_map`` (set by transformers or accelerate when a device map placed
    the model): ``{module name: GPU index, "cpu", "disk" or a device string}``.
    """
    found = getattr(model, "hf_device_map", None)
    if not isinstance(found, Mapping):
        return None
    return {str(k): v if isinstance(v, (int, str)) else str(v) for k, v in found.items()}


def check_map_fits(model: Any, device_map: Mapping[str, Any]) -> None:
    """Refuse a dict device map that names a module ``model`` lacks or leaves one out.

    transformers loads a map whose every device is ``"cpu"`` without reading it, so a typo
    there would pass unseen; this check runs on the loaded model, before it is returned.

    Raises
    ------
    AttncodaError
        Naming the first unknown module, or the first parameter no entry covers.
    """
    modules = {name for name, _ in model.named_modules()}
    unknown = [name for name in device_map if name not in modules]
    if unknown:
        tops = sorted(n for n in modules if n and "." not in n)
        raise AttncodaError(
            f"device_map names {unknown[0]!r}, which {type(model).__name__} has no module "
            f"called: use module names such as {', '.join(repr(t) for t in tops)} (their "
            f"sub-modules by dotted name, '' for the whole model)"
        )

    def covered(param: str) -> bool:
        return any(k == "" or param == k or param.startswith(k + ".") for k in device_map)

    left = [name for name, _ in model.named_parameters() if not covered(name)]
    if left:
        raise AttncodaError(
            f"device_map gives no device for {left[0]!r} ({len(left)} parameter(s) left out): "
            f"add an entry for its module, or use a strategy such as 'auto'"
        )
    _check_tied_head(model, device_map)


def _place_of(name: str, device_map: Mapping[str, Any]) -> Any:
    """Where ``device_map`` puts the module ``name``: its longest matching entry."""
    found = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    return device_map[max(found, key=len)] if found else None


def _check_tied_head(model: Any, device_map: Mapping[str, Any]) -> None:
    """Refuse a map that puts one of a tied input embedding and output head on the disk and
    the other elsewhere: accelerate then finds no offloaded copy of the head's weight."""
    text = model.config.get_text_config()
    if not getattr(text, "tie_word_embeddings", False):
        return
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    inner, outer = get_in() if get_in else None, get_out() if get_out else None
    if inner is None or outer is None:
        return
    names = {id(module): name for name, module in model.named_modules()}
    first, head = names.get(id(inner)), names.get(id(outer))
    if first is None or head is None:
        return
    places = _place_of(first, device_map), _place_of(head, device_map)
    if (places[0] == "disk") != (places[1] == "disk"):
        raise AttncodaError(
            f"device_map puts {first!r} on {places[0]!r} and {head!r} on {places[1]!r}, but "
            f"{type(model).__name__} ties their weights: place both on the disk or neither"
        )


def check_run_placement(
    device: str, device_map: Any, max_memory: Any = None, offload_folder: Any = None
) -> tuple[str | dict[str, int | str] | None, dict[Any, int | str] | None]:
    """:func:`check_placement` of a run's options, where ``device`` has the default ``"auto"``.

    A device map replaces ``--device``: with one, ``device`` must stay ``"auto"`` (or
    ``"cpu"``, the default of the run configs written before ``auto`` was).

    Raises
    ------
    AttncodaError
        As :func:`check_placement`, or ``device`` ``"cuda"`` beside a map.
    """
    if device_map is not None and device not in ("auto", "cpu"):
        raise AttncodaError(
            f"--device {device} and --device-map {device_map} both say where models run: "
            f"drop --device (the map places every module) or drop --device-map"
        )
    return check_placement(device_map, max_memory, offload_folder)
