"""Which model a model is, by content: a canonical hash of its weights, and the training
recipe a ``train-tiny`` checkpoint records (docs/design.md, "The experiments", predictor).

The frozen flip-rate predictor must know when it is applied to one of its own training
models under another name (a ``train-tiny`` run of the same recipe, a copied folder). Two
facts identify a model:

- :func:`weights_sha256`: the sha256 of the parameters, named and ordered canonically, so it
  does not depend on the file format, the folder or the name;
- :func:`checkpoint_recipe`: what a ``train-tiny`` checkpoint's ``attncoda_train.json``
  records of the run that made it: the task, the full resolved training configuration (seed
  included) and the step. Training is pinned to the same bits on every x86-64 CPU and
  thread count (:mod:`attncoda.training.pinned`), so a checkpoint retrained with the same
  library versions has the same hash; the recipe still identifies a checkpoint retrained
  with other versions, or one the pinning did not make (a series trained before it).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from attncoda.training.checkpoints import CHECKPOINT_META

__all__ = [
    "RECIPE_IGNORES",
    "checkpoint_recipe",
    "model_identity",
    "recipe_key",
    "weights_sha256",
]

#: Recorded config keys that are no part of the recipe: the thread count is recorded, but
#: training runs on one pinned thread whatever it says.
RECIPE_IGNORES = ("threads",)


def weights_sha256(model: Any) -> str:
    """The sha256 of a torch model's parameters, computed canonically.

    For each parameter in the order of its sorted name: the name, its dtype and its shape
    (as text, each followed by a NUL byte), then its values as raw bytes of a contiguous
    CPU copy (little-endian on every x86 CPU). Tied parameters count once, under the name
    ``named_parameters`` gives them. Buffers (rotary frequencies, masks) are left out: they
    are derived from the config, not learned.

    Parameters
    ----------
    model : torch.nn.Module
        E.g. the model of :func:`attncoda.load_model`.

    Returns
    -------
    str
        ``"sha256:<64 hex digits>"``. It changes with the dtype a model is loaded in and with
        parameter names (a model class with another prefix): compare hashes of models loaded
        the same way.
    """
    import torch

    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda item: item[0]):
        tensor = param.detach().to("cpu").contiguous()
        digest.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"sha256:{digest.hexdigest()}"


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
