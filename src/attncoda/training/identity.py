"""Which model a model is, by content: a canonical hash of its weights, and the training
recipe a ``train-tiny`` checkpoint records (docs/design.md, "The experiments", predictor).

The frozen flip-rate predictor must know when it is applied to one of its own training
models under another name (a ``train-tiny`` run of the same recipe, a copied folder). Two
facts identify a model:

- :func:`weights_sha256`: the sha256 of the parameters, named and ordered canonically, so it
  does not depend on the file format, the folder or the name;
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
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attncoda._errors import AttncodaError
from attncoda.training.checkpoints import CHECKPOINT_META

__all__ = [
    "RECIPE_IGNORES",
    "checkpoint_recipe",
    "model_identity",
    "recipe_key",
    "unwrapped",
    "weights_sha256",
]

#: Recorded config keys that are no part of the recipe: the thread count is recorded, but
#: training runs on one pinned thread whatever it says.
RECIPE_IGNORES = ("threads",)

_BRIDGE_WRAP = "._original_component"


def weights_sha256(model: Any) -> str:
    """The sha256 of a torch model's parameters, computed canonically.

    For each parameter in the order of its sorted name: the name, its dtype and its shape
    (as text, each followed by a NUL byte), then its values as raw bytes of a contiguous
    CPU copy (little-endian on every x86 CPU). Tied parameters count once, under the name
    ``named_parameters`` gives them. Buffers (rotary frequencies, masks) are left out: they
    are derived from the config, not learned.

    A TransformerLens ``TransformerBridge`` is hashed as the Hugging Face model it wraps
    (``original_model``, under Hugging Face's parameter names, without the
    ``._original_component`` the bridge puts in them), and an nnsight
    ``LanguageModel`` as its module: a wrapped model has the hash of the model itself.
    Parameters a device map offloaded (to the disk or the CPU: they wait on the ``meta``
    device) are read from accelerate's weights map, one at a time, so an offloaded model has
    the hash of the same model loaded whole.

    Parameters
    ----------
    model : torch.nn.Module, TransformerBridge or nnsight LanguageModel
        E.g. the model of :func:`attncoda.load_model`.

    Returns
    -------
    str
        ``"sha256:<64 hex digits>"``. It changes with the dtype a model is loaded in and with
        parameter names (a model class with another prefix): compare hashes of models loaded
        the same way.

    Raises
    ------
    AttncodaError
        A parameter on the ``meta`` device with no offloaded copy to read.
    """
    import torch

    inner = unwrapped(model)
    offloaded = _offloaded(inner)
    digest = hashlib.sha256()
    for name, raw, param in sorted(_hf_parameters(inner), key=lambda item: item[0]):
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
            value = value.to(param.dtype)
        tensor = value.to("cpu").contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"


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
    seen: set[int] = set()

    def walk(module: Any, name: str, raw: str) -> None:
        original = module._modules.get(_BRIDGE_WRAP[1:])
        if original is not None:
            walk(original, name, f"{raw}{_BRIDGE_WRAP[1:]}.")
            return
        for key, param in module._parameters.items():
            if param is not None and id(param) not in seen:
                seen.add(id(param))
                found.append((name + key, raw + key, param))
        for key, child in module._modules.items():
            if child is not None:
                walk(child, f"{name}{key}.", f"{raw}{key}.")

    walk(model, "", "")
    return found


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
    """What identifies a loaded model by content: ``{"weights_sha256", "recipe"}``.

    Parameters
    ----------
    model : torch.nn.Module
        The loaded model (:func:`weights_sha256` of it).
    folder : str, path-like or None
        The local folder it was loaded from, if any (:func:`checkpoint_recipe` of it:
        ``None`` unless it is a ``train-tiny`` checkpoint).
    """
    return {"weights_sha256": weights_sha256(model), "recipe": checkpoint_recipe(folder)}
