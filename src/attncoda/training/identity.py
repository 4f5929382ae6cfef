"""Which model a model is, by content: a canonical hash of its weights, a sketch of them
that finds near copies, and the training recipe a ``train-tiny`` checkpoint records
(docs/design.md, "The experiments", predictor).

The frozen flip-rate predictor must know when it is applied to one of its own training
models under another name, dtype or source (a ``train-tiny`` run of the same recipe, a
copied folder, the same weights in bfloat16, behind a TransformerLens bridge or nnsight, or
dequantised from a GGUF file). Three facts identify a model, all computed on the weights in
a **canonical form**: each parameter cast to float32, under its canonical name (the known
aliases of :data:`NAME_ALIASES` and :data:`WRAPPER_PREFIXES` normalised, a bridge's
``._original_component`` left out), in sorted-name order, a tied parameter once:

- :func:`weights_sha256`: the sha256 of the canonical weights. It does not depend on the
  file format, the folder, the name or the source; for a float32 model it is the digest this
  module gave before the canonical form (the hashes already recorded stay valid);
- :func:`weights_sketch`: a small random projection of the canonical weights, so that a copy
  whose values were rounded (bfloat16, float16, a fine quantisation) is still recognised:
  casting bfloat16 weights back to float32 does not give the float32 bits, so their hash
  differs, but their sketch lies within :data:`NEAR_COPY` of the original's
  (:func:`sketch_distance`);
- :func:`checkpoint_recipe`: what a ``train-tiny`` checkpoint's ``attncoda_train.json``
  records of the run that made it: the task, the full resolved training configuration (seed
  included) and the step. Training is pinned to the same bits on one machine at any thread
  count (:mod:`attncoda.training.pinned`), but not across CPU vendors, so a checkpoint
  retrained elsewhere can have another hash; the recipe still identifies it, as it does one
  retrained with other library versions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.training.checkpoints import CHECKPOINT_META

__all__ = [
    "NAME_ALIASES",
    "NEAR_COPY",
    "RECIPE_IGNORES",
    "SKETCH_SIZE",
    "WRAPPER_PREFIXES",
    "canonical_parameters",
    "checkpoint_recipe",
    "model_identity",
    "recipe_key",
    "sketch_distance",
    "unwrapped",
    "weights_sha256",
    "weights_sketch",
]

#: Recorded config keys that are no part of the recipe: the thread count is recorded, but
#: training runs on one pinned thread whatever it says.
RECIPE_IGNORES = ("threads",)
#: Parameter names that name the same weights under another loader, as ``(pattern, the
#: canonical name's part)``: GPT-NeoX's unembedding, stored as ``embed_out`` and named
#: ``lm_head`` by transformers 5 (its own ``WeightRenaming``), is ``lm_head``.
NAME_ALIASES: tuple[tuple[str, str], ...] = ((r"^embed_out\.", "lm_head."),)
#: Prefixes that a wrapper module puts before every parameter name: ``torch.compile``'s
#: ``_orig_mod.`` and ``DataParallel``'s ``module.``. Left out when every name has it.
WRAPPER_PREFIXES = ("_orig_mod.", "module.")
#: Coordinates of :func:`weights_sketch`.
SKETCH_SIZE = 128
#: The largest :func:`sketch_distance` at which a model is a near copy of another: twice
#: bfloat16's unit roundoff ``2**-8``. Rounding every float32 weight to bfloat16 (8
#: significant bits, round to nearest) moves each by at most ``2**-8`` of itself, so the
#: whole vector by at most ``2**-8`` of its norm (about ``2**-8 / sqrt(3)`` for rounding
#: errors spread evenly); the factor 2 leaves room for the sketch's distortion of the two
#: norms it compares (with 128 coordinates each norm is kept within a factor ``sqrt(2)``
#: but with a probability below ``1e-6``, Johnson-Lindenstrauss). The rule for near copies:
#: a copy rounded as finely as bfloat16 (float16, GGUF's 8-bit Q8_0: measured 0.002 to
#: 0.006) is the model; a coarser quantisation (Q5_0, Q4_0: 0.015 to 0.094) is another.
NEAR_COPY = 2.0**-7

_BRIDGE_WRAP = "._original_component"
#: splitmix64's constants (Steele, Lea and Flood 2014): the bucket and sign of each weight.
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_CHUNK = 1 << 20


def weights_sha256(model: Any) -> str:
    """The sha256 of a torch model's weights in their canonical form.

    For each parameter of :func:`canonical_parameters` (sorted by canonical name, tied ones
    once, cast to float32): the name, its dtype (``torch.float32``) and its shape (as text,
    each followed by a NUL byte), then its values as raw bytes of a contiguous CPU copy
    (little-endian on every x86 CPU). Buffers (rotary frequencies, masks) are left out: they
    are derived from the config, not learned.

    A TransformerLens ``TransformerBridge`` is hashed as the Hugging Face model it wraps, and
    an nnsight ``LanguageModel`` as its module (:func:`unwrapped`). Parameters a device map
    offloaded (to the disk or the CPU: they wait on the ``meta`` device) are read from
    accelerate's weights map, one at a time, so an offloaded model has the hash of the same
    model loaded whole.

    Parameters
    ----------
    model : torch.nn.Module, TransformerBridge or nnsight LanguageModel
        E.g. the model of :func:`attncoda.load_model`, in any dtype.

    Returns
    -------
    str
        ``"sha256:<64 hex digits>"``. A float32 model has the digest of its own bits. A
        model loaded in another dtype has the digest of its values cast to float32, which
        are not the float32 original's (bfloat16 dropped their low bits): such a copy is
        known by :func:`weights_sketch` instead.

    Raises
    ------
    AttncodaError
        A parameter on the ``meta`` device with no offloaded copy to read.
    """
    import torch

    digest = hashlib.sha256()
    for name, tensor in canonical_parameters(model):
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"


def weights_sketch(model: Any) -> tuple[float, ...]:
    """A random projection of a model's canonical weights to :data:`SKETCH_SIZE` numbers.

    A CountSketch (Charikar, Chen and Farach-Colton 2002), a sparse random projection: every
    weight ``w`` of :func:`canonical_parameters` is added, with a sign ``±1``, to one of the
    ``SKETCH_SIZE`` coordinates; the bucket and the sign are bits of the splitmix64 hash of
    the weight's flat index in its parameter, salted by the sha256 of the parameter's
    canonical name. So the projection is fixed (the same on every machine and library
    version), linear, and preserves norms and distances up to the Johnson-Lindenstrauss
    distortion of its size. Sums are in float64.

    Parameters
    ----------
    model : torch.nn.Module, TransformerBridge or nnsight LanguageModel
        As for :func:`weights_sha256`.

    Returns
    -------
    tuple of float, length SKETCH_SIZE
        In the units of the weights. Compare two with :func:`sketch_distance`.
    """
    import numpy as np

    mix1, mix2, golden = np.uint64(_MIX1), np.uint64(_MIX2), np.uint64(_GOLDEN)
    s30, s27, s31, s63 = (np.uint64(k) for k in (30, 27, 31, 63))
    low = np.uint64(SKETCH_SIZE - 1)
    sketch = np.zeros(SKETCH_SIZE, dtype=np.float64)
    for name, tensor in canonical_parameters(model):
        values = tensor.reshape(-1).numpy()
        salt = np.uint64(int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little"))
        for start in range(0, values.size, _CHUNK):
            chunk = values[start : start + _CHUNK].astype(np.float64)
            z = np.arange(start, start + chunk.size, dtype=np.uint64) * golden + salt
            z ^= z >> s30
            z *= mix1
            z ^= z >> s27
            z *= mix2
            z ^= z >> s31
            chunk[(z >> s63).astype(bool)] *= -1.0
            sketch += np.bincount((z & low).astype(np.intp), chunk, minlength=SKETCH_SIZE)
    return tuple(float(v) for v in sketch)


def sketch_distance(sketch: Sequence[float], reference: Sequence[float]) -> float:
    """The distance between two :func:`weights_sketch` values, relative to ``reference``'s
    norm: ``||sketch - reference|| / ||reference||`` (``inf`` for sketches of different
    sizes or a zero reference). A model is a near copy of the reference's model when it is
    at most :data:`NEAR_COPY`."""
    if len(sketch) != len(reference):
        return math.inf
    norm = math.sqrt(sum(r * r for r in reference))
    if norm == 0:
        return math.inf
    return math.sqrt(sum((a - r) ** 2 for a, r in zip(sketch, reference, strict=True))) / norm


def canonical_parameters(model: Any) -> list[tuple[str, Any]]:
    """A model's weights in their canonical form: ``(canonical name, float32 CPU tensor)``
    per parameter, sorted by name, a tied parameter once.

    The canonical name is the Hugging Face name (a bridge's ``._original_component`` left
    out), without a wrapper's prefix (:data:`WRAPPER_PREFIXES`) and with the aliases of
    :data:`NAME_ALIASES` replaced. A parameter tied to another (the same object, or the same
    storage) counts once, under the first name ``named_parameters`` gives it. An offloaded
    parameter is read from its device map's weights map.

    Raises
    ------
    AttncodaError
        A parameter on the ``meta`` device with no offloaded copy to read.
    """
    import torch

    inner = unwrapped(model)
    offloaded = _offloaded(inner)
    found = _hf_parameters(inner)
    for prefix in WRAPPER_PREFIXES:
        if found and all(name.startswith(prefix) for name, _, _ in found):
            found = [(name[len(prefix) :], raw, p) for name, raw, p in found]
    out = []
    for name, raw, param in found:
        value = param.detach()
        if value.device.type == "meta":
            if raw not in offloaded:
                raise AttncodaError(
                    f"cannot hash parameter {name!r}: it is on the meta device and no device "
                    f"map holds an offloaded copy; load the model with its weights (in memory "
                    f"or offloaded by a device map)"
                )
            value = offloaded[raw]()
            if value.shape != param.shape:
                raise AttncodaError(
                    f"cannot hash parameter {name!r}: its offloaded copy has shape "
                    f"{tuple(value.shape)}, not {tuple(param.shape)}; reload the model"
                )
        for pattern, canonical in NAME_ALIASES:
            name = re.sub(pattern, canonical, name)
        out.append((name, value.to(device="cpu", dtype=torch.float32).contiguous()))
    return sorted(out, key=lambda item: item[0])


def unwrapped(model: Any) -> Any:
    """The Hugging Face model a ``TransformerBridge`` or an nnsight model wraps; ``model``
    itself otherwise."""
    names = {cls.__name__ for cls in type(model).__mro__}
    if "TransformerBridge" in names and hasattr(getattr(model, "original_model", None), "config"):
        return model.original_model
    if ("NNsight" in names or "Envoy" in names) and hasattr(
        getattr(model, "_module", None), "named_parameters"
    ):
        return model._module
    return model


def _hf_parameters(model: Any) -> list[tuple[str, str, Any]]:
    """``(Hugging Face name, module name, parameter)`` of every parameter, tied ones once.

    A plain model gives ``named_parameters``. A bridge wraps each module of the model it
    boots from in place, keeping the module as ``_original_component`` beside parts of its
    own (split or joined projections): only the original modules are followed, and the
    ``._original_component`` step is left out of the name.
    """
    found: list[tuple[str, str, Any]] = []
    seen: set[Any] = set()

    def walk(module: Any, name: str, raw: str) -> None:
        original = module._modules.get(_BRIDGE_WRAP[1:])
        if original is not None:
            walk(original, name, f"{raw}{_BRIDGE_WRAP[1:]}.")
            return
        for key, param in module._parameters.items():
            if param is None or id(param) in seen:
                continue
            storage = _storage(param)
            if storage is not None and storage in seen:
                continue
            seen.update({id(param), storage} - {None})
            found.append((name + key, raw + key, param))
        for key, child in module._modules.items():
            if child is not None:
                walk(child, f"{name}{key}.", f"{raw}{key}.")

    walk(model, "", "")
    return found


def _storage(param: Any) -> tuple | None:
    """Where a parameter's values live (pointer, shape, strides, dtype), so that two
    parameters tied by sharing storage count once; ``None`` on the ``meta`` device."""
    if param.device.type == "meta":
        return None
    return (param.device.type, param.data_ptr(), tuple(param.shape), param.stride(), param.dtype)


def _offloaded(model: Any) -> dict[str, Callable[[], Any]]:
    """Full parameter name -> a reader of its offloaded value, for every parameter an
    accelerate hook keeps in a weights map (the disk or CPU offload of a device map)."""
    found: dict[str, Callable[[], Any]] = {}
    for prefix, module in model.named_modules():
        hook = getattr(module, "_hf_hook", None)
        for one in getattr(hook, "hooks", None) or ([hook] if hook is not None else []):
            weights = getattr(one, "weights_map", None)
            if weights is None:
                continue
            for local, _ in module.named_parameters():
                if local in weights:
                    full = f"{prefix}.{local}" if prefix else local
                    found.setdefault(full, functools.partial(weights.__getitem__, local))
    return found


def checkpoint_recipe(folder: str | os.PathLike[str] | None) -> dict[str, Any] | None:
    """The training recipe a ``train-tiny`` checkpoint folder records, or ``None``.

    Parameters
    ----------
    folder : str, path-like or None
        A checkpoint folder (``.../step2000``).

    Returns
    -------
    dict or None
        ``{"config": ..., "step": N}``: the recorded training configuration (task, task
        definition or corpus sha256, size, steps, seed, window, batch size, lr, warmup,
        weight decay, format) without :data:`RECIPE_IGNORES`, and the checkpoint's step.
        ``None`` for anything else (a hub id, a pretrained model, an unreadable record).
    """
    if folder is None:
        return None
    try:
        data = json.loads((Path(folder) / CHECKPOINT_META).read_text(encoding="utf-8"))
        config, step = data["config"], data["step"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(config, dict) or isinstance(step, bool) or not isinstance(step, int):
        return None
    return {
        "config": {k: v for k, v in config.items() if k not in RECIPE_IGNORES},
        "step": step,
    }


def recipe_key(recipe: dict[str, Any] | None) -> str | None:
    """A recipe as canonical JSON text (sorted keys), so that equal recipes compare equal."""
    if recipe is None:
        return None
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))


def model_identity(model: Any, folder: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """What identifies a loaded model by content:
    ``{"weights_sha256", "weights_sketch", "recipe"}``.

    Parameters
    ----------
    model : torch.nn.Module, TransformerBridge or nnsight LanguageModel
        The loaded model, in any dtype (:func:`weights_sha256` and :func:`weights_sketch`
        of its canonical weights).
    folder : str, path-like or None
        The local folder it was loaded from, if any (:func:`checkpoint_recipe` of it:
        ``None`` unless it is a ``train-tiny`` checkpoint).
    """
    return {
        "weights_sha256": weights_sha256(model),
        "weights_sketch": list(weights_sketch(model)),
        "recipe": checkpoint_recipe(folder),
    }
